"""The plan's intermediate representation: a value, and the one way rewrites change it.

A ``PlanIR`` is what a (fetches, feeds) signature needs before anything is placed:
the ops to run, in creation (= topological) order, each reading its inputs
directly (a feed, or an output of an op before it) and waiting on ops before it.
It is never changed: a pass (runtime/pipeline.py) returns a new one, and the nodes in
it are values too: a pass that changes what a node reads makes a copy of it (a
plan-only node, ``Operation.stand_in``: the user's graph is never touched).

Every pass applies its rewrites through :func:`substitute` ("this value is now that
one"), the one place that rewires readers and keeps the rule "a rewrite keeps every
control dependency of what it replaces". :func:`check_ir` holds the invariants every
pass keeps; :func:`describe` prints an IR (``graphflow inspect --after PASS``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from operator import is_not
from typing import Callable, Mapping, Sequence

from graphflow.errors import InternalError
from graphflow.graph import Operation, Output

from ..ops.background import pace
from .passes import prune, waits_on


@dataclass(frozen=True)
class PlanIR:
    """The ops a signature runs, each reading its inputs directly."""

    fetches: tuple                  # the plan's values (and Operations) for what is fetched
    feeds: tuple[Output, ...]       # fed Outputs (a shape-specialized plan's carry its shapes)
    ops: tuple[Operation, ...]      # the ops needed, in creation order
    #: a record of the rewrites (for inspection, never read by a pass): each value a pass
    #: replaced -> the plan's value computing it now (a folded Const, a fused node's output)
    replaced: Mapping[Output, Output] = field(default_factory=dict)
    #: values that must still be computed though nothing reads them: the inputs of a
    #: folded Shape/Size/OnesLike, whose errors and effects the plan keeps
    roots: tuple[Output, ...] = ()
    #: the device each op runs on, once the placement pass ran (runtime/placer.py)
    placement: Mapping[Operation, object] = field(default_factory=dict)

    @property
    def fed(self) -> frozenset[Output]:
        return frozenset(self.feeds)

    @property
    def targets(self) -> tuple:
        """What the plan must compute: the fetches, then the roots."""
        return self.fetches + self.roots


Pass = Callable[[PlanIR], PlanIR]


def initial_ir(fetches: Sequence, feeds: Sequence[Output]) -> PlanIR:
    """The IR of a signature as written: every op the fetches need, nothing replaced."""
    feeds = tuple(feeds)
    written = PlanIR(tuple(fetches), feeds, tuple(prune(fetches, set(feeds))))
    return rewired(written, {})  # a control input on a fed Placeholder: nothing to wait on


def substitute(ir: PlanIR, new: Mapping[Output, Output], roots: Sequence[Output] = ()) -> PlanIR:
    """``ir`` rewritten: the values ``new`` maps replaced by theirs, every op reading
    what it reads now directly, the ops nothing needs any more gone.

    An op whose inputs or control inputs change is copied (:func:`rewired`): no node
    is ever changed, the user's or a plan's. The ops the substitution makes unnecessary
    keep their control dependencies: their control inputs move onto (a copy of) the
    new node that stands for them, so a folded constant that waited on ``inc`` still
    makes ``inc`` run, before the constant's readers. A substitute that is a value the
    plan already computes (``x * 1 -> x``) cannot take control inputs (every reader of
    ``x`` would wait too): such a substitution is not made when what it replaces
    waited on something. ``roots`` are values to keep computing though nothing reads
    them."""
    new = _chained(dict(new))
    roots = tuple(dict.fromkeys((*ir.roots, *(new.get(r, r) for r in roots))))
    if not new and roots == ir.roots:
        return ir
    existing = set(ir.ops)
    while True:
        needed = _needed(ir, new, roots)
        removed = existing.difference(needed)
        waiting: dict[Operation, list[Operation]] = {}  # new node -> what it must wait on
        refused = False
        for source, target in list(new.items()):
            waits = _waits(source.op, removed)
            if not waits:
                continue
            if target in ir.fed or target.op in existing:
                del new[source]
                refused = True
            else:
                waiting.setdefault(target.op, []).extend(waits)
        if not refused:
            break
        new = _chained(new)
    if not waiting:
        return rewired(ir, new, roots, needed)
    for node, waits in waiting.items():  # nodes are values: a copy waits too
        copy = with_controls(node, waits)
        new.update(zip(node.outputs, copy.outputs))
    return rewired(ir, _chained(new), roots)


def rewired(ir: PlanIR, new: Mapping[Output, Output], roots: tuple = (),
            needed: Sequence[Operation] | None = None) -> PlanIR:
    """The IR whose ops read the substitutes ``new`` (already chained) directly: each op
    whose inputs or control inputs change is copied, and its readers read the copy.
    ``needed``: the ops the targets need with ``new`` wired in, when known."""
    copies: dict[Operation, Operation] = {}
    fed = ir.fed

    def final(o: Output) -> Output:  # a fed value stays the feed, whoever computes it
        o = new.get(o, o)
        node = None if o in fed else copies.get(o.op)
        return o if node is None else node.outputs[o.index]

    targets = waits_on(new, fed)
    ops = []
    for op in _needed(ir, new, roots) if needed is None else needed:
        pace()  # built in the background: the caller's share of the GIL
        inputs = [final(i) for i in op.inputs]
        controls = list(dict.fromkeys(copies.get(t, t) for c in op.control_inputs
                                      for t in targets(c))) if op.control_inputs else []
        if any(map(is_not, inputs, op.inputs)) or len(controls) != len(op.control_inputs) \
                or any(map(is_not, controls, op.control_inputs)):
            copies[op] = _copy(op, inputs, controls)
        ops.append(copies.get(op, op))
    fetches = tuple(final(f) if isinstance(f, Output) else copies.get(f, f) for f in ir.fetches)
    replaced = {source: final(target) for source, target in {**ir.replaced, **new}.items()}
    return PlanIR(fetches, ir.feeds, tuple(ops), replaced, tuple(final(r) for r in roots))


def _needed(ir: PlanIR, new: Mapping[Output, Output], roots: tuple) -> list[Operation]:
    """The ops the fetches and ``roots`` need once ``new`` is wired in, in order."""
    fetches = [new.get(f, f) if isinstance(f, Output) else f for f in ir.fetches]
    return prune(fetches + [new.get(r, r) for r in roots], ir.fed, new)


def _copy(node: Operation, inputs: Sequence[Output], controls: Sequence[Operation]) -> Operation:
    return Operation.stand_in(node, node.op_def, inputs, node.arg_lengths, node.attrs,
                              [(o.dtype, o.shape) for o in node.outputs], name=node.name,
                              control_inputs=controls)


def with_controls(node: Operation, waits: Sequence[Operation]) -> Operation:
    """A copy of plan node ``node`` that also waits on ``waits`` (a plan never changes a
    node, its own or the user's: a rewrite makes a new one)."""
    return _copy(node, node.inputs, tuple(dict.fromkeys((*node.control_inputs, *waits))))


def _waits(root: Operation, removed: set) -> list[Operation]:
    """The control inputs of the removed ops that ``root``'s value was computed from."""
    cone: set[Operation] = set()
    stack = [root]
    while stack:
        op = stack.pop()
        if op in cone or op not in removed:
            continue
        cone.add(op)
        stack += [i.op for i in op.inputs]
    return [c for op in sorted(cone, key=lambda o: o.position) for c in op.control_inputs
            if c not in cone]


def _chained(subst: Mapping[Output, Output]) -> dict[Output, Output]:
    """``subst`` with chains (a -> b, b -> c) collapsed (a -> c)."""
    resolved = {}
    for source, target in subst.items():
        seen = 0
        while target in subst and seen < len(subst):
            target = subst[target]
            seen += 1
        resolved[source] = target
    return resolved


def check_ir(ir: PlanIR, after: str, graph_before=None) -> None:
    """The invariants every pass keeps, an InternalError naming the pass that broke one:
    each op once, reading only feeds and values of ops before it and waiting only on
    ops before it (the order a serial plan runs), every fetch and root computed or fed,
    the record of rewrites never replacing a feed, and the user's graph as it was
    (``graph_before``: :func:`graph_fingerprint`)."""
    def broken(what: str):
        raise InternalError(f"the plan pass '{after}' broke an invariant of the plan IR: {what}")

    if graph_before is not None:
        now = graph_fingerprint(ir)
        changed = [a[0].name for a, b in zip(graph_before, now) if a != b]
        if changed or len(now) != len(graph_before):
            added = [entry[0].name for entry in now[len(graph_before):]]
            broken(f"it changed the user's graph: {changed or ('added ' + ', '.join(added))}")
    order = {op: k for k, op in enumerate(ir.ops)}
    if len(order) != len(ir.ops):
        broken("an op is listed twice")
    fed = ir.fed
    for op, k in order.items():
        for x in op.inputs:
            if x not in fed and order.get(x.op, k) >= k:
                broken(f"'{op.name}' reads '{x.name}', which no earlier op computes")
        for c in op.control_inputs:
            if order.get(c, k) >= k:
                broken(f"'{op.name}' waits on '{c.name}', which does not run before it")
    if any(source in fed for source in ir.replaced):
        broken("a rewrite replaced a feed")
    if ir.placement and set(ir.placement) != set(order):
        broken("the placement does not place exactly the plan's ops")
    for f in ir.targets:
        if (f not in fed and f.op not in order) if isinstance(f, Output) else f not in order:
            broken(f"'{f.name}' is fetched but not computed")


def graph_fingerprint(ir: PlanIR) -> list:
    """What a pass must not change of the user's graph: each node's inputs, control
    inputs, attrs and output shapes."""
    graph = next((x.graph for x in (*ir.ops, *ir.feeds, *ir.fetches)), None)
    if graph is None:
        return []
    return [(op, op.inputs, op.control_inputs, tuple(op.attrs.items()),
             tuple(o.shape.as_list() if o.shape.rank is not None else None for o in op.outputs))
            for op in graph.operations()]


def describe(ir: PlanIR) -> str:
    """The IR as text, one op a line: name, type, outputs, inputs as the plan wires them
    (the plan's values), control inputs."""
    placed = bool(ir.placement)
    rows = [("NAME", "TYPE", *(("DEVICE",) if placed else ()), "OUTPUTS", "INPUTS")]
    for op in ir.ops:
        outs = ", ".join(f"{o.dtype.name} {o.shape}" for o in op.outputs) or "-"
        ins = [i.name for i in op.inputs] + [f"^{c.name}" for c in op.control_inputs]
        device = (ir.placement[op].name,) if placed else ()
        rows.append((op.name, op.type, *device, outs, ", ".join(ins) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1]
             for row in rows]
    fetched = ", ".join(f.name if isinstance(f, Output) else f"^{f.name}" for f in ir.fetches)
    lines.append(f"{len(ir.ops)} ops; fetches: {fetched or '-'}; {len(ir.replaced)} values replaced")
    return "\n".join(lines)
