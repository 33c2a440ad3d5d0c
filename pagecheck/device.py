"""Choosing the MLX device a run uses, by the names the command line accepts."""

from __future__ import annotations

DEVICES = ("cpu", "gpu")


class DeviceUnavailable(RuntimeError):
    """The requested device does not exist in this MLX build or on this machine."""


def check_device(name: str) -> None:
    """DeviceUnavailable where MLX cannot run on `name` here; changes nothing."""
    import mlx.core as mx

    if name not in DEVICES:
        raise ValueError(f"device={name!r} is not one of {DEVICES}")
    if not mx.is_available(mx.gpu if name == "gpu" else mx.cpu):
        raise DeviceUnavailable(
            f"device={name!r} is not available to MLX {mx.__version__} here "
            "(Linux needs the mlx[cuda13] build and an NVIDIA GPU; macOS needs Apple silicon)"
        )


def use_device(name: str) -> None:
    """Make `name` MLX's default device for everything this process runs next."""
    import mlx.core as mx

    check_device(name)
    mx.set_default_device(mx.gpu if name == "gpu" else mx.cpu)
