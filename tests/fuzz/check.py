"""Running a fuzzed graph with graphflow and holding it to the reference.

:func:`check_graph` builds the spec, then runs it in several Session
configurations: serial and parallel executors (the parallel one made to schedule
every step through the thread pool, and called through ``make_callable``), with
and without the optimizer; in each, twice with the first feeds and once with the
second (the plan and the kernels' caches are reused), and in one both at once from
two threads. Every outcome must be the
reference's values, bit for bit with the same dtype and shape, or, where the
reference rejects the input, an InvalidArgumentError that names a node the
reference rejects, after which the session still runs. No feed or constant may
change, and numpy warnings are errors throughout.

``check_graph(spec, gpu=kind)`` builds the graph on "/gpu:0" and runs it on a CPU + GPU
session (``tests/support/gpu_devices.py``: "simulated" or "cuda"), deterministic=True, against
the reference with TensorFlow's GPU semantics (``reference.run_op``). There, each
node must also sit where the reference says it runs (strings and nodes without a GPU
kernel on the CPU, everything else on the GPU), and an error for an out-of-bound
index must give the reference's message (the first bad tuple). On a real CUDA device a
value under float32's smallest normal may come out as a zero: cupy compiles every kernel
with -ftz=true (as TensorFlow's GPU build flushes float32 subnormals), and an H200 gave
Cast(float32 1.4e-45 -> complex128) = 0.
"""
from __future__ import annotations

import contextlib
import dataclasses
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from unittest import mock

import numpy as np
from hypothesis import event
from hypothesis.errors import InvalidArgument

import graphflow as gf
from graphflow.errors import InvalidArgumentError, OpError
from graphflow.runtime import executor

from support.gpu_devices import gpu_session_devices

from . import reference
from .spec import Built, Failure, GraphSpec, Ref, build, dtype_of, evaluate

_STITCHES = ("DynamicStitch", "ParallelDynamicStitch")


@dataclass(frozen=True)
class RunConfig:
    name: str
    config: gf.SessionConfig
    force_parallel: bool = False   # every step counts as heavy: the thread pool is used
    use_callable: bool = False     # Session.make_callable instead of Session.run
    concurrent: bool = False       # then both feeds at once, from two threads


CONFIGS = (
    RunConfig("serial", gf.SessionConfig(inter_op_threads=1)),
    RunConfig("serial, optimize=False", gf.SessionConfig(inter_op_threads=1, optimize=False)),
    RunConfig("parallel, make_callable", gf.SessionConfig(inter_op_threads=4),
              force_parallel=True, use_callable=True),
    RunConfig("default, optimize=False", gf.SessionConfig(optimize=False), concurrent=True),
)
#: On a GPU: the same configurations, deterministic (then equal to the CPU bit for bit).
GPU_CONFIGS = tuple(dataclasses.replace(
    run, name=f"gpu, {run.name}", config=dataclasses.replace(run.config, deterministic=True))
    for run in CONFIGS)
#: On a GPU, for a graph whose results do not depend on the order of its updates: the
#: default kernels (atomics, racing stores), which must then equal the references too.
GPU_ATOMICS = RunConfig("gpu, default (atomics)", gf.SessionConfig(inter_op_threads=1))
_ORDERED_SCATTERS = ("ScatterNd", "TensorScatterAdd", "TensorScatterSub", "TensorScatterMin",
                     "TensorScatterMax")


def _order_free(spec: GraphSpec, outcomes: dict) -> bool:
    """Whether every scatter of ``spec`` is an integer sum, min or max, and nothing stores
    in parallel (TensorScatterUpdate, ParallelDynamicStitch): then any update order
    gives the reference's result."""
    for k, node in enumerate(spec.nodes):
        if node.op in ("TensorScatterUpdate", "ParallelDynamicStitch"):
            return False
        if node.op in _ORDERED_SCATTERS:
            result = outcomes[Ref(k)]
            if not isinstance(result, np.ndarray) or result.dtype.kind not in "iu":
                return False
    return True


