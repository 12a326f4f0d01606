"""TensorBoard logs: ``gf.summary.FileWriter``, as TensorFlow 1.x's ``tf.summary.FileWriter``.

    with gf.summary.FileWriter("logs", graph=g) as writer:   # graph view
        writer.add_scalar("loss", value, step)                 # scalars
        writer.add_run_metadata(run_metadata, "step 10")       # per-node time, memory

``tensorboard --logdir logs`` then shows the graph (each node's op, inputs, device,
attrs and output shapes; name scopes collapse into boxes), the scalar curves and,
per traced run, the time and memory of each node. Events are written with
tensorboardX's record writer and message classes (extra ``tensorboard``); run
metadata needs TensorFlow's RunMetadata message, which only the full schema has
(package ``tensorboard``: extra ``tensorboard-full``).
"""
from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from typing import Any

import numpy as np

from ..graph import Graph

__all__ = ["FileWriter", "run_metadata_proto"]

_FILE_COUNTER = itertools.count()


def _tensorboardx():
    """tensorboardX's event messages and record writer; ImportError naming the extra."""
    try:
        from tensorboardX.proto import event_pb2, summary_pb2
        from tensorboardX.record_writer import RecordWriter
    except ImportError as e:
        from ..interop.tf_proto import INSTALL_HINT
        raise ImportError(f"gf.summary writes TensorBoard event files with tensorboardX, "
                          f"which is not importable ({e}); install it with: {INSTALL_HINT}"
                          ) from e
    return event_pb2, summary_pb2, RecordWriter


def _run_metadata_classes():
    """TensorFlow's RunMetadata and StepStats messages (tensorboard's full schema)."""
    try:
        from tensorboard.compat.proto import config_pb2, step_stats_pb2
    except ImportError as e:
        from ..interop.tf_proto import FULL_INSTALL_HINT
        raise ImportError(f"add_run_metadata() needs TensorFlow's RunMetadata message, which "
                          f"tensorboardX lacks and the package tensorboard has ({e}); install "
                          f"it with: {FULL_INSTALL_HINT}") from e
    return config_pb2, step_stats_pb2


