"""Time one decode-step append against pool size, to show whether a page write copies the pool.

A write is O(chunk) only when MLX can donate the storage buffer, i.e. when
nothing else holds the storage at evaluation time. Two loops are timed:
  released: the caller drops the previous step's metadata before evaluating
            (the usual `metadata = cache.update_and_fetch_paged(...)` loop);
  held:     the caller keeps the previous step's metadata alive, so every
            write must copy the whole pool.
Prints a table and writes JSON (default: write_path.json).
Run from the repository root: python -m scripts.measure_page_write
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import mlx.core as mx
from tabulate import tabulate

from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache


def warm_pool(num_pages: int, num_heads: int, page_size: int, head_dim: int, dtype: mx.Dtype) -> TinyKvPagedPool:
    """A pool whose storage already has `num_pages` rows, with two free pages for the decode cache."""
    pool = TinyKvPagedPool(page_size=page_size)
    ids = [pool.allocate_page() for _ in range(num_pages)]
    token = mx.zeros((1, num_heads, 1, head_dim), dtype=dtype)
    pool.write_page_slice(ids[0], 0, token, token)
    pool.free_page(ids[-1])
    pool.free_page(ids[-2])
    pool.materialize()
    return pool


def time_appends(pool: TinyKvPagedPool, steps: int, hold_previous: bool) -> float:
    """Median seconds for one single-token append plus evaluation of the pages."""
    cache = TinyKvPagedCache(pool)
    _, num_heads, _, head_dim = pool.key_pages.shape
    token = mx.ones((1, num_heads, 1, head_dim), dtype=pool.dtype)
    mx.eval(token)
    held = None
    samples = []
    for _ in range(steps):
        start = time.perf_counter()
        metadata = cache.update_and_fetch_paged(token, token)
        mx.eval(metadata.key_pages, metadata.value_pages)
        samples.append(time.perf_counter() - start)
        held = metadata if hold_previous else None
    del held
    cache.release()
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, nargs="+", default=[16, 128, 512, 2048])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--page-size", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--json", default="write_path.json")
    args = parser.parse_args()
    dtype = getattr(mx, args.dtype)

    rows = []
    for num_pages in args.pages:
        pool = warm_pool(num_pages, args.heads, args.page_size, args.head_dim, dtype)
        released = time_appends(pool, args.steps, hold_previous=False)
        held = time_appends(pool, args.steps, hold_previous=True)
        rows.append(
            {
                "pool_pages": num_pages,
                "pool_mib": pool.storage_nbytes / 2**20,
                "append_us_released": released * 1e6,
                "append_us_held": held * 1e6,
            }
        )
        del pool
    print(
        f"device={mx.default_device()} mlx={mx.__version__} dtype={args.dtype} "
        f"H_kv={args.heads} D={args.head_dim} page_size={args.page_size} steps={args.steps}"
    )
    print(tabulate(rows, headers="keys", floatfmt=".1f"))
    with open(args.json, "w") as out:
        json.dump({"config": vars(args), "device": str(mx.default_device()), "rows": rows}, out, indent=2)


if __name__ == "__main__":
    main()
