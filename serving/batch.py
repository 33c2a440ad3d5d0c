"""Continuous batching: admit requests into free decode slots, prefill them in chunks, decode them together.

Every scheduler step:
1. admission: while a slot is free (and, with a KV budget, the worst-case KV
   bytes of the admitted requests plus this one fit), the next waiting
   request gets the slot and one cache per layer;
2. prefill: the oldest admitted request that is still prefilling runs one
   chunk of at most `prefill_step` tokens; after its last chunk it samples its
   first token and joins the decode batch in its slot;
3. decode: every request in the decode batch feeds its newest token and
   samples the next one; a request with max_new_tokens outputs leaves, its
   pages go back to the pools and its slot is free for the next step.

Decode steps are pipelined (`overlap=True`, the default): a step's sampled
tokens stay on the device and feed the next step's graph directly, and the
host reads them back only after it has built and submitted that next step,
so building step N+1 overlaps the device running step N. A prefill chunk
is built while the device runs the decode step before it, and reads that
step's tokens back (decode time) once the chunk is submitted. Nothing the
scheduler decides needs a token's value (requests stop at max_new_tokens), so
the outputs are the same as with `overlap=False`, which reads every step's
tokens before the next begins. A step's decode time includes waiting for the
tokens it reads back.

The paged block table is built once per phase of a step and shared by every
layer (serving/step_page_table.py). Whatever happens, including an error part
way through, every admitted request's storage is released exactly once when
batch_generate returns or raises.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from pagecheck.serving.kv_traffic import KvTraffic
from pagecheck.impl.page_pool import is_int
from pagecheck.serving.request import Request
from pagecheck.serving.serving_kv import DEFAULT_PAGE_SIZE, KvUsage, ServingKv, serving_kv_for

__all__ = ["GenerationResult", "Request", "SchedulerState", "StepRecord", "batch_generate"]

DEFAULT_BATCH_SIZE = 4
# Decode slots at most: a step's graph, its bookkeeping and its KV reservation grow with the slots, filled or
# not (100000 slots took over 3 GiB and minutes before the first step), and serving here needs a few dozen.
MAX_BATCH_SIZE = 1024
DEFAULT_PREFILL_STEP = 128


@dataclass(frozen=True)
class StepRecord:
    """What one scheduler step did and what the KV storage looked like after it."""

    prefill_tokens: int
    prefill_seconds: float
    decode_batch: int  # requests that decoded a token this step
    decode_seconds: float
    admitted: int  # requests holding caches during the step: after its admissions, before any finished
    usage: KvUsage
    traffic: KvTraffic  # totals so far
    table_builds: int  # block tables built so far (paged storage)
    # Parts of decode_seconds: building the step's graph on the host, MLX's submit of it (mx.async_eval; 0
    # without overlap, where the read-back evaluates it), and waiting for sampled tokens (read-backs).
    decode_build_seconds: float = 0.0
    decode_submit_seconds: float = 0.0
    decode_wait_seconds: float = 0.0


@dataclass
class GenerationResult:
    outputs: dict[int, list[int]]
    steps: list[StepRecord] = field(default_factory=list)
    wall_seconds: float = 0.0


@dataclass(frozen=True)
class SchedulerState:
    """Passed to `on_step` after every step: the admitted requests (with their caches) and the storage."""

    step_idx: int
    requests: list[Request]
    kv: ServingKv


def batch_generate(
    model: Any,
    requests: Sequence[Request],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    prefill_step: int = DEFAULT_PREFILL_STEP,
    page_size: int = DEFAULT_PAGE_SIZE,
    kv_budget_bytes: int | None = None,
    on_step: Callable[[SchedulerState], None] | None = None,
    overlap: bool = True,
) -> GenerationResult:
    """Greedy-decode every request; outputs by request id. Requests are updated in place.

    `on_step` sees each request's `output` as read back so far; with `overlap` the newest token of a
    request that decoded in that step is still `unread`.
    """
    _check_arguments(requests, batch_size, prefill_step, kv_budget_bytes, overlap)
    config = model.config
    too_long = [r.request_id for r in requests if r.max_context > config.max_context]
    if too_long:
        raise ValueError(f"requests {too_long} hold more than {config.name}'s context of {config.max_context} "
                         "positions (prompt and output together)")
    kv = serving_kv_for(
        model.attention_path, config.num_layers, batch_size,
        2 * config.num_kv_heads * config.head_dim * model.dtype.size, page_size,
    )
    if kv_budget_bytes is not None:
        too_big = [r.request_id for r in requests if kv.projected_bytes([r.max_context]) > kv_budget_bytes]
        if too_big:
            raise ValueError(f"kv_budget_bytes={kv_budget_bytes} is below what requests {too_big} need alone")
    scheduler = _Scheduler(model, kv, batch_size, prefill_step, kv_budget_bytes, overlap)
    result = GenerationResult(outputs={})
    waiting = deque(requests)
    started = time.perf_counter()
    try:
        while waiting or scheduler.admitted:
            result.steps.append(scheduler.step(waiting))
            if on_step is not None:
                on_step(SchedulerState(len(result.steps) - 1, list(scheduler.admitted.values()), kv))
        scheduler.read_back()
    finally:
        kv.close_all()
        for request in requests:
            request.caches, request.slot = None, None
    result.wall_seconds = time.perf_counter() - started
    result.outputs = {request.request_id: list(request.output) for request in requests}
    return result


def _check_arguments(
    requests: Sequence[Request], batch_size: int, prefill_step: int, kv_budget_bytes: int | None, overlap: bool
) -> None:
    if not isinstance(overlap, bool):
        raise ValueError(f"overlap must be a bool, got {overlap!r}")
    for name, value in (("batch_size", batch_size), ("prefill_step", prefill_step)):
        if not is_int(value) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if batch_size > MAX_BATCH_SIZE:
        raise ValueError(f"batch_size={batch_size} is above the {MAX_BATCH_SIZE} decode slots serving takes")
    if kv_budget_bytes is not None and (not is_int(kv_budget_bytes) or kv_budget_bytes <= 0):
        raise ValueError(f"kv_budget_bytes must be None or a positive int, got {kv_budget_bytes!r}")
    ids = [request.request_id for request in requests]
    if len(set(ids)) != len(ids):
        raise ValueError(f"request ids must be unique, got {ids}")
    started = [request.request_id for request in requests if request.prefilled or request.num_outputs]
    if started:
        raise ValueError(f"requests {started} were already run; pass fresh Request objects")


class _Scheduler:
    def __init__(
        self,
        model: Any,
        kv: ServingKv,
        batch_size: int,
        prefill_step: int,
        kv_budget_bytes: int | None,
        overlap: bool,
    ) -> None:
        self.model = model
        self.overlap = overlap
        self.kv = kv
        self.batch_size = batch_size
        self.prefill_step = prefill_step
        self.kv_budget_bytes = kv_budget_bytes
        self.traffic = KvTraffic()
        self.admitted: dict[int, Request] = {}  # by request id, in admission order
        self.prefilling: deque[Request] = deque()
        self.decoding: dict[int, Request] = {}  # by slot
        self.free_slots = list(range(batch_size))
        # The newest decode step's sampled tokens (int32 [batch_size], maybe still computing) and the
        # request in each slot that has one of them unread.
        self.in_flight: mx.array | None = None
        self.in_flight_rows: dict[int, Request] = {}
        self.read_back_seconds = 0.0  # waiting for tokens, charged to the decode time of the step

    def step(self, waiting: deque[Request]) -> StepRecord:
        if self.kv.table is not None:
            self.kv.table.start_step()
        self._admit(waiting)
        holding = len(self.admitted)  # a request may be admitted, served and finished within one step
        self.read_back_seconds = 0.0
        prefill_tokens, prefill_seconds = self._prefill()
        decode_batch, decode_seconds, build_seconds, submit_seconds = self._decode()
        decode_seconds += self.read_back_seconds
        return StepRecord(
            prefill_tokens=prefill_tokens,
            prefill_seconds=prefill_seconds,
            decode_batch=decode_batch,
            decode_seconds=decode_seconds,
            decode_build_seconds=build_seconds,
            decode_submit_seconds=submit_seconds,
            decode_wait_seconds=self.read_back_seconds if decode_batch else 0.0,
            admitted=holding,
            usage=self.kv.usage(),
            traffic=KvTraffic(self.traffic.repack_bytes, self.traffic.gather_bytes),
            table_builds=0 if self.kv.table is None else self.kv.table.builds,
        )

    def _admit(self, waiting: deque[Request]) -> None:
        while waiting and self.free_slots:
            request = waiting[0]
            if self.kv_budget_bytes is not None:
                contexts = [admitted.max_context for admitted in self.admitted.values()] + [request.max_context]
                if self.kv.projected_bytes(contexts) > self.kv_budget_bytes:
                    return
            waiting.popleft()
            request.slot = self.free_slots.pop(0)
            request.caches = self.kv.open_request(request.request_id, request.max_context)
            self.admitted[request.request_id] = request
            self.prefilling.append(request)

    def _prefill(self) -> tuple[int, float]:
        if not self.prefilling:
            return 0, 0.0
        request = self.prefilling[0]
        started = time.perf_counter()
        read_before = self.read_back_seconds
        # The device runs the decode step queued before this chunk while the host builds the chunk; the
        # chunk then waits for that step's tokens (read back once the chunk is submitted, counted as
        # decode time) before it waits for its own work.
        tokens = request.prefill_step(self.model, self.prefill_step, self.traffic, before_wait=self.read_back)
        seconds = time.perf_counter() - started - (self.read_back_seconds - read_before)
        if request.is_prefilled:
            self.prefilling.popleft()
            if request.is_done:
                self._finish(request)
            else:
                self.kv.admit_to_decode(request.request_id, request.slot)
                self.decoding[request.slot] = request
        return tokens, seconds

    def _decode(self) -> tuple[int, float, float, float]:
        """One decode step; returns (requests decoded, seconds spent here other than reading tokens back, and of
        those the graph's build and its submit)."""
        if not self.decoding:
            return 0, 0.0, 0.0, 0.0
        started = time.perf_counter()
        rows = [self.decoding.get(slot) for slot in range(self.batch_size)]
        hidden = self.model(self._input_tokens(rows), self._offsets(rows), self.kv.decode_caches, self.traffic)
        sampled = mx.argmax(self.model.logits(hidden[:, -1]), axis=-1).astype(mx.int32)
        graph_built = time.perf_counter()
        if self.overlap:
            mx.async_eval(sampled)
        built = time.perf_counter()
        self.read_back()
        waited = time.perf_counter()
        self.in_flight = sampled
        self.in_flight_rows = {slot: request for slot, request in self.decoding.items()}
        for slot, request in list(self.decoding.items()):
            request.unread += 1
            if request.is_done:
                del self.decoding[slot]
                self._finish(request)
        finished = time.perf_counter()
        if not self.overlap:
            self.read_back()
        # Every read_back's wait (on the previous step, or on this one without overlap) reaches the step's
        # decode time through read_back_seconds, in step().
        decoded = sum(r is not None for r in rows)
        submit = built - graph_built if self.overlap else 0.0
        return decoded, (built - started) + (finished - waited), graph_built - started, submit

    def _input_tokens(self, rows: list[Request | None]) -> mx.array:
        """int32 [batch, 1]: each row's newest token, taken on the device from the step in flight if unread."""
        from_device = [r is not None and r.unread > 0 for r in rows]
        if any(from_device) and (self.in_flight is None or any(
            unread and self.in_flight_rows.get(slot) is not rows[slot] for slot, unread in enumerate(from_device)
        )):
            raise RuntimeError("a decoding request's unread token is not in the step in flight")
        if all(from_device):
            return self.in_flight[:, None]
        known = mx.array([[r.output[-1] if r is not None and not r.unread else 0] for r in rows], dtype=mx.int32)
        if not any(from_device):
            return known
        return mx.where(mx.array(from_device)[:, None], self.in_flight[:, None], known)

    def _offsets(self, rows: list[Request | None]) -> mx.array:
        return mx.array([0 if r is None else r.context_len for r in rows], dtype=mx.int32)

    def read_back(self) -> None:
        """Read the in-flight step's tokens into its requests' outputs (waits for the device)."""
        if self.in_flight is None:
            return
        started = time.perf_counter()
        values = self.in_flight.tolist()
        for slot, request in self.in_flight_rows.items():
            request.output.append(values[slot])
            request.unread -= 1
        self.in_flight, self.in_flight_rows = None, {}
        self.read_back_seconds += time.perf_counter() - started

    def _finish(self, request: Request) -> None:
        self.kv.close_request(request.request_id)
        del self.admitted[request.request_id]
        self.free_slots.append(request.slot)
        self.free_slots.sort()
        request.caches, request.slot = None, None
