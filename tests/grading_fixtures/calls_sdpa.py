"""A submission that gathers dense K/V and hands it to MLX's fused SDPA instead of walking the pages."""

import mlx.core as mx
import numpy as np

from pagecheck.reference.attention import gather_dense
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    keys, values = gather_dense(key_pages, value_pages, block_table, context_lens, page_size)
    lens = to_numpy(context_lens).astype(np.int64)
    num_queries, width = query.shape[2], keys.shape[2]
    key_pos = np.arange(width)[None, None, None, :]
    visible = key_pos < lens[:, None, None, None]
    if mask == "causal":
        visible = visible & (key_pos <= np.arange(num_queries)[None, None, :, None] + lens[:, None, None, None] - num_queries)
    bias = mx.array(np.where(visible, 0.0, -np.inf).astype(np.float32))
    return mx.fast.scaled_dot_product_attention(
        mx.array(to_numpy(query, np.float32)), mx.array(keys.astype(np.float32)), mx.array(values.astype(np.float32)),
        scale=query.shape[-1] ** -0.5 if scale is None else scale, mask=bias,
    )
