"""Element-wise fusion: connected element-wise ops become one compiled kernel.

At plan time (``optimize=True``, in sessions whose devices are all CPUs: on a GPU
the ops keep their own kernels), after the partition -> stitch rewrite, the ops
whose element-wise trait says they fuse (``op_def.elementwise``, declared in
ops/elementwise_table.py: arithmetic, comparisons, logical ops, SelectV2, Cast)
are grouped into *regions* of connected ops. Each
region of two or more ops becomes one ``_FusedElementwise`` node
(ops/fused_elementwise.py) whose outputs are the region's values that escape it
(read by another node, or fetched); the plan wires them in instead of the
originals, as every rewrite does: the user's graph is never changed.

A region's *program* is its structure without names: the input dtypes, one
``(op type, dtype, operands)`` line per op, the outputs. It compiles to one numba
loop over the elements (:meth:`Program.kernel`) that computes every op per element
in registers, exactly as the unfused kernels would: each op's scalar expression
and the dtypes it compiles for are its element-wise trait (ops/elementwise_table.py,
which says how results stay bit for bit numpy's and TensorFlow's).

What is never fused (the op stays as it is and bounds the regions): an op that
is not element-wise or whose trait says it does not fuse or does not compile for
its dtypes and attrs (string, float16 and complex values; Cast from a float to an
integer); an op with a fed output, with control inputs, or that another op waits
for; stateful ops; ops requesting a device other than the CPU.

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
import operator
import threading
from dataclasses import dataclass
from typing import Callable, Collection, Iterable, Sequence

import numpy as np

from graphflow.device_spec import parse_device
from graphflow.errors import InvalidArgumentError
from graphflow.graph import Operation, Output
from graphflow.ops.elementwise_table import type_aliases
from graphflow.ops.codegen import load_numba
from graphflow.registry import op_def

from .passes import prune

#: The most ops one fused kernel computes: numba's compile time grows faster than
#: linearly with a kernel's size (a 3000-op region took minutes), so long chains
#: become several kernels of bounded compile time.
MAX_REGION_OPS = 128


# -- choosing the ops ---------------------------------------------------------------------
def _fusible(op: Operation, fed: Collection[Output], waited_on: set[Operation]) -> bool:
    rule = op.op_def.elementwise
    if rule is None or not rule.fuses or len(op.inputs) != rule.arity or len(op.outputs) != 1:
        return False
    if op.control_inputs or op in waited_on or op.op_def.stateful or op.outputs[0] in fed:
        return False
    if not on_the_cpu(op):
        return False
    return rule.compiles([o.dtype.as_numpy_dtype for o in (*op.inputs, *op.outputs)], op.attrs)


def readers_of(ops: Sequence[Operation]) -> dict[Output, list[Operation]]:
    """Each value's readers among ``ops`` (an op reading it twice, twice)."""
    readers: dict[Output, list[Operation]] = {}
    for op in ops:
        for i in op.inputs:
            readers.setdefault(i, []).append(op)
    return readers


def on_the_cpu(op: Operation) -> bool:
    """Whether ``op`` asks for no device but this process's CPU."""
    try:
        spec = parse_device(op.device)
    except InvalidArgumentError:
        return False
    return spec.device_type in (None, "cpu") and not (op.device and "/job:" in op.device)


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
        lines = ['"""A fused element-wise kernel generated by graphflow (runtime/fusion.py)."""',
                 "import numpy as _np", "from graphflow.ops.jit import kernel", ""]
        lines += type_aliases([*self.inputs, *(d for _, d, _ in self.nodes)])
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
            rule = op_def(op_type).elementwise
            body[once[n_in + i]].append(
                f"v{i} = {rule.expression(dtype, args, self.dtype(operands[0]))}")
            names.append(f"v{i}")
        for m, node in enumerate(self.outputs):
            body[once[n_in + node]].append(
                f"o{m}[{0 if once[n_in + node] else index}] = v{node}")
        lines += [f"    {line}" for line in body[True]]
        lines += [f"    {line}" for line in loops]
        lines += [f"    {'    ' * len(loops)}{line}" for line in body[False] or ["pass"]]
        return "\n".join(lines) + "\n"

    def loaded_kernel(self, scalars: int = 0, rank: int = 0) -> Callable | None:
        """:meth:`kernel` if this process loaded it already, else None (loading creates a
        numba dispatcher: what a first call need not pay for)."""
        return _KERNELS.get((self, scalars, rank))

    def kernel(self, scalars: int = 0, rank: int = 0) -> Callable:
        """The compiled kernel of :meth:`source`: cached in this process by structure, and
        on disk (numba's cache) by its source; its source is kept (ops/codegen.py's
        ``code_of``), and a plan whose node runs it lists it (``plan.code``)."""
        key = (self, scalars, rank)
        fn = _KERNELS.get(key)
        if fn is None:
            with _COMPILE_LOCK:
                fn = _KERNELS.get(key)
                if fn is None:
                    fn, _ = load_numba(self.source(scalars, rank), "fused",
                                       what="fused kernel (numba)")
                    _KERNELS[key] = fn
        return fn


