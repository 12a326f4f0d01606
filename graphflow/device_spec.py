"""Device strings: ``/cpu:0``, ``/device:GPU:1``, ``gpu:0`` (case-insensitive),
optionally prefixed by ``/job:.../replica:.../task:...``. Canonical form:
``/device:CPU:0``."""
from __future__ import annotations

import re
from typing import NamedTuple

from .errors import InvalidArgumentError

_DEVICE = re.compile(
    r"^(?:/job:[a-z0-9_]+)?(?:/replica:\d+)?(?:/task:\d+)?"
    r"(?:/?(?:device:(?P<type>[a-z][a-z0-9_]*)|(?P<short>cpu|gpu))(?::(?P<index>\d+|\*))?)?$",
    re.IGNORECASE)


class DeviceSpec(NamedTuple):
    device_type: str | None  # "cpu", "gpu" (or a registered device's type), None for "any"
    index: int | None        # None: any index

    def __str__(self) -> str:
        if self.device_type is None:
            return ""
        return f"/device:{self.device_type.upper()}:{'*' if self.index is None else self.index}"


def parse_device(device: str | None) -> DeviceSpec:
    """Parse a device string; raise InvalidArgumentError if it is malformed."""
    if device is None or device == "":
        return DeviceSpec(None, None)
    if not isinstance(device, str):
        raise InvalidArgumentError(f"A device must be a string like '/gpu:0', got {device!r}")
    m = _DEVICE.match(device.strip())
    if not m:
        raise InvalidArgumentError(
            f"Malformed device specification '{device}': expected e.g. '/cpu:0', "
            f"'/gpu:0' or '/device:GPU:0'")
    dtype = m.group("type") or m.group("short")
    index = m.group("index")
    return DeviceSpec(dtype.lower() if dtype else None,
                      None if index in (None, "*") else int(index))


def canonical_device(device: str | None) -> str:
    """``'/gpu:0'`` -> ``'/device:GPU:0'``; ``''`` stays ``''`` (no request)."""
    spec = parse_device(device)
    if spec.device_type is None:
        return ""
    return f"/device:{spec.device_type.upper()}:{0 if spec.index is None else spec.index}"
