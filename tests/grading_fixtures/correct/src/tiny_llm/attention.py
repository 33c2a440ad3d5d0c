from pagecheck.impl.attention import paged_attention

__all__ = ["paged_attention"]
