"""One generation request: a prompt prefilled in chunks, then greedy decode until max_new_tokens."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from pagecheck.serving.kv_traffic import KvTraffic
from pagecheck.impl.page_pool import is_int


@dataclass
class Request:
    prompt: list[int]
    max_new_tokens: int
    request_id: int = 0
    prefilled: int = 0  # prompt tokens whose K/V is cached
    output: list[int] = field(default_factory=list)  # tokens read back to the host
    # Tokens sampled on the device whose value is not read back yet (0 or 1): a pipelined decode step
    # reads the previous step's tokens only after it has submitted its own work.
    unread: int = 0
    caches: list[Any] | None = None  # one per layer while admitted
    slot: int | None = None

    def __post_init__(self) -> None:
        if not self.prompt or not all(is_int(token) and token >= 0 for token in self.prompt):
            raise ValueError(f"prompt must be a non-empty list of token ids >= 0, got {self.prompt[:8]!r}")
        if not is_int(self.max_new_tokens) or self.max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be a positive int, got {self.max_new_tokens!r}")

    @property
    def max_context(self) -> int:
        """The most tokens this request ever caches: the prompt and every output but the last."""
        return len(self.prompt) + self.max_new_tokens - 1

    @property
    def num_outputs(self) -> int:
        """Tokens sampled so far, read back or not."""
        return len(self.output) + self.unread

    @property
    def context_len(self) -> int:
        """Tokens whose K/V the caches hold now (the newest output is not fed back yet)."""
        return self.prefilled + max(self.num_outputs - 1, 0)

    @property
    def is_prefilled(self) -> bool:
        return self.prefilled == len(self.prompt)

    @property
    def is_done(self) -> bool:
        return self.num_outputs >= self.max_new_tokens

    def prefill_step(
        self, model: Any, prefill_step: int, traffic: KvTraffic, before_wait: Callable[[], None] | None = None
    ) -> int:
        """Run the next chunk of at most `prefill_step` prompt tokens; after the last, sample the first output.

        The chunk's work is submitted to the device, then `before_wait` runs (a scheduler reads back the
        decode step queued before the chunk there, so that wait is not counted as prefill), then the
        chunk is waited for. Returns the number of prompt tokens processed.
        """
        if self.caches is None:
            raise ValueError(f"request {self.request_id} has no caches; admit it first")
        if self.is_prefilled:
            raise ValueError(f"request {self.request_id} is already prefilled")
        start = self.prefilled
        stop = min(start + prefill_step, len(self.prompt))
        tokens = mx.array([self.prompt[start:stop]], dtype=mx.int32)
        hidden = model(tokens, start, self.caches, traffic)
        self.prefilled = stop
        result = mx.argmax(model.logits(hidden[:, -1]), axis=-1) if self.is_prefilled else hidden
        mx.async_eval(result)
        if before_wait is not None:
            before_wait()
        if self.is_prefilled:
            self.output.append(int(result.item()))
        else:
            mx.eval(result)
        return stop - start
