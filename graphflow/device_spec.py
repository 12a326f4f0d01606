"""Device names, as TensorFlow's: ``/job:NAME/replica:R/task:T/device:TYPE:N``.

Every part is optional; the parts that are given come in that order, with
TensorFlow's short forms for the device (``/cpu:0``, ``/gpu:1``, ``gpu:0``; the
type is case-insensitive, ``/device:GPU:*`` asks for any index). A job name is
``[A-Za-z][A-Za-z0-9_]*`` (case-sensitive, as TensorFlow's), replica and task are
non-negative ints. Anything else is an InvalidArgumentError.

Partial names merge field by field (TensorFlow's nested ``tf.device`` scopes): the
inner name's parts override where given, so ``/job:worker/task:1`` then ``/gpu:0``
is ``/job:worker/task:1/device:GPU:0``. The canonical string keeps the parts
that are set.

The job/replica/task prefix names a task of a cluster: only a Session with
``gf.SessionConfig(cluster=client)`` can place ops there
(runtime/distributed/); ``/job:localhost/replica:0/task:0`` is the local process,
as in TensorFlow, and so is a task 0 / replica 0 without a job in a Session without a
cluster (``/task:0/cpu:0``: :attr:`DeviceSpec.is_local_process`).
"""
from __future__ import annotations

import re
from typing import NamedTuple

from .errors import InvalidArgumentError

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_NUMBER = re.compile(r"[0-9]{1,10}\Z")
_PARTS = ("job", "replica", "task", "device")
#: The largest replica, task or device index (TensorFlow parses them as int32).
_MAX_NUMBER = 2 ** 31 - 1
#: TensorFlow's name for the process itself: placing there is placing locally.
LOCAL_JOB = "localhost"


class DeviceSpec(NamedTuple):
    """A parsed device name; None marks a part that is not given."""

    device_type: str | None = None  # "cpu", "gpu" (or a registered device's type, lower case)
    index: int | None = None        # None: any index
    job: str | None = None
    replica: int | None = None
    task: int | None = None

    @property
    def has_task(self) -> bool:
        """Whether the name asks for a task of a cluster (a job, replica or task other
        than the local process's ``/job:localhost/replica:0/task:0``)."""
        return ((self.job is not None and self.job != LOCAL_JOB)
                or self.replica not in (None, 0) or self.task not in (None, 0)
                or (self.job is None and (self.replica is not None or self.task is not None)))

    @property
    def is_local_process(self) -> bool:
        """Whether a Session without a cluster runs this name here, as TensorFlow's local
        Session does: no job or ``localhost``, replica 0 and task 0 where given
        (``/replica:0/task:0/device:CPU:0``, ``/task:0``)."""
        return (self.job in (None, LOCAL_JOB) and self.replica in (None, 0)
                and self.task in (None, 0))

    @property
    def task_name(self) -> str:
        """The job/replica/task prefix alone: ``/job:worker/task:1`` (``""`` if none)."""
        return "".join(f"/{k}:{v}" for k, v in
                       (("job", self.job), ("replica", self.replica), ("task", self.task))
                       if v is not None)

    @property
    def device_name(self) -> str:
        """The device part alone: ``/device:CPU:0`` (``""`` if no type is given)."""
        if self.device_type is None:
            return ""
        return f"/device:{self.device_type.upper()}:{'*' if self.index is None else self.index}"

    def local(self) -> "DeviceSpec":
        """The device part only, as a process's own placer reads it."""
        return DeviceSpec(self.device_type, self.index)

    def merged_with(self, inner: "DeviceSpec") -> "DeviceSpec":
        """This (outer) name with ``inner``'s parts overriding where ``inner`` gives them;
        a new device type brings its own index (``/gpu:1`` then ``/cpu`` is ``/cpu``)."""
        if inner.device_type is not None:
            device_type, index = inner.device_type, inner.index
        else:
            device_type, index = self.device_type, self.index
        return DeviceSpec(device_type, index,
                          inner.job if inner.job is not None else self.job,
                          inner.replica if inner.replica is not None else self.replica,
                          inner.task if inner.task is not None else self.task)

    def __str__(self) -> str:
        return self.task_name + self.device_name


def parse_device(device: str | None) -> DeviceSpec:
    """Parse a device name; InvalidArgumentError if it is malformed."""
    if device is None or device == "":
        return DeviceSpec()
    if not isinstance(device, str):
        raise InvalidArgumentError(f"A device must be a string like '/gpu:0', got {device!r}")
    text = device.strip()
    fields: dict[str, object] = {}
    last = -1
    for piece in (text[1:] if text.startswith("/") else text).split("/"):
        kind, value = _parse_part(piece, device)
        position = _PARTS.index(kind)
        if position <= last:
            raise _malformed(device, f"'{piece}' is out of place: the parts come in the "
                                     f"order /job/replica/task/device, each at most once")
        last = position
        if kind == "device":
            fields["device_type"], fields["index"] = value
        else:
            fields[kind] = value
    return DeviceSpec(**fields)


def _parse_part(piece: str, device: str) -> tuple[str, object]:
    """One ``/``-separated part: ``("job", "worker")``, ``("task", 1)``,
    ``("device", ("gpu", 0))``."""
    kind, _, rest = piece.partition(":")
    lowered = kind.lower()
    if lowered in ("cpu", "gpu"):  # TensorFlow's short forms: /cpu:0, /gpu, /gpu:*
        return "device", (lowered, _index(rest, piece, device) if _ else None)
    if kind == "device" and _NAME.match(rest.partition(":")[0]):
        device_type, has_index, index = rest.partition(":")
        return "device", (device_type.lower(),
                          _index(index, piece, device) if has_index else None)
    if kind == "job" and _NAME.match(rest):
        return "job", rest
    if kind in ("replica", "task") and _NUMBER.match(rest):
        return kind, _number(rest, kind, device)
    raise _malformed(device, f"cannot read '{piece}'")


def _index(text: str, piece: str, device: str) -> int | None:
    if text == "*":
        return None
    if not _NUMBER.match(text):
        raise _malformed(device, f"cannot read '{piece}': the index must be a number or '*'")
    return _number(text, "device index", device)


def _number(text: str, what: str, device: str) -> int:
    value = int(text)
    if value > _MAX_NUMBER:
        raise _malformed(device, f"{what} {text} is past {_MAX_NUMBER}")
    return value


def _malformed(device: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"Malformed device specification '{device}': {why}; expected "
        f"'/job:NAME/replica:R/task:T/device:TYPE:N' or a part of it, e.g. '/cpu:0', "
        f"'/gpu:0', '/device:GPU:0' or '/job:worker/task:1'")


def canonical_device(device: str | None) -> str:
    """``'/gpu:0'`` -> ``'/device:GPU:0'``, ``'/job:worker/task:1/cpu'`` ->
    ``'/job:worker/task:1/device:CPU:0'`` (a device type without an index means index
    0); ``''`` stays ``''`` (no request)."""
    spec = parse_device(device)
    if spec.device_type is not None and spec.index is None:
        spec = spec._replace(index=0)
    return str(spec)


def merge_devices(outer: str | None, inner: str | None) -> str:
    """The canonical name of ``inner`` inside a scope on ``outer`` (TensorFlow's nested
    device scopes): ``merge_devices('/job:worker/task:1', '/gpu:0')`` is
    ``'/job:worker/task:1/device:GPU:0'``."""
    merged = parse_device(outer).merged_with(parse_device(inner))
    return canonical_device(str(merged))
