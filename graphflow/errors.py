"""Error classes, named and arranged as TensorFlow's ``tf.errors``.

Shape functions and kernels raise these with a bare message; the graph builder
and the executor add the node context (name, op type, input shapes, the user's
file:line) in one place, through :meth:`OpError.with_node`.
"""
from __future__ import annotations


class OpError(Exception):
    """An error raised while building or running a node.

    ``message`` is the bare description; ``node_name`` and ``op_type`` say
    which node failed (None when the error is not tied to one node).
    """

    def __init__(self, message: str, node_name: str | None = None,
                 op_type: str | None = None, *, site: str | None = None,
                 detail: str | None = None):
        self.message = message
        self.node_name = node_name
        self.op_type = op_type
        self.site = site
        self.detail = detail
        super().__init__(self._render())

    def _render(self) -> str:
        if self.node_name is None:
            return self.message
        text = f"{self.message} [node {self.node_name}]"
        extra = [f"op: '{self.op_type}'"] if self.op_type else []
        if self.detail:
            extra.append(self.detail)
        if self.site:
            extra.append(f"defined at {self.site}")
        return text + (" (" + ", ".join(extra) + ")" if extra else "")

    def __str__(self) -> str:
        return self._render()

    def with_node(self, node_name: str, op_type: str, *, site: str | None = None,
                  detail: str | None = None) -> "OpError":
        """A copy of this error that names the node it came from."""
        if self.node_name is not None:
            return self
        err = self.__class__(self.message, node_name, op_type, site=site, detail=detail)
        err.__cause__ = self.__cause__ or self
        err.__traceback__ = self.__traceback__
        return err

    def __reduce__(self):
        return (_rebuild, (self.__class__, self.message, self.node_name, self.op_type,
                           self.site, self.detail))


def _rebuild(cls, message, node_name, op_type, site, detail):
    return cls(message, node_name, op_type, site=site, detail=detail)


class InvalidArgumentError(OpError, ValueError):
    """An input or attribute is invalid: bad shape, bad index, bad value."""


class InvalidDTypeError(InvalidArgumentError, TypeError):
    """An input has a dtype that the op does not accept (TensorFlow: TypeError)."""


class NotFoundError(OpError, LookupError):
    """Something requested does not exist, e.g. a kernel for this dtype and device."""


class UnimplementedError(OpError):
    """The operation is valid but not implemented here."""


class FailedPreconditionError(OpError):
    """The system is not in a state to run the operation (e.g. closed session)."""


class ResourceExhaustedError(OpError, MemoryError):
    """An output or intermediate cannot be allocated."""


class CancelledError(OpError):
    """The run was cancelled (another node failed, or the user interrupted it)."""


class AbortedError(OpError):
    """The operation was aborted (TensorFlow's ABORTED), e.g. a task of the cluster
    restarted and lost the variables it held: restore them, then run again."""


class UnavailableError(OpError):
    """A part of the system is unavailable (TensorFlow's UNAVAILABLE), e.g. a worker of
    the cluster died during the run; a later run may succeed."""


class DeadlineExceededError(OpError):
    """The run did not finish before its deadline (TensorFlow's DEADLINE_EXCEEDED:
    ``RunOptions(timeout_in_ms=...)``, ``SessionConfig(operation_timeout_in_ms=...)``);
    a cluster run that times out is rolled back."""


class InternalError(OpError):
    """A kernel failed in a way that is a bug in graphflow or in a user kernel."""


class DataLossError(OpError):
    """Unrecoverable data loss or corruption (TensorFlow's DATA_LOSS), e.g. a checkpoint
    that is truncated or fails its checksum."""


def node_error(err: BaseException, node_name: str, op_type: str,
               site: str | None = None) -> OpError:
    """``err``, raised while running the node ``node_name``, as the OpError a user sees:
    an OpError gets the node's name (unless it names one already); an allocation
    failure is a ResourceExhaustedError; a bad value, index or type an
    InvalidArgumentError; anything else an InternalError."""
    if isinstance(err, OpError):
        return err.with_node(node_name, op_type, site=site)
    if isinstance(err, MemoryError) or (
            isinstance(err, ValueError) and str(err).startswith("array is too big")):
        # the second is numpy's word for a size past what an int64 byte count holds
        return ResourceExhaustedError(f"OOM while running the kernel: {err}", node_name, op_type,
                                      site=site)
    if isinstance(err, (ValueError, IndexError, TypeError, ArithmeticError)):
        return InvalidArgumentError(f"{type(err).__name__}: {err}", node_name, op_type, site=site)
    return InternalError(f"{type(err).__name__}: {err}", node_name, op_type, site=site)


__all__ = [
    "node_error", "OpError", "InvalidArgumentError", "InvalidDTypeError", "NotFoundError",
    "UnimplementedError", "FailedPreconditionError", "ResourceExhaustedError",
    "CancelledError", "InternalError", "DataLossError", "AbortedError", "UnavailableError",
    "DeadlineExceededError",
]
