"""Overlay on correct/: gathers each request's pages into dense K/V and hands them to MLX's fused SDPA."""

import mlx.core as mx


def gather_dense(key_pages, value_pages, block_table, context_lens, page_size):
    keys, values = [], []
    for row in range(block_table.shape[0]):
        pages = [int(p) for p in block_table[row].tolist() if p >= 0]
        keys.append(mx.concatenate([key_pages[p] for p in pages], axis=1))
        values.append(mx.concatenate([value_pages[p] for p in pages], axis=1))
    return keys, values


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    keys, values = gather_dense(key_pages, value_pages, block_table, context_lens, page_size)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    rows = []
    for row, (k, v) in enumerate(zip(keys, values)):
        n = int(context_lens[row].item())
        rows.append(mx.fast.scaled_dot_product_attention(query[row : row + 1], k[None, :, :n], v[None, :, :n],
                                                         scale=scale, mask=mask))
    return mx.concatenate(rows)
