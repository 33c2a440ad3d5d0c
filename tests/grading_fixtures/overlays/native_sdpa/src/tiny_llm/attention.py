"""Overlay on correct/: paged attention handed to the extension's C++ kernel (src/extensions/src/kernel.cpp),
which copies each request's pages into dense K/V and calls MLX's C++ mlx::core::fast::scaled_dot_product_attention.
Nothing in Python names mx.fast, and the worker's SDPA trap (a Python attribute) never sees the call; the pools
cross to the kernel whole, through NumPy, so no gather is watched either."""

import ctypes
import os

import mlx.core as mx
import numpy as np

from .honest_attention import _check_inputs

_kernel = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "libkernel.so"))  # made by src/extensions/build.py
_P = ctypes.c_void_p


def _f32(x):
    return np.ascontiguousarray(np.asarray(x.astype(mx.float32) if isinstance(x, mx.array) else x, dtype=np.float32))


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    q, k, v = _f32(query), _f32(key_pages), _f32(value_pages)
    table, lens = np.ascontiguousarray(table, np.int64), np.ascontiguousarray(lens, np.int64)
    batch, num_q_heads, num_queries, head_dim = q.shape
    num_pages, num_kv_heads = k.shape[:2]
    out = np.zeros((batch, num_q_heads, num_queries, head_dim), np.float32)
    scale = head_dim ** -0.5 if scale is None else float(scale)
    _kernel.pc_attend(_P(q.ctypes.data), _P(k.ctypes.data), _P(v.ctypes.data), _P(table.ctypes.data),
                      _P(lens.ctypes.data), _P(out.ctypes.data), batch, num_q_heads, num_queries, head_dim, num_pages,
                      num_kv_heads, int(page_size), table.shape[1], ctypes.c_float(scale), int(mask == "causal"))
    return mx.array(out).astype(query.dtype if isinstance(query, mx.array) else mx.float32)
