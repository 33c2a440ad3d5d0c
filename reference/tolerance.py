"""The one tolerance table, and the one comparison against the float64 reference.

A subject's output passes when every element satisfies
    |got - want| <= atol + rtol * |want|
and no element is NaN or infinite where the reference is finite.

Why these numbers. Kernels read inputs in their storage dtype and compute in
float32, so for the 16-bit dtypes the error is dominated by rounding the
output to the storage dtype: at most one unit roundoff u (relative). The
course accepts 2e-2 for bfloat16, which is 5.12 u with u = 2**-8; float16
gets the same multiple of its own u = 2**-11, i.e. 2.5e-3. For float32 the
output rounding (u = 2**-24, 5.12 u = 3e-7) is smaller than the error of
summing a long context in a different order than the reference does, which
grows like sqrt(S) * u in practice: for S = 32768 that is about 1.1e-5, so
float32 gets 2e-5.

A check that mirrors one of the course's tests compares as the course does
(COURSE_TOLERANCES, `compare(..., course=True)`): its contexts are a few
pages, and the course holds float32 to rtol 1e-5 and atol 1e-6 against its
own float32 dense attention. Against the float64 reference that atol gets
1e-6 more, for the error of the course's float32 result itself (a few unit
roundoffs of values near 1); its 16-bit tolerance is the table's already.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pagecheck.reference.arrays import to_numpy

# Margin over one unit roundoff, taken from the course's bfloat16 tolerance.
ROUNDOFF_MULTIPLE = 2e-2 / 2.0**-8


@dataclass(frozen=True)
class Tolerance:
    dtype: str
    unit_roundoff: float
    atol: float
    rtol: float


def _from_roundoff(dtype: str, mantissa_bits: int) -> Tolerance:
    u = 2.0**-mantissa_bits
    tol = ROUNDOFF_MULTIPLE * u
    return Tolerance(dtype, u, tol, tol)


TOLERANCES: dict[str, Tolerance] = {
    "bfloat16": _from_roundoff("bfloat16", 8),
    "float16": _from_roundoff("float16", 11),
    "float32": Tolerance("float32", 2.0**-24, 2e-5, 2e-5),
}


COURSE_TOLERANCES: dict[str, Tolerance] = {**TOLERANCES, "float32": Tolerance("float32", 2.0**-24, 2e-6, 1e-5)}
# The course's assert_allclose as it compares what involves no attention (tokens read back from a cache against
# the tokens written): dtype -> (rtol, atol), its defaults per precision.
COURSE_ALLCLOSE: dict[str, tuple[float, float]] = {"float32": (1e-5, 1e-6), "float16": (5e-2, 1e-3),
                                                   "bfloat16": (5e-2, 1e-2)}  # fmt: skip


def dtype_name(dtype: Any) -> str:
    """'bfloat16' for mx.bfloat16, np.float32, 'float16', ..."""
    name = str(dtype).rsplit(".", 1)[-1]
    if name not in TOLERANCES:
        raise ValueError(f"dtype={dtype!r} has no tolerance (supported: {sorted(TOLERANCES)})")
    return name


@dataclass
class Comparison:
    """Distance of one output from the reference, with the verdict."""

    dtype: str
    atol: float
    rtol: float
    max_abs_error: float
    max_rel_error: float
    rel_l2_error: float
    num_mismatches: int
    num_nonfinite: int
    num_elements: int
    first_mismatches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.num_mismatches == 0 and self.num_nonfinite == 0

    def summary(self) -> str:
        head = (
            f"{self.dtype}: max_abs={self.max_abs_error:.3g} max_rel={self.max_rel_error:.3g} "
            f"rel_l2={self.rel_l2_error:.3g} (atol={self.atol:.3g}, rtol={self.rtol:.3g}); "
            f"{self.num_mismatches}/{self.num_elements} outside tolerance, "
            f"{self.num_nonfinite} NaN/inf where the reference is finite"
        )
        if not self.first_mismatches:
            return head
        shown = ", ".join(
            f"{m['index']}: got {m['got']:.6g} want {m['want']:.6g}" for m in self.first_mismatches
        )
        return f"{head}; first: {shown}"


def compare(got: Any, want: Any, dtype: Any, *, show: int = 3, course: bool = False) -> Comparison:
    """Compare a subject's output with the float64 reference under `dtype`'s tolerance (the course's, for a check
    that mirrors one of its tests)."""
    tol = (COURSE_TOLERANCES if course else TOLERANCES)[dtype_name(dtype)]
    g = to_numpy(got, np.float64)
    w = to_numpy(want, np.float64)
    if g.shape != w.shape:
        raise ValueError(f"output shape {g.shape} differs from the reference shape {w.shape}")
    finite_want = np.isfinite(w)
    nonfinite = finite_want & ~np.isfinite(g)
    with np.errstate(invalid="ignore"):
        err = np.abs(g - w)
    err_finite = np.where(nonfinite, 0.0, err)
    bad = nonfinite | (err_finite > tol.atol + tol.rtol * np.abs(w))
    denom = np.abs(w)
    rel = np.where(denom > 0, err_finite / np.where(denom > 0, denom, 1.0), err_finite)
    norm_w = float(np.linalg.norm(w[finite_want])) if finite_want.any() else 0.0
    rel_l2 = float(np.linalg.norm(err_finite)) / norm_w if norm_w > 0 else float(np.linalg.norm(err_finite))
    first = [
        {"index": tuple(int(i) for i in idx), "got": float(g[idx]), "want": float(w[idx])}
        for idx in zip(*np.nonzero(bad))
    ][:show]
    return Comparison(
        dtype=tol.dtype,
        atol=tol.atol,
        rtol=tol.rtol,
        max_abs_error=float(err_finite.max()) if err.size else 0.0,
        max_rel_error=float(rel.max()) if err.size else 0.0,
        rel_l2_error=rel_l2,
        num_mismatches=int(bad.sum() - nonfinite.sum()),
        num_nonfinite=int(nonfinite.sum()),
        num_elements=int(err.size),
        first_mismatches=first,
    )