_KERNELS: dict[tuple[Program, int, int], Callable] = {}
_COMPILE_LOCK = threading.Lock()


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
                 fetches: Iterable | None = None) -> list[Region]:
    """The element-wise regions (two or more ops) among the ops a plan runs.

    ``ops`` are the ops the fetches need, in creation order. Without ``fetches`` the
    fetches are the outputs no op in ``ops`` reads: a fetched value that another op
    also reads is then not known to be fetched, and the plan recomputes it unfused (the
    same value, once more)."""
    fed = set(fed)
    live, consumers, fetched, targets = _live_graph(ops, fed, fetches)
    waited_on = {c for op in live for c in op.control_inputs}
    fusible = {op for op in live if op not in targets and _fusible(op, fed, waited_on)}

    # greedy, in creation order: an op joins the regions of its fusible producers (that
    # asked for the same device) when no op outside them has read one of their values yet
    group_of: dict[Operation, _Group] = {}
    for op in live:
        producers: list[_Group] = []
        for e in op.inputs:
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
        regions.append(_region(group.members, fed, consumers, fetched))
    return regions


class _Group:
    """A region while it grows."""

    __slots__ = ("members", "read_outside", "merged")

    def __init__(self, members: list[Operation]):
        self.members = members
        self.read_outside = False  # an op outside has read one of its values
        self.merged = False        # it joined a larger group


def _live_graph(ops, fed, fetches):
    """The ops the fetches need (in creation order), who reads each value, the values
    known to be fetched, and the ops fetched as targets."""
    if fetches is not None:
        fetches = list(fetches)
        fetched = {f for f in fetches if isinstance(f, Output)}
        targets = {f for f in fetches if isinstance(f, Operation)}
        roots = [o.op for o in fetched if o not in fed] + list(targets)
    else:
        read = {i for op in ops for i in op.inputs}
        fetched = {o for op in ops for o in op.outputs if o not in read and o not in fed}
        roots = [op for op in ops if not op.outputs or any(o in fetched for o in op.outputs)]
        targets = set()
    ordered = prune(roots, fed)
    consumers: dict[Output, list[Operation]] = {}
    for op in ordered:
        for i in op.inputs:
            consumers.setdefault(i, []).append(op)
    return ordered, consumers, fetched, targets


def _region(members: list[Operation], fed, consumers, fetched) -> Region:
    inside = set(members)
    inputs: list[Output] = []
    refs: dict[Output, int] = {}
    for op in members:
        for e in op.inputs:
            if (e in fed or e.op not in inside) and e not in refs:
                refs[e] = len(inputs)
                inputs.append(e)
    n_in = len(inputs)
    nodes = []
    for k, op in enumerate(members):
        operands = []
        for e in op.inputs:
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
                     fetches: Iterable | None = None) -> dict[Output, Output]:
    """Substitutes that compute every element-wise region of the plan in one fused node:
    each escaping output of a region -> the fused node's output."""
    found: dict[Output, Output] = {}
    for region in find_regions(ops, fed, fetches):
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

    from .inspection import default_signature
    from .pipeline import compile_ir

    fetches, feeds = default_signature(graph, fetches, feeds)
    cpus = [d for d in list_devices() if d.device_type == "cpu"]
    ir = compile_ir(list(fetches), list(feeds), cpus, SessionConfig())
    return [op.attrs["region"] for op in ir.ops if op.type == "_FusedElementwise"]
