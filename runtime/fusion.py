"""Element-wise fusion: connected element-wise ops become one compiled kernel.

At plan time (``optimize=True``, in sessions whose devices are all CPUs: on a GPU
the ops keep their own kernels), after the partition -> stitch rewrite, the ops
that compute one value per element (the binary and unary math ops, comparisons,
logical ops, SelectV2 and Cast) are grouped into *regions* of connected ops. Each
region of two or more ops becomes one ``_FusedElementwise`` node
(ops/fused_elementwise.py) whose outputs are the region's values that escape it
(read by another node, or fetched); the plan wires them in instead of the
originals, as every rewrite does: the user's graph is never changed.

A region's *program* is its structure without names: the input dtypes, one
``(op type, dtype, operands)`` line per op, the outputs. It compiles to one numba
loop over the elements (:meth:`Program.kernel`) that computes every op per element
in registers, exactly as the unfused kernels would:

- after every op the value is cast back to the op's dtype, so that float32 rounds
  after each op (float32 ops computed in float64 and rounded once are correctly
  rounded for + - * /, so the result does not depend on how numba types them);
- integer + - * and negation are computed in uint64, which wraps, then cast back:
  small ints wrap as numpy's do (numba would compute them in int64), and int64
  overflow is no undefined behaviour LLVM could optimize on (numba's signed
  arithmetic is ``nsw``: ``(a + a) != 0`` became ``a != 0`` for INT64_MIN);
- Maximum and Minimum follow numpy's NaN and signed-zero rules, found by probing
  numpy's own loops on arrays of several lengths (:func:`minmax_rules`); a float
  Maximum/Minimum is not fused when numpy is not consistent on this machine;
- no fastmath; a float division by zero gives inf or NaN (``error_model="numpy"``).

What is never fused (the op stays as it is and bounds the regions): an op with a
fed output, with control inputs, or that another op waits for; stateful ops;
string, float16 and complex dtypes (numba has no float16 arithmetic; complex
products and quotients are not shown bit-identical with numpy's); Cast from a
float to an integer (undefined for NaN and out-of-range values in TensorFlow: the
Cast kernel keeps numpy's result); ops requesting a device other than the CPU.

A region only grows while no node outside it has read one of its values yet (in
the graph's creation order), so the fused node can take the place of its last op
in that order: every input is made before it and every reader comes after, and
two regions never wait on each other.

NaN payloads: where two NaNs meet in a commutative op (NaN + NaN, NaN * NaN) the
NaN that comes out is not specified even by numpy (it depends on its loop); the
fused kernel gives a NaN there, maybe with the other payload or sign.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import operator
import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Callable, Collection, Iterable, Sequence

import numpy as np

import graphflow.ops.fused_elementwise  # noqa: F401  (registers _FusedElementwise)
from graphflow.device_spec import parse_device
from graphflow.errors import InvalidArgumentError
from graphflow.graph import Operation, Output
from graphflow.ops.jit import cache_dir, cache_enabled, kernel
from graphflow.registry import op_def

from .passes import prune

log = logging.getLogger("graphflow.fusion")

#: The op types a region may hold, and how many inputs each reads.
FUSIBLE = {"Add": 2, "Sub": 2, "Mul": 2, "RealDiv": 2, "Maximum": 2, "Minimum": 2, "Neg": 1,
           "Equal": 2, "NotEqual": 2, "Less": 2, "Greater": 2, "LogicalAnd": 2,
           "LogicalOr": 2, "LogicalNot": 1, "SelectV2": 3, "Cast": 1}

#: The most ops one fused kernel computes: numba's compile time grows faster than
#: linearly with a kernel's size (a 3000-op region took minutes), so long chains
#: become several kernels of bounded compile time.
MAX_REGION_OPS = 128

#: dtypes whose element-wise arithmetic numba reproduces bit for bit.
DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float32, np.float64))


# -- numpy's Maximum/Minimum on floats ---------------------------------------------------
@functools.cache
def minmax_rules() -> dict[str, str | None]:
    """For np.maximum and np.minimum on float arrays: ``"ties_second"`` when they return
    ``a if (a > b or a is NaN) else b`` (``<`` for minimum), ``"ties_first"`` for ``>=``,
    None when numpy agrees with neither on some length (its SIMD loops and their scalar
    tails differ). Probed once per process, on first use."""
    found: dict[str, str | None] = {}
    for name, fn, cmp in (("Maximum", np.maximum, np.greater), ("Minimum", np.minimum, np.less)):
        rules = {"ties_second": cmp, "ties_first": np.greater_equal if cmp is np.greater
                 else np.less_equal}
        agree = set(rules)
        for dtype, uint in ((np.float32, np.uint32), (np.float64, np.uint64)):
            nan = np.array(np.nan, dtype)
            payload = (nan.view(uint) | uint(1)).view(dtype)
            special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, nan, -nan, payload],
                               dtype)
            pairs = len(special) ** 2  # every (a, b), at every offset of every length
            a = np.resize(np.repeat(special, len(special)), 2 * pairs + 257)
            b = np.resize(np.tile(special, len(special)), 2 * pairs + 257)
            for n in (1, 3, 8, 17, 64, 257):
                for start in range(0, pairs, n):
                    x, y = a[start:start + n], b[start:start + n]
                    for xs, ys in ((x, y), (x[:1], y), (x, y[:1])):
                        got = fn(xs, ys).view(uint)
                        for rule in list(agree):
                            want = np.where(rules[rule](xs, ys) | np.isnan(xs), xs, ys)
                            if not np.array_equal(got, np.broadcast_to(want, got.shape).view(uint)):
                                agree.discard(rule)
        found[name] = next(iter(sorted(agree)), None)
    return found


# -- choosing the ops ---------------------------------------------------------------------
def _fusible(op: Operation, fed: Collection[Output], waited_on: set[Operation]) -> bool:
    arity = FUSIBLE.get(op.type)
    if arity is None or len(op.inputs) != arity or len(op.outputs) != 1:
        return False
    if op.control_inputs or op in waited_on or op.op_def.stateful or op.outputs[0] in fed:
        return False
    try:
        spec = parse_device(op.device)
    except InvalidArgumentError:
        return False
    if spec.device_type not in (None, "cpu") or (op.device and "/job:" in op.device):
        return False
    dtypes = [np.dtype(o.dtype.as_numpy_dtype) for o in (*op.inputs, *op.outputs)]
    if any(d not in DTYPES for d in dtypes):
        return False
    if op.type == "Cast" and dtypes[0].kind == "f" and dtypes[1].kind in "iu":
        return False  # undefined for NaN and out of range: left to the Cast kernel
    if op.type == "Cast" and op.attrs.get("Truncate"):
        return False  # rounding toward zero: the Cast kernel's bit operations
    if op.type in ("Maximum", "Minimum") and dtypes[0].kind == "f" \
            and minmax_rules()[op.type] is None:
        return False
    return True


# -- the structure of a region ------------------------------------------------------------
@dataclass(frozen=True)
class Program:
    """What a region computes, without names: operand ``k < len(inputs)`` is input k,
    operand ``len(inputs) + i`` is the value of node i."""

    inputs: tuple[str, ...]                              # input dtypes (numpy names)
    nodes: tuple[tuple[str, str, tuple[int, ...]], ...]  # (op type, dtype, operands)
    outputs: tuple[int, ...]                             # the nodes that escape

    def dtype(self, ref: int) -> str:
        n = len(self.inputs)
        return self.inputs[ref] if ref < n else self.nodes[ref - n][1]

    @functools.cached_property
    def supports(self) -> tuple[int, ...]:
        """Per operand (inputs, then nodes): bit k set if it depends on input k."""
        bits = [1 << k for k in range(len(self.inputs))]
        for _, _, operands in self.nodes:
            bits.append(functools.reduce(operator.or_, (bits[r] for r in operands), 0))
        return tuple(bits)

    def source(self, scalars: int = 0, rank: int = 0) -> str:
        """The kernel's Python source.

        ``rank`` 0: ``fused(n, *inputs, *outputs)`` loops over ``n`` elements of 1-D
        arrays; bit k of ``scalars`` set: input k holds one element, and the nodes that
        depend on such inputs only are computed once, before the loop (an output among
        them is written once, to its one element). ``rank`` r > 0:
        ``fused(shape, *inputs, *outputs)`` loops over an r-dimensional ``shape`` with
        one index per dimension; the inputs are views broadcast to it (``scalars``
        unused)."""
        n_in = len(self.inputs)
        xs = [f"x{k}" for k in range(n_in)]
        outs = [f"o{m}" for m in range(len(self.outputs))]
        types = sorted({"uint64", *self.inputs, *(d for _, d, _ in self.nodes)})
        lines = ['"""A fused element-wise kernel generated by graphflow (runtime/fusion.py)."""',
                 "import numpy as _np", "from graphflow.ops.jit import kernel", ""]
        # np.bool_, not np.bool: numpy < 2 has no np.bool
        lines += [f"_{t} = _np.{np.dtype(t).type.__name__}" for t in types]
        params = ", ".join(["shape" if rank else "n", *xs, *outs])
        lines += ["", "", "@kernel", f"def fused({params}):"]
        if rank:
            scalars = 0
            index = ", ".join(f"i{d}" for d in range(rank))
            loops = [f"{'    ' * d}for i{d} in range(shape[{d}]):" for d in range(rank)]
        else:
            index = "j"
            loops = ["for j in range(n):"]
        once = [not self.supports[r] & ~scalars for r in range(n_in + len(self.nodes))]
        body = {True: [], False: []}  # before the loop, in it
        for k in range(n_in):
            body[once[k]].append(f"s{k} = x{k}[{0 if once[k] else index}]")
        names = [f"s{k}" for k in range(n_in)]
        for i, (op_type, dtype, operands) in enumerate(self.nodes):
            args = [names[r] for r in operands]
            body[once[n_in + i]].append(
                f"v{i} = {_expression(op_type, dtype, args, self.dtype(operands[0]))}")
            names.append(f"v{i}")
        for m, node in enumerate(self.outputs):
            body[once[n_in + node]].append(
                f"o{m}[{0 if once[n_in + node] else index}] = v{node}")
        lines += [f"    {line}" for line in body[True]]
        lines += [f"    {line}" for line in loops]
        lines += [f"    {'    ' * len(loops)}{line}" for line in body[False] or ["pass"]]
        return "\n".join(lines) + "\n"

    def kernel(self, scalars: int = 0, rank: int = 0) -> Callable:
        """The compiled kernel of :meth:`source`: cached in this process by structure, and
        on disk (numba's cache) by its source."""
        key = (self, scalars, rank)
        fn = _KERNELS.get(key)
        if fn is None:
            with _COMPILE_LOCK:
                fn = _KERNELS.get(key)
                if fn is None:
                    fn = _KERNELS[key] = _load(self.source(scalars, rank))
        return fn


#: The source of one element of each op's result; ``{t}`` rounds to the op's dtype.
_SOURCE = {
    "Add": "{t}({0} + {1})", "Sub": "{t}({0} - {1})", "Mul": "{t}({0} * {1})",
    "RealDiv": "{t}({0} / {1})", "Neg": "{t}(-{0})",
    "Equal": "{0} == {1}", "NotEqual": "{0} != {1}", "Less": "{0} < {1}", "Greater": "{0} > {1}",
    "LogicalAnd": "{0} and {1}", "LogicalOr": "{0} or {1}", "LogicalNot": "not {0}",
    "SelectV2": "{1} if {0} else {2}",
}


def _expression(op_type: str, dtype: str, a: list[str], operand_dtype: str) -> str:
    """One node's value as a numba expression of its operands' values."""
    t = f"_{dtype}"
    if np.dtype(dtype).kind in "iu" and op_type in ("Add", "Sub", "Mul", "Neg"):
        # in uint64, which wraps: numba's signed arithmetic may assume it does not
        # overflow (LLVM's nsw), and a small int computed in int64 is truncated back
        u = [f"_uint64({x})" for x in a]
        if op_type == "Neg":
            return f"{t}(_uint64(0) - {u[0]})"
        return f"{t}({u[0]} {_ARITHMETIC[op_type]} {u[1]})"
    if op_type in ("Maximum", "Minimum"):
        cmp = ">" if op_type == "Maximum" else "<"
        if np.dtype(dtype).kind != "f":
            return f"{a[0]} if {a[0]} {cmp} {a[1]} else {a[1]}"
        if minmax_rules()[op_type] == "ties_first":
            cmp += "="
        return f"{a[0]} if ({a[0]} {cmp} {a[1]} or {a[0]} != {a[0]}) else {a[1]}"
    if op_type in _SOURCE:
        return _SOURCE[op_type].format(*a, t=t)
    if op_type == "Cast":
        if dtype == "bool":
            return a[0] if operand_dtype == "bool" else f"{a[0]} != 0"
        return f"{t}({a[0]})"
    raise ValueError(f"no fused expression for {op_type}")  # pragma: no cover


_ARITHMETIC = {"Add": "+", "Sub": "-", "Mul": "*"}
_KERNELS: dict[tuple[Program, int, int], Callable] = {}
_COMPILE_LOCK = threading.Lock()


def _load(source: str) -> Callable:
    """Import ``source`` as a module under :func:`cache_dir` (named by its hash, written
    once, so that numba's on-disk cache finds it again in the next process) and return
    its kernel. Without a writable cache folder the module is built in memory and
    compiled without the disk cache."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:20]
    name = f"graphflow_fused_{digest}"
    folder = cache_dir() / "fused"
    path = folder / f"{name}.py"
    try:
        if not cache_enabled():  # GRAPHFLOW_JIT_CACHE=0: nothing is written there
            raise OSError("the kernel cache is off")
        if path.exists() and path.read_text() != source:  # damaged (truncated, edited)
            log.warning("graphflow: discarding a damaged fused kernel source %s", path)
            path.unlink()
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(source)
            os.replace(tmp, path)  # atomic: another process may write the same file
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module.fused
    except OSError as e:
        log.info("fused kernels are not cached on disk (%s): %s", folder, e)
    namespace: dict = {"kernel": lambda f: kernel(f, cache=False)}
    code = source.replace("from graphflow.ops.jit import kernel\n", "")
    exec(compile(code, f"<graphflow fused {digest}>", "exec"), namespace)  # noqa: S102
    return namespace["fused"]


# -- regions ------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Region:
    """A group of connected element-wise ops computed by one fused node."""

    members: tuple[Operation, ...]   # in creation (= topological) order
    inputs: tuple[Output, ...]       # values read from outside, as the plan wires them
    outputs: tuple[Output, ...]      # members' outputs that escape
    program: Program

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(op.name for op in self.members)

    @property
    def name(self) -> str:
        """The fused node's name: the region's last op, marked."""
        return f"{self.members[-1].name}/fused"

    def describe(self) -> str:
        """``add_9/fused: 10 ops (add, ..., add_9); reads x:0; gives add_9:0``."""
        names = self.names
        shown = ", ".join(names) if len(names) <= 6 else \
            ", ".join(names[:3]) + f", ... ({len(names) - 5} more), " + ", ".join(names[-2:])
        return (f"{self.name}: {len(names)} ops ({shown}); reads "
                f"{', '.join(o.name for o in self.inputs) or '-'}; gives "
                f"{', '.join(o.name for o in self.outputs)}")


def find_regions(ops: Sequence[Operation], fed: Collection[Output] = (),
                 subst: dict[Output, Output] | None = None,
                 fetches: Iterable | None = None) -> list[Region]:
    """The element-wise regions (two or more ops) among the ops a plan runs.

    ``ops`` are the ops the fetches need (in creation order) before ``subst`` (the
    substitutes of earlier rewrites) is applied; the ops that are still needed with
    ``subst`` are found from the fetches. Without ``fetches`` they are the outputs no
    op in ``ops`` reads: a fetched value that another op also reads is then not known
    to be fetched, and the plan recomputes it unfused (the same value, once more)."""
    subst = subst or {}
    fed = set(fed)
    live, consumers, fetched, targets = _live_graph(ops, fed, subst, fetches)
    waited_on = {c for op in live for c in op.control_inputs}
    fusible = {op for op in live if op not in targets and _fusible(op, fed, waited_on)}

    # greedy, in creation order: an op joins the regions of its fusible producers (that
    # asked for the same device) when no op outside them has read one of their values yet
    group_of: dict[Operation, _Group] = {}
    for op in live:
        producers: list[_Group] = []
        for i in op.inputs:
            e = subst.get(i, i)
            group = group_of.get(e.op) if e not in fed else None
            if group is not None and group not in producers:
                producers.append(group)
        joined = None
        if op in fusible:
            joined = _Group([op])
            for group in producers:
                if not group.read_outside and group.members[0].device == op.device \
                        and len(joined.members) + len(group.members) <= MAX_REGION_OPS:
                    joined.members += group.members
                    group.merged = True
            joined.members.sort(key=lambda o: o.position)
            for member in joined.members:
                group_of[member] = joined
        for group in producers:
            if not group.merged:
                group.read_outside = True

    regions: list[Region] = []
    seen: set[int] = set()
    for op in live:
        group = group_of.get(op)
        if group is None or id(group) in seen or len(group.members) < 2:
            continue
        seen.add(id(group))
        regions.append(_region(group.members, fed, subst, consumers, fetched))
    return regions


class _Group:
    """A region while it grows."""

    __slots__ = ("members", "read_outside", "merged")

    def __init__(self, members: list[Operation]):
        self.members = members
        self.read_outside = False  # an op outside has read one of its values
        self.merged = False        # it joined a larger group


def _live_graph(ops, fed, subst, fetches):
    """The ops still needed once ``subst`` is applied (in creation order), who reads each
    value (after ``subst``), the values known to be fetched, and the ops fetched as
    targets."""
    if fetches is not None:
        fetches = list(fetches)
        fetched = {subst.get(f, f) for f in fetches if isinstance(f, Output)}
        targets = {f for f in fetches if isinstance(f, Operation)}
        roots = [o.op for o in fetched if o not in fed] + list(targets)
    else:
        read = {i for op in ops for i in op.inputs}
        fetched, roots = set(), []
        for op in ops:
            unread = [o for o in op.outputs if o not in read and o not in fed]
            if op.outputs and not unread:
                continue
            fetched.update(subst.get(o, o) for o in unread)
            roots += [subst.get(o, o).op for o in unread]
            if not op.outputs or any(o not in subst for o in op.outputs):
                roots.append(op)
        targets = set()
    ordered = prune(roots, fed, subst)
    consumers: dict[Output, list[Operation]] = {}
    for op in ordered:
        for i in op.inputs:
            consumers.setdefault(subst.get(i, i), []).append(op)
    return ordered, consumers, fetched, targets


def _region(members: list[Operation], fed, subst, consumers, fetched) -> Region:
    inside = set(members)
    inputs: list[Output] = []
    refs: dict[Output, int] = {}
    for op in members:
        for i in op.inputs:
            e = subst.get(i, i)
            if (e in fed or e.op not in inside) and e not in refs:
                refs[e] = len(inputs)
                inputs.append(e)
    n_in = len(inputs)
    nodes = []
    for k, op in enumerate(members):
        operands = []
        for i in op.inputs:
            e = subst.get(i, i)
            operands.append(refs[e] if e in refs else n_in + members.index(e.op))
        refs[op.outputs[0]] = n_in + k
        dtype = np.dtype(op.outputs[0].dtype.as_numpy_dtype).name
        nodes.append((op.type, dtype, tuple(operands)))
    outputs = [op.outputs[0] for op in members
               if op.outputs[0] in fetched or any(c not in inside
                                                  for c in consumers.get(op.outputs[0], ()))]
    program = Program(tuple(np.dtype(o.dtype.as_numpy_dtype).name for o in inputs), tuple(nodes),
                      tuple(members.index(o.op) for o in outputs))
    return Region(tuple(members), tuple(inputs), tuple(outputs), program)


def fused_node(region: Region) -> Operation:
    """The ``_FusedElementwise`` node that computes ``region``: it takes the place of the
    region's last op in the creation order (every input comes before it, every reader
    after it)."""
    last = region.members[-1]
    attrs = {"T": region.outputs[0].dtype, "N": len(region.inputs), "M": len(region.outputs),
             "region": region, "replaces": region.names}
    return Operation.stand_in(last, op_def("_FusedElementwise"), region.inputs,
                              (len(region.inputs),), attrs,
                              [(o.dtype, o.shape) for o in region.outputs], name=region.name)


def fuse_elementwise(ops: Sequence[Operation], fed: Collection[Output] = (),
                     subst: dict[Output, Output] | None = None,
                     fetches: Iterable | None = None) -> dict[Output, Output]:
    """Substitutes that compute every element-wise region of the plan in one fused node:
    each escaping output of a region -> the fused node's output."""
    found: dict[Output, Output] = {}
    for region in find_regions(ops, fed, subst, fetches):
        node = fused_node(region)
        found.update(zip(region.outputs, node.outputs))
    return found


def plan_regions(graph, fetches: Iterable | None = None,
                 feeds: Iterable[Output] | None = None) -> list[Region]:
    """The regions a plan of ``graph`` fuses (for ``graphflow inspect`` and DOT), from
    the compile pipeline a CPU Session runs (runtime/pipeline.py: folding and
    simplification first): by default fetching every output no op reads, with every
    Placeholder fed."""
    from graphflow.runtime.device_discovery import list_devices
    from graphflow.runtime.session import SessionConfig

    from .pipeline import compile_ir

    ops = list(graph.operations())
    if feeds is None:
        feeds = [o for op in ops if op.type == "Placeholder" for o in op.outputs]
    if fetches is None:
        read = {i for op in ops for i in op.inputs}
        fetches = [o for op in ops for o in op.outputs if o not in read]
    cpus = [d for d in list_devices() if d.device_type == "cpu"]
    ir = compile_ir(list(fetches), list(feeds), cpus, SessionConfig())
    return [op.attrs["region"] for op in ir.ops if op.type == "_FusedElementwise"]
