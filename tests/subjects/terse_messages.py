"""The reference subject with rejection messages that name no field: each keeps only the course's phrase its test
matches (where the reference's message holds one), so every rejection still holds, the course's cases pass, and
the suite records advice instead of a failure."""

from pagecheck.invariants.course import COURSE_PHRASES
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from pagecheck.reference.subject import paged_attention as _reference

PHRASES = sorted(set(COURSE_PHRASES.values()))


def paged_attention(*args, **kwargs):
    try:
        return _reference(*args, **kwargs)
    except ValueError as exc:
        kept = [phrase for phrase in PHRASES if phrase in str(exc)]
        raise ValueError(f"rejected: {kept[0]}" if kept else "rejected") from None
