from ._ext import paged_attention  # noqa: F401
