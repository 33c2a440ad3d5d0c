"""The seeded request trace serve-bench replays, and the hash that identifies it.

The course's trace: 16 requests, prompts of 128..1024 tokens, 32..128 output
tokens, drawn uniformly (bounds included) from one seed; prompt token ids are
uniform over the vocabulary. The hash covers every number of the trace, so two
runs with the same hash replayed exactly the same requests.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from pagecheck.serving.request import Request

COURSE_NUM_REQUESTS = 16
# The most requests a trace holds: each is a prompt of up to the model's context in host memory.
MAX_TRACE_REQUESTS = 100_000
# The most prompt tokens a trace may hold at its longest (requests x the longest prompt): each is a Python int in a
# tuple, some 36 bytes, so 8M of them is about 300 MB before anything is served (and days of serving).
MAX_TRACE_TOKENS = 8_000_000
COURSE_PROMPT_LENS = (128, 1024)
COURSE_OUTPUT_LENS = (32, 128)


@dataclass(frozen=True)
class TraceRequest:
    prompt: tuple[int, ...]
    max_new_tokens: int


@dataclass(frozen=True)
class ServeTrace:
    seed: int
    vocab_size: int
    requests: tuple[TraceRequest, ...]

    @property
    def sha256(self) -> str:
        payload = {
            "seed": self.seed,
            "vocab_size": self.vocab_size,
            "requests": [[list(r.prompt), r.max_new_tokens] for r in self.requests],
        }
        return hashlib.sha256(json.dumps(payload, separators=(",", ":")).encode()).hexdigest()

    @property
    def prompt_tokens(self) -> int:
        return sum(len(r.prompt) for r in self.requests)

    @property
    def output_tokens(self) -> int:
        return sum(r.max_new_tokens for r in self.requests)

    def fresh_requests(self) -> list[Request]:
        """New Request objects for one run (the scheduler updates them in place)."""
        return [Request(list(r.prompt), r.max_new_tokens, request_id) for request_id, r in enumerate(self.requests)]

    def describe(self) -> dict[str, object]:
        prompts = [len(r.prompt) for r in self.requests]
        outputs = [r.max_new_tokens for r in self.requests]
        return {
            "seed": self.seed,
            "sha256": self.sha256,
            "num_requests": len(self.requests),
            "prompt_lens": prompts,
            "output_lens": outputs,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
        }


def course_trace(
    seed: int,
    vocab_size: int,
    num_requests: int = COURSE_NUM_REQUESTS,
    prompt_lens: tuple[int, int] = COURSE_PROMPT_LENS,
    output_lens: tuple[int, int] = COURSE_OUTPUT_LENS,
) -> ServeTrace:
    for name, (low, high) in (("prompt_lens", prompt_lens), ("output_lens", output_lens)):
        if not 1 <= low <= high:
            raise ValueError(f"{name}={(low, high)} must satisfy 1 <= low <= high")
    if not 0 < num_requests <= MAX_TRACE_REQUESTS:
        raise ValueError(f"num_requests must be in 1..{MAX_TRACE_REQUESTS}, got {num_requests}")
    if num_requests * prompt_lens[1] > MAX_TRACE_TOKENS:
        raise ValueError(f"num_requests={num_requests} prompts of up to {prompt_lens[1]} tokens may hold "
                         f"{num_requests * prompt_lens[1]:,} tokens, above the {MAX_TRACE_TOKENS:,} a trace holds")
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(num_requests):
        prompt_len = int(rng.integers(prompt_lens[0], prompt_lens[1], endpoint=True))
        output_len = int(rng.integers(output_lens[0], output_lens[1], endpoint=True))
        prompt = tuple(int(token) for token in rng.integers(0, vocab_size, prompt_len))
        requests.append(TraceRequest(prompt, output_len))
    return ServeTrace(seed=seed, vocab_size=vocab_size, requests=tuple(requests))
