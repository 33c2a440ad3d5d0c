"""The reference subject with rejection messages that name no field: every rejection still holds, and the
suite records advice instead of a failure."""

from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from pagecheck.reference.subject import paged_attention as _reference


def paged_attention(*args, **kwargs):
    try:
        return _reference(*args, **kwargs)
    except ValueError:
        raise ValueError("rejected") from None
