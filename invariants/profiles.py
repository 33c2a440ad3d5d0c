"""Hypothesis profiles: a fast default for every run, and a thorough one for deep searches.

Both switch off the example database and deadlines: a run must be reproduced
exactly from its seed alone, and the reference subject is slow on purpose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hypothesis import settings

PROFILES: dict[str, dict[str, object]] = {
    "default": {"max_examples": 50, "stateful_step_count": 20},
    "thorough": {"max_examples": 300, "stateful_step_count": 40},
}

DEFAULT_PROFILE = "default"

# Any seed reproduces a run exactly; this one is used when none is given.
DEFAULT_SEED = 20240901


def register_profiles() -> None:
    """Register pagecheck-<name>, and pagecheck-<name>-noshrink for runs that only ask whether a check fails.

    Mutation testing selects the no-shrink variant with --hypothesis-profile:
    it needs the first counterexample, not the smallest.
    """
    # Imported here: the pytest plugin reads this module's constants without loading Hypothesis.
    from hypothesis import HealthCheck, Phase, settings

    search_phases = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target)
    # The explain phase costs seconds per failure (it loads libcst) and adds nothing the message lacks.
    all_phases = (*search_phases, Phase.shrink)
    for name, options in PROFILES.items():
        for suffix, phases in (("", all_phases), ("-noshrink", search_phases)):
            settings.register_profile(
                f"pagecheck-{name}{suffix}",
                database=None,
                deadline=None,
                print_blob=False,
                phases=phases,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                **options,
            )


def load_profile(name: str) -> None:
    if name not in PROFILES:
        raise ValueError(f"profile={name!r} is not one of {sorted(PROFILES)}")
    from hypothesis import settings

    settings.load_profile(f"pagecheck-{name}")


def shared_examples(parts: int) -> "settings":
    """The loaded profile, its max_examples shared among `parts` parametrised copies of one check.

    For a search split by a parameter (one copy per dtype): together the
    copies draw what the unsplit check drew. Used as a decorator, so it reads
    the profile when the test module is imported, after pytest_configure has
    loaded it.
    """
    from hypothesis import settings

    if parts < 1:
        raise ValueError(f"parts={parts!r} must be at least 1")
    return settings(settings.default, max_examples=max(1, settings.default.max_examples // parts))
