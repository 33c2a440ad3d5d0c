from reference.subject import paged_attention

__all__ = ["paged_attention"]
