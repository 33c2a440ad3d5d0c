"""MLX's fused SDPA, replaced while a graded subject runs.

Paged attention must walk the pages itself; handing dense K/V to
mx.fast.scaled_dot_product_attention is what the assignment forbids. The trap
replaces the function on mlx.core.fast before the subject is imported, so
both `mx.fast.scaled_dot_product_attention(...)` and a `from mlx.core.fast
import scaled_dot_product_attention` in the subject reach it. Each call is
recorded (where it came from) and raises, so the check that made it fails
with a message saying why.
"""

from __future__ import annotations

import sys
from typing import Any

TRAPPED_NAME = "scaled_dot_product_attention"
MESSAGE = (
    "mx.fast.scaled_dot_product_attention is not allowed in graded code: "
    "paged attention must read K/V through the block table itself"
)


class ForbiddenCallError(RuntimeError):
    """A graded subject called a function the assignment forbids."""


class SdpaTrap:
    def __init__(self) -> None:
        self.calls: list[str] = []  # "file:line" of each caller, in call order
        self.original: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1)
        self.calls.append(f"{caller.f_code.co_filename}:{caller.f_lineno}")
        raise ForbiddenCallError(MESSAGE)

    def install(self) -> None:
        import mlx.core as mx

        current = getattr(mx.fast, TRAPPED_NAME)
        if current is self:
            return
        self.original = current
        setattr(mx.fast, TRAPPED_NAME, self)


TRAP = SdpaTrap()
