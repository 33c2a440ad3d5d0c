"""Hostile (copied at test time under a 246-character name and into a package whose folder name is not UTF-8,
beside files with such names): names that once stopped the whole grading run."""


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    return query
