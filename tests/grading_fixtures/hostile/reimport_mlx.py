"""Hostile: throws MLX out of sys.modules and imports it again, hoping for a fresh, untrapped SDPA."""

import importlib
import sys

import mlx.core as mx

try:
    for name in [n for n in sys.modules if n == "mlx" or n.startswith("mlx.")]:
        del sys.modules[name]
    fresh = importlib.import_module("mlx.core")
except Exception:
    fresh = mx


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    return fresh.fast.scaled_dot_product_attention(query, query, query, scale=1.0)
