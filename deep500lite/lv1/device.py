"""Devices: where an executor keeps its parameters and runs its operators."""

from __future__ import annotations

import dataclasses
import re

from deep500lite.errors import DeviceError, UserTypeError

__all__ = ["Device", "CPUDevice", "GPUDevice", "as_device"]


@dataclasses.dataclass(frozen=True)
class Device:
    """A compute device.

    Attributes:
        kind: ``"cpu"`` or ``"gpu"``.
        index: device ordinal (0 for the CPU).
    """

    kind: str = "cpu"
    index: int = 0

    def __post_init__(self):
        if self.kind not in ("cpu", "gpu"):
            raise DeviceError(f"Device kind must be one of 'cpu', 'gpu'. Received: kind={self.kind!r}")
        if not isinstance(self.index, int) or self.index < 0:
            raise DeviceError(f"Device index must be an integer >= 0. Received: index={self.index!r}")

    @property
    def is_gpu(self) -> bool:
        """Whether this is a CUDA GPU."""
        return self.kind == "gpu"

    def __str__(self) -> str:
        return "cpu" if self.kind == "cpu" else f"gpu:{self.index}"


def CPUDevice() -> Device:  # noqa: N802 (Deep500 name)
    """The host CPU."""
    return Device("cpu", 0)


def GPUDevice(index: int = 0) -> Device:  # noqa: N802 (Deep500 name)
    """The CUDA GPU with ordinal ``index``."""
    return Device("gpu", index)


_DEVICE_RE = re.compile(r"^(cpu|gpu|cuda)(?::(\d+))?$")


def as_device(device) -> Device:
    """Turn ``None``, a :class:`Device` or a string such as ``"cpu"``/``"gpu:1"`` into a Device.

    Raises:
        DeviceError: the string is not of the form ``cpu``, ``gpu`` or ``gpu:N``.
        UserTypeError: the value is neither None, a string nor a Device.
    """
    if device is None:
        return CPUDevice()
    if isinstance(device, Device):
        return device
    if isinstance(device, str):
        m = _DEVICE_RE.match(device.strip().lower())
        if not m:
            raise DeviceError(
                f"Device must be 'cpu', 'gpu' or 'gpu:N' (N a GPU index). Received: {device!r}"
            )
        kind = "cpu" if m.group(1) == "cpu" else "gpu"
        index = int(m.group(2) or 0)
        if kind == "cpu" and index != 0:
            raise DeviceError(f"The CPU device has no index other than 0. Received: {device!r}")
        return Device(kind, index)
    raise UserTypeError(f"Expected a device (None, 'cpu', 'gpu:N' or a Device). Received: {type(device).__name__}")