def _event(name: str) -> None:
    """Count ``name`` in hypothesis' statistics (a no-op in a plain test)."""
    try:
        event(name)
    except InvalidArgument:
        pass


# -- comparing values --------------------------------------------------------------------------
def _bits(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float (or complex: real, imaginary) components as unsigned bits, and where NaN."""
    parts = np.ascontiguousarray(a).reshape(-1)
    if a.dtype.kind == "c":
        parts = parts.view(parts.real.dtype)
    return parts.view(f"u{parts.dtype.itemsize}"), np.isnan(parts)


#: below this magnitude a CUDA device may give a zero (float32 subnormals flushed)
FLUSHED_BELOW = float(np.finfo(np.float32).tiny)


def assert_same(got, want: np.ndarray, what: str, flushes: bool = False) -> None:
    """``got`` equals ``want`` bit for bit: dtype, shape, -0.0, any NaN for a NaN;
    ``flushes``: also a zero for a value of magnitude under FLUSHED_BELOW."""
    assert isinstance(got, np.ndarray), f"{what}: got a {type(got).__name__}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if want.dtype == object:
        assert all(type(x) is bytes for x in got.reshape(-1)), f"{what}: not all bytes: {got}"
        same = got.tolist() == want.tolist()
    elif want.dtype.kind in "fc":
        (gb, gn), (wb, wn) = _bits(got), _bits(want)
        equal = (gb == wb) | (gn & wn)
        if flushes and not equal.all():
            g, w = (np.ascontiguousarray(a).reshape(-1) for a in (got, want))
            g, w = (a.view(a.real.dtype) if a.dtype.kind == "c" else a for a in (g, w))
            equal |= (g == 0) & (np.abs(w) < FLUSHED_BELOW)
        same = bool(equal.all())
    else:
        same = bool(np.array_equal(got, want))
    assert same, f"{what}:\n got {got!r}\nwant {want!r}"


# -- one run ---------------------------------------------------------------------------------------
@dataclass
class Case:
    """A built spec with one set of feeds, and the reference outcomes for them."""

    name: str
    spec: GraphSpec
    built: Built
    outcomes: dict
    trivial: gf.Output
    gpu: bool = False
    flushes: bool = False  # a CUDA device: float32 subnormals may come out as zeros

    @property
    def feeds(self) -> dict[gf.Output, np.ndarray]:
        feeds = {out: self.spec.nodes[k].value for k, out in self.built.placeholders.items()}
        feeds.update((self.built.outputs[r], v) for r, v in self.spec.fed.items()
                     if r in self.built.outputs)
        return feeds


def _allowed_error_nodes(case: Case, fetches: list[Ref], optimized: bool) -> set[str]:
    """Nodes a run of ``fetches`` may name in its error: a needed node the reference
    rejects; with the optimizer, also a stitch fused with such a node."""
    allowed = set()
    for k in case.spec.ancestors(fetches):
        outputs = [case.outcomes[Ref(k, i)] for i in range(case.spec.nodes[k].num_outputs)]
        failure = next((o for o in outputs if isinstance(o, Failure)), None)
        if failure is None or k not in case.built.names:
            continue
        if failure.own or (optimized and case.spec.nodes[k].op in _STITCHES):
            allowed.add(case.built.names[k])
    return allowed


def _run(sess: gf.Session, case: Case, fetches: list[Ref], run: RunConfig) -> list:
    outputs = [case.built.outputs[r] for r in fetches]
    if not run.use_callable:
        return sess.run(outputs, feed_dict=case.feeds)
    feeds = case.feeds
    return sess.make_callable(outputs, feed_list=list(feeds))(*feeds.values())


def _run_once(sess: gf.Session, case: Case, fetches: list[Ref], run: RunConfig) -> None:
    where = f"[{run.name}, {case.name}] fetching {fetches}"
    failures = [case.outcomes[r] for r in fetches if isinstance(case.outcomes[r], Failure)]
    try:
        got = _run(sess, case, fetches, run)
    except OpError as e:
        assert failures, f"{where}: graphflow raised {e!r}, the reference gives values"
        assert isinstance(e, InvalidArgumentError), f"{where}: {type(e).__name__}: {e}"
        assert e.node_name is not None and e.op_type is not None, f"{where}: no node in {e}"
        assert e.__cause__ is None or isinstance(e.__cause__, OpError), \
            f"{where}: a kernel crashed: {type(e.__cause__).__name__}: {e.__cause__}"
        allowed = _allowed_error_nodes(case, fetches, run.config.optimize)
        assert e.node_name in allowed, f"{where}: error names {e.node_name}, not one of " \
                                       f"{sorted(allowed)}: {e}"
        if case.gpu:
            _check_bad_index_message(case, e, where)
        assert sess.run(case.trivial) == 7, f"{where}: session unusable after {e}"
        _event("run: error")
        return
    assert not failures, f"{where}: the reference rejects it ({failures[0].reason}), " \
                         f"graphflow gave values"
    for ref, value in zip(fetches, got):
        assert_same(value, case.outcomes[ref], f"{where}: {ref} = {case.spec.nodes[ref.node]!r}",
                    case.flushes)
    _event("run: values")


def _check_bad_index_message(case: Case, e: OpError, where: str) -> None:
    """An error for an out-of-bound index gives the reference's message: on a GPU
    (bad_indices_policy="ERROR") the first bad tuple."""
    k = next((k for k, name in case.built.names.items() if name == e.node_name), None)
    failure = None if k is None else case.outcomes[Ref(k)]
    if isinstance(failure, Failure) and failure.own and failure.bad_index:
        assert failure.reason in str(e), f"{where}: expected {failure.reason!r} in {e}"
        _event("run: bad index error")


def _gpu_events(spec: GraphSpec, outcomes: dict) -> None:
    """Count the nodes whose GPU semantics differ from the CPU's in this graph."""
    on_cpu = evaluate(spec)
    for ref, value in outcomes.items():
        cpu = on_cpu[ref]
        if ref.index == 0 and isinstance(cpu, Failure) and cpu.own and cpu.bad_index:
            _event(f"gpu: bad index {'skipped' if isinstance(value, np.ndarray) else 'raised'}")


def _check_placement(sess: gf.Session, built: Built) -> None:
    """Every node of every plan on the device TensorFlow would use: a string node on the
    CPU, any other on the GPU exactly when its op has a GPU kernel for its attrs, and
    the fuzzed ops where the reference runs them (``reference.runs_on_gpu``)."""
    ours = {out.op for out in built.outputs.values()}
    for plan in sess._plans.values():
        for op, device in plan.placement.items():
            on_gpu = device.device_type == "gpu"
            where = f"{op.name} ({op.type}) placed on {device.name}"
            if any(o.dtype.is_string for o in (*op.inputs, *op.outputs)):
                assert not on_gpu, f"{where}: a string node"
                continue
            has_kernel = op.op_def.find_kernel("gpu", dict(op.attrs)) is not None
            assert on_gpu == has_kernel, f"{where}, GPU kernel: {has_kernel}"
            if op in ours and op.type not in ("Const", "Placeholder"):
                dtypes = [np.dtype(i.dtype.as_numpy_dtype) for i in op.inputs]
                assert on_gpu == reference.runs_on_gpu(op.type, dtypes), \
                    f"{where}: the reference runs it on the {'GPU' if not on_gpu else 'CPU'}"


@contextlib.contextmanager
def _scheduling(run: RunConfig):
    """Plans compiled in this context use the thread pool for every step, if asked."""
    if run.force_parallel:
        with mock.patch.object(executor, "HEAVY_ELEMENTS", 0):
            yield
    else:
        yield


# -- the whole check ---------------------------------------------------------------------------
def _check_build(spec: GraphSpec, built: Built, gpu: bool = False) -> None:
    """A build-time error only where the reference rejects the node (or its inputs),
    and the static dtype and shape of every built output compatible with its value,
    for both sets of placeholder feeds. Shape inference cannot know the feeds of ops'
    outputs (nor does TensorFlow's): the reference here runs without them."""
    for feeds in (spec, spec.with_second_feeds()):
        outcomes = evaluate(GraphSpec(feeds.nodes, feeds.fetches), gpu)
        for k, err in built.build_errors.items():
            failure = outcomes[Ref(k)]
            assert isinstance(failure, Failure), \
                f"n{k} = {spec.nodes[k]!r}: build error, the reference gives values: {err}"
            assert err.node_name is not None, f"n{k}: build error names no node: {err}"
            _event("build error" if failure.own else "build error (input rejected at run time)")
        for ref, out in built.outputs.items():
            value = outcomes[ref]
            if isinstance(value, np.ndarray):
                what = f"{ref} = {spec.nodes[ref.node]!r}"
                assert out.dtype == dtype_of(value), \
                    f"{what}: static dtype {out.dtype}, value {value.dtype}"
                assert out.shape.is_compatible_with(gf.TensorShape(list(value.shape))), \
                    f"{what}: static shape {out.shape}, value {value.shape}"


def check_graph(spec: GraphSpec, gpu: str | None = None) -> None:
    """Hold graphflow to the reference on ``spec`` (see the module docstring); ``gpu``:
    on a GPU of that kind ("simulated", "cuda")."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _check_graph(spec, gpu)


def _check_graph(spec: GraphSpec, gpu: str | None = None) -> None:
    originals = {k: n.value.copy() for k, n in enumerate(spec.nodes) if n.value is not None}
    fed_originals = {ref: v.copy() for ref, v in spec.fed.items()}
    scope = gf.Scope(gf.Graph())
    trivial = scope.constant(np.int32(7), name="fuzz_trivial")
    on_gpu = gpu is not None
    built = build(spec, scope.with_device("/gpu:0") if on_gpu else scope)
    _check_build(spec, built, on_gpu)
    flushes = gpu == "cuda"
    first = Case("first feeds", spec, built, evaluate(spec, on_gpu), trivial, on_gpu, flushes)
    second_spec = spec.with_second_feeds()
    second = Case("second feeds", second_spec, built, evaluate(second_spec, on_gpu), trivial,
                  on_gpu, flushes)
    fetches = [r for r in spec.fetches if r in built.outputs]
    good = [r for r in built.outputs if isinstance(first.outcomes[r], np.ndarray)]
    if on_gpu:
        _gpu_events(spec, first.outcomes)
    configs = CONFIGS
    if on_gpu:
        configs = GPU_CONFIGS
        if _order_free(spec, first.outcomes):
            configs += (GPU_ATOMICS,)
            if any(node.op in _ORDERED_SCATTERS for node in spec.nodes):
                _event("gpu: integer scatters also through the atomics")
    for run in configs:
        devices = gpu_session_devices(gpu) if on_gpu else None
        with _scheduling(run), gf.Session(scope.graph, run.config, devices=devices) as sess:
            if run is configs[0] and good:
                _run_once(sess, first, good, run)
            if fetches:  # twice: the plan and its kernels' caches are reused
                for case in (first, first, second):
                    _run_once(sess, case, fetches, run)
            if fetches and run.concurrent:
                with ThreadPoolExecutor(2) as pool:
                    for f in [pool.submit(_run_once, sess, c, fetches, run) for c in (first, second)]:
                        f.result()
            if on_gpu:
                _check_placement(sess, built)
    for k, original in originals.items():
        assert_same(spec.nodes[k].value, original, f"n{k} = {spec.nodes[k]!r} was modified")
        if k in built.consts:
            assert_same(built.consts[k].op.attrs["value"], original, f"const n{k} was modified")
    for k, value in spec.second_feeds.items():
        assert_same(second_spec.nodes[k].value, value, f"second feed of n{k} was modified")
    for ref, value in spec.fed.items():
        assert_same(value, fed_originals[ref], f"the feed of {ref} was modified")