class FileWriter:
    """Writes TensorBoard events to one new file in ``logdir`` (created if needed).

    ``graph``: a gf.Graph to show in the graph view now (``add_graph`` later works too).
    Writes are synchronous and thread-safe; a write more than ``flush_secs`` after the
    last flush flushes (as TF's writer, so a running TensorBoard sees the curve grow),
    ``flush()`` puts everything on disk now, ``close()`` also ends the file (further
    writes raise). Usable as a context manager.
    """

    def __init__(self, logdir: str | os.PathLike, graph: Graph | None = None, *,
                 flush_secs: float = 120, filename_suffix: str = ""):
        event_pb2, self._summary_pb2, record_writer = _tensorboardx()
        self._event_pb2 = event_pb2
        self.logdir = os.fspath(logdir)
        # every argument is checked before a file is made
        if graph is not None and not isinstance(graph, Graph):
            raise TypeError(f"FileWriter: graph must be a gf.Graph, got "
                            f"{type(graph).__name__} {graph!r}")
        if not isinstance(filename_suffix, str) or os.sep in filename_suffix:
            raise ValueError(f"filename_suffix must be a string without '{os.sep}', got "
                             f"{filename_suffix!r}")
        if isinstance(flush_secs, bool) or not isinstance(flush_secs, (int, float)) \
                or not flush_secs >= 0:
            raise ValueError(f"flush_secs must be a number of seconds >= 0, got {flush_secs!r}")
        if os.path.exists(self.logdir) and not os.path.isdir(self.logdir):
            raise NotADirectoryError(f"FileWriter: logdir '{self.logdir}' exists and is not a "
                                     f"directory")
        os.makedirs(self.logdir, exist_ok=True)
        # TensorFlow's pattern, with the process and a counter so that writers made in
        # the same second never share a file
        name = (f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}."
                f"{os.getpid()}.{next(_FILE_COUNTER)}{filename_suffix}")
        self.path = os.path.join(self.logdir, name)
        self._flush_secs = float(flush_secs)
        self._lock = threading.Lock()
        self._run_tags: set[str] = set()
        self._records = record_writer(self.path)
        self._closed = False
        self._flushed_at = time.monotonic()
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
        if graph is not None:
            self.add_graph(graph)

    # -- events -----------------------------------------------------------------------
    def _write(self, event) -> None:
        data = event.SerializeToString()
        with self._lock:
            if self._closed:
                raise ValueError(f"FileWriter for '{self.path}' is closed")
            self._records.write(data)
            if time.monotonic() - self._flushed_at >= self._flush_secs:
                self._records.flush()
                self._flushed_at = time.monotonic()

    def add_graph(self, graph: Graph, global_step: int | None = None) -> None:
        """Show ``graph`` in TensorBoard's graph view: every node with its op type,
        inputs (``^name`` for control inputs), device, attrs and ``_output_shapes``."""
        from ..interop.tf_export import tf_graph_def

        if not isinstance(graph, Graph):
            raise TypeError(f"add_graph() takes a gf.Graph, got {type(graph).__name__} "
                            f"{graph!r}")
        graph_def = tf_graph_def(graph, strict=False)
        event = self._event_pb2.Event(wall_time=time.time(),
                                      graph_def=graph_def.SerializeToString())
        if global_step is not None:
            event.step = _step(global_step)
        self._write(event)

    def add_scalar(self, tag: str, value: Any, step: int, walltime: float | None = None
                   ) -> None:
        """One point of the curve ``tag``: ``value`` (a real number, or an array holding
        one, such as a fetched loss) at ``step``."""
        if not isinstance(tag, str) or not tag:
            raise TypeError(f"add_scalar(): tag must be a non-empty string, got {tag!r}")
        number = _real_scalar(value, tag)
        summary = self._summary_pb2.Summary(
            value=[self._summary_pb2.Summary.Value(tag=tag, simple_value=number)])
        self._write(self._event_pb2.Event(
            wall_time=time.time() if walltime is None else float(walltime), step=_step(step),
            summary=summary))

    def add_run_metadata(self, run_metadata: Any, tag: str, global_step: int | None = None
                         ) -> None:
        """A traced run (``gf.RunMetadata`` filled by ``sess.run(..., options=
        gf.RunOptions(trace=True), run_metadata=...)``) under ``tag``: TensorBoard's
        graph view then colours nodes by compute time and memory for that run. Each tag
        is used once per writer, as TensorFlow's."""
        from ..runtime import RunMetadata

        if not isinstance(run_metadata, RunMetadata):
            raise TypeError(f"add_run_metadata() takes a gf.RunMetadata, got "
                            f"{type(run_metadata).__name__} {run_metadata!r}")
        if not isinstance(tag, str) or not tag:
            raise TypeError(f"add_run_metadata(): tag must be a non-empty string, got {tag!r}")
        with self._lock:
            if tag in self._run_tags:
                raise ValueError(f"The provided tag {tag!r} was already used for this event "
                                 f"type")
            self._run_tags.add(tag)
        proto = run_metadata_proto(run_metadata)
        tagged = self._event_pb2.TaggedRunMetadata(tag=tag,
                                                   run_metadata=proto.SerializeToString())
        event = self._event_pb2.Event(wall_time=time.time(), tagged_run_metadata=tagged)
        if global_step is not None:
            event.step = _step(global_step)
        self._write(event)

    def flush(self) -> None:
        """Put every event written so far on disk."""
        with self._lock:
            if not self._closed:
                self._records.flush()
                self._flushed_at = time.monotonic()

    def close(self) -> None:
        """Flush and close the file; closing twice is harmless."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._records.close()

    def get_logdir(self) -> str:
        return self.logdir

    def __enter__(self) -> "FileWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<gf.summary.FileWriter '{self.path}'{' closed' if self._closed else ''}>"


def run_metadata_proto(run_metadata: Any):
    """A traced run as TensorFlow's RunMetadata message: one DeviceStepStats per device,
    one NodeExecStats per node (start in microseconds since the epoch, duration, output
    shapes, bytes allocated). A fused step is reported under its own name and, with the
    same times, under each graph node it computed, so those nodes show in the graph view."""
    config_pb2, step_stats_pb2 = _run_metadata_classes()
    from ..interop import tf_proto

    shapes = tf_proto.protos("tensorboard")  # the TensorShapeProto step_stats_pb2 uses
    # perf_counter times (what the trace records) -> epoch microseconds
    epoch_offset_us = (time.time_ns() - time.perf_counter_ns()) / 1e3
    proto = config_pb2.RunMetadata()
    devices: dict[str, Any] = {}
    threads: dict[str, int] = {}
    for e in run_metadata.events:
        device = e.device if not e.worker else f"{e.device} ({e.worker})"
        dev = devices.get(device)
        if dev is None:
            dev = devices[device] = proto.step_stats.dev_stats.add(device=device)
        start = int(e.start_us + epoch_offset_us)
        duration = max(int(round(e.end_us - e.start_us)), 1)
        thread = threads.setdefault(e.thread, len(threads))
        for name, label, own in [(e.node, f"{e.node} = {e.op_type}()", True)] + [
                (r, f"{r} (fused into {e.node})", False) for r in e.replaces]:
            stats = dev.node_stats.add(
                node_name=name, all_start_micros=start, op_start_rel_micros=0,
                op_end_rel_micros=duration, all_end_rel_micros=duration,
                timeline_label=label, thread_id=thread, scheduled_micros=start)
            if not own:
                continue
            stats.memory.add(allocator_name=device, total_bytes=e.bytes_allocated,
                             peak_bytes=e.bytes_allocated)
            for slot, shape in enumerate(e.output_shapes):
                out = stats.output.add(slot=slot)
                out.tensor_description.shape.CopyFrom(
                    tf_proto.shape_to_proto(list(shape), shapes))
    return proto


def _step(step: Any) -> int:
    if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"A step must be an int, got {type(step).__name__} {step!r}")
    if not -2 ** 63 <= int(step) < 2 ** 63:
        raise ValueError(f"A step must fit in an int64, got {step}")
    return int(step)


def _real_scalar(value: Any, tag: str) -> float:
    array = np.asarray(value)
    if array.dtype == object or array.dtype.kind not in "iuf":
        raise TypeError(f"add_scalar({tag!r}): value must be a real number, got "
                        f"{type(value).__name__} {value!r}")
    if array.size != 1:
        raise ValueError(f"add_scalar({tag!r}): value must hold one number, got shape "
                         f"{list(array.shape)}")
    return float(array.reshape(()))
