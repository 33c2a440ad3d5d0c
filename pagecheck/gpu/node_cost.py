"""What one graph node of each kind costs on the GPU stream: building it, MLX encoding it, and the device.

A serving decode step is several hundred small nodes, so its time is the sum
of per-node costs rather than of bandwidth. For each kind of node a decode
step of qwen3-0.6b uses (batch 8, context 2048, pages of 16, bfloat16), this
chains N nodes of that kind (each takes the previous one's output; an
embedding lookup, whose input is token ids, makes N independent nodes), then
times three spans on the host clock: building the chain, `mx.async_eval`
(which returns once MLX has encoded every node for the device), and waiting
for the device to finish. Per node, medians of the repeats. A program, not
a test:

    python -m pagecheck.gpu.node_cost [--nodes 280] [--repeats 7] [--kinds add,rms_norm,...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import mlx.core as mx

from pagecheck import ext
from pagecheck.impl.attention import paged_attention
from pagecheck.impl.page_write import token_row_index, write_token_rows
from pagecheck.arg_types import positive_int

BATCH = 8
HIDDEN = 1024
NUM_Q_HEADS = 16
NUM_KV_HEADS = 8
HEAD_DIM = 128
CONTEXT = 2048
PAGE_SIZE = 16
DTYPE = mx.bfloat16
# Kinds whose node ignores its input: their nodes are independent and all evaluated.
UNCHAINED = {"quantized_embedding", "qk_norm_rope"}
# serve-bench's prefill step: the query rows of prefill_attention[op], a causal chunk (on an H100/H200 the
# warpgroup prefill, whose compiled image MLX copies and hashes at every call).
PREFILL_CHUNK = 128
# About the size of the split decode kernel's source as the attention op hands it to MLX (header and body).
BIG_SOURCE_CHARS = 43_000


def _chains() -> dict[str, tuple[mx.array, Callable[[mx.array], mx.array]]]:
    """kind -> (first input, one node of that kind applied to the previous output)."""
    keys = mx.random.split(mx.random.key(0), 6)
    hidden = mx.random.normal((BATCH, 1, HIDDEN), key=keys[0]).astype(DTYPE)
    norm_weight = mx.ones((HIDDEN,), dtype=DTYPE)
    weight, scales, biases = mx.quantize(mx.random.normal((HIDDEN, HIDDEN), key=keys[1]).astype(DTYPE) * 0.03)
    query = mx.random.normal((BATCH, NUM_Q_HEADS, 1, HEAD_DIM), key=keys[2]).astype(DTYPE)
    offsets = mx.full((BATCH,), CONTEXT - 1, dtype=mx.int32)
    pages_per_row = CONTEXT // PAGE_SIZE
    pool_shape = (BATCH * pages_per_row, NUM_KV_HEADS, PAGE_SIZE, HEAD_DIM)
    key_pages = mx.random.normal(pool_shape, key=keys[3]).astype(DTYPE)
    value_pages = mx.random.normal(pool_shape, key=keys[4]).astype(DTYPE)
    table = mx.random.permutation(BATCH * pages_per_row, key=keys[5]).astype(mx.int32).reshape(BATCH, -1)
    lens = mx.full((BATCH,), CONTEXT, dtype=mx.int32)
    token_rows = mx.random.normal((BATCH, NUM_KV_HEADS, 1, HEAD_DIM)).astype(DTYPE)
    index = token_row_index(tuple(table[:, -1].tolist()), (PAGE_SIZE - 1,) * BATCH, NUM_KV_HEADS)
    silu = mx.compile(lambda x: mx.sigmoid(x) * x * x, shapeless=True)
    ids = mx.arange(BATCH, dtype=mx.int32).reshape(BATCH, 1)
    qkv = mx.random.normal((BATCH, 1, (NUM_Q_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM)).astype(DTYPE)
    head_norm = mx.ones((HEAD_DIM,), dtype=DTYPE)
    # A prompt chunk of serve-bench's prefill step (one request, its last PREFILL_CHUNK positions of CONTEXT).
    chunk_query = mx.random.normal((1, NUM_Q_HEADS, PREFILL_CHUNK, HEAD_DIM)).astype(DTYPE)
    chunk_table, chunk_lens = table[:1], lens[:1]
    mx.eval(hidden, norm_weight, weight, scales, biases, query, key_pages, value_pages, table, lens, token_rows, qkv,
            head_norm, chunk_query, chunk_table, chunk_lens)
    scale = HEAD_DIM**-0.5
    return {
        "view": (hidden, lambda x: x.reshape(BATCH, 1, NUM_KV_HEADS, HEAD_DIM).transpose(0, 2, 1, 3)
                 .transpose(0, 2, 1, 3).reshape(BATCH, 1, HIDDEN)),
        "add": (hidden, lambda x: x + hidden),
        "rms_norm": (hidden, lambda x: mx.fast.rms_norm(x, norm_weight, 1e-6)),
        "quantized_matmul": (hidden, lambda x: mx.quantized_matmul(x, weight, scales, biases, transpose=True)),
        "compiled_silu": (hidden, silu),
        "rope": (query, lambda x: mx.fast.rope(x, HEAD_DIM, traditional=False, base=1e6, scale=1.0,
                                               offset=offsets)),
        "page_write": (key_pages, lambda pool: write_token_rows(pool, index, token_rows)),
        "quantized_embedding": (hidden, lambda _: ext.quantized_embedding(ids, weight, scales, biases, 64, 4)),
        "qk_norm_rope": (hidden, lambda _: ext.qk_norm_rope(qkv, head_norm, head_norm, offsets, NUM_Q_HEADS,
                                                            NUM_KV_HEADS, 1e-6, 1e6)[0]),
        **_custom_kernel_chains(hidden),
        "paged_attention[op]": (query, lambda q: ext.paged_attention(q, key_pages, value_pages, table, lens,
                                                                     PAGE_SIZE, scale, False)),
        "paged_attention": (query, lambda q: paged_attention(q, key_pages, value_pages, table, lens, PAGE_SIZE,
                                                             scale=scale)),
        "prefill_attention[op]": (chunk_query, lambda q: ext.paged_attention(
            q, key_pages, value_pages, chunk_table, chunk_lens, PAGE_SIZE, scale, True)),
    }  # fmt: skip


def _custom_kernel_chains(hidden: mx.array) -> dict[str, tuple[mx.array, Callable[[mx.array], mx.array]]]:
    """A one-line copy kernel through mx.fast.cuda_kernel, with and without MLX's output fill, with template
    arguments, and with a header (a comment) that makes its source as long as the attention op's (GPU only).
    MLX rebuilds a kernel's whole source at every call, so the last prices that. The grid is exactly one thread per
    element (HIDDEN * BATCH is a multiple of the block)."""
    if mx.default_device() != mx.gpu or not hasattr(mx.fast, "cuda_kernel"):
        return {}
    body = "unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = x[i];"
    copy = mx.fast.cuda_kernel(name="node_cost_copy", input_names=["x"], output_names=["y"], source=body)
    padded = mx.fast.cuda_kernel(name="node_cost_copy_padded", input_names=["x"], output_names=["y"], source=body,
                                 header="// " + "x" * BIG_SOURCE_CHARS + "\n")

    def launch(kernel, x: mx.array, init_value: float | None, template: list | None = None) -> mx.array:
        return kernel(inputs=[x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(x.size, 1, 1),
                      threadgroup=(256, 1, 1), template=template or [], init_value=init_value)[0]

    # qk_norm_rope's template arguments (a dtype and five ints), which MLX writes into the kernel's name and
    # source at every call: the same copy, so the difference from custom_kernel is theirs.
    templated = [("T", hidden.dtype)] + [(name, 1) for name in "ABCDE"]
    return {
        "custom_kernel": (hidden, lambda x: launch(copy, x, None)),
        "custom_kernel[6 template args]": (hidden, lambda x: launch(copy, x, None, templated)),
        "custom_kernel[fill]": (hidden, lambda x: launch(copy, x, 0.0)),
        "custom_kernel[fill, 43 KB source]": (hidden, lambda x: launch(padded, x, 0.0)),
    }


def time_chain(
    first: mx.array, node: Callable[[mx.array], mx.array], nodes: int, chained: bool = True
) -> tuple[float, float, float]:
    """(build, submit, wait) seconds of `nodes` nodes: a chain, or (chained False) independent nodes
    that are all kept and evaluated together."""
    mx.synchronize()
    start = time.perf_counter()
    out = first
    kept = []
    for _ in range(nodes):
        out = node(out)
        if not chained:
            kept.append(out)
    built = time.perf_counter()
    mx.async_eval(out, *kept)
    submitted = time.perf_counter()
    mx.eval(out, *kept)
    mx.synchronize()
    return built - start, submitted - built, time.perf_counter() - submitted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=positive_int, default=280, help="nodes per chain (default 280: 10 per layer)")
    parser.add_argument("--repeats", type=positive_int, default=7, help="timed chains per kind; the median is kept (default 7)")
    parser.add_argument("--kinds", default=None, help="comma-separated kinds (default: all)")
    args = parser.parse_args(argv)
    chains = _chains()
    kinds = list(chains) if args.kinds is None else args.kinds.split(",")
    unknown = [kind for kind in kinds if kind not in chains]
    if unknown:
        parser.error(f"unknown kinds {unknown}; choose from {list(chains)}")
    print(f"device {mx.default_device()}, {args.nodes} chained nodes per run, medians of {args.repeats} runs")
    print(f"{'kind':<34} {'build us':>9} {'submit us':>10} {'wait us':>8} {'total us':>9}   per node")
    for kind in kinds:
        first, node = chains[kind]
        chained = kind not in UNCHAINED
        try:
            time_chain(first, node, args.nodes, chained)  # JIT compiles and warms the buffer cache
        except RuntimeError as error:
            print(f"{kind:<34} failed: {str(error).splitlines()[0]}", flush=True)
            continue
        runs = [time_chain(first, node, args.nodes, chained) for _ in range(args.repeats)]
        build, submit, wait = (statistics.median(run[i] for run in runs) / args.nodes * 1e6 for i in range(3))
        # A space before every column: a figure wider than its column still leaves the row splittable.
        print(f"{kind:<34} {build:>9.2f} {submit:>10.2f} {wait:>8.2f} {build + submit + wait:>9.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
