"""Hostile: tries to reach the network (to send out what it sees, or to fetch a solution)."""

import socket

reached = []
for host, port in (("127.0.0.1", 22), ("10.0.0.1", 80), ("1.1.1.1", 53), ("pypi.org", 443)):
    try:
        socket.create_connection((host, port), timeout=2).close()
        reached.append(host)
    except OSError:
        pass


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    raise ValueError(f"reached {reached}")
