"""The plan's intermediate representation: a value, and the one way rewrites change it.

A ``PlanIR`` is what a (fetches, feeds) signature needs before anything is placed:
the ops to run, in creation (= topological) order, and the substitutes that
rewrites made (graph Output -> Output of a new, plan-only node). It is never changed:
a pass (runtime/pipeline.py) returns a new one, and the nodes in it are values too.

Every pass applies its substitutes through :func:`substitute`, the one place that
keeps the rule "a rewrite keeps every control dependency of what it replaces":
the control inputs of every op a substitution makes unnecessary move onto (a copy of)
the substitute that replaced it, so what they wait on still runs, before the
substitute's readers. :func:`check_ir` holds the invariants every pass keeps;
:func:`describe` prints an IR (``graphflow inspect --after PASS``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from graphflow.errors import InternalError
from graphflow.graph import Operation, Output

from .passes import control_targets, prune


@dataclass(frozen=True)
class PlanIR:
    """The ops a signature runs, and the substitutes wired in instead of graph values."""

    fetches: tuple                  # Outputs (substituted) and Operations, as fetched
    feeds: tuple[Output, ...]       # fed Outputs (a shape-specialized plan's carry its shapes)
    ops: tuple[Operation, ...]      # the ops needed, in creation order, substitutes included
    subst: Mapping[Output, Output] = field(default_factory=dict)
    #: values that must still be computed though nothing reads them: the inputs of a
    #: folded Shape/Size/OnesLike, whose errors and effects the plan keeps
    roots: tuple[Output, ...] = ()

    @property
    def fed(self) -> frozenset[Output]:
        return frozenset(self.feeds)

    def resolve(self, output: Output) -> Output:
        return self.subst.get(output, output)

    @property
    def targets(self) -> tuple:
        """What the plan must compute: the fetches, then the roots."""
        return self.fetches + tuple(self.subst.get(r, r) for r in self.roots)


Pass = Callable[[PlanIR], PlanIR]


def initial_ir(fetches: Sequence, feeds: Sequence[Output]) -> PlanIR:
    """The IR of a signature as written: every op the fetches need, nothing replaced."""
    feeds = tuple(feeds)
    return PlanIR(tuple(fetches), feeds, tuple(prune(fetches, set(feeds))), {})


def substitute(ir: PlanIR, new: Mapping[Output, Output], roots: Sequence[Output] = ()) -> PlanIR:
    """``ir`` with the substitutes ``new`` wired in (chains collapsed, ops re-pruned).

    The ops that the substitution makes unnecessary are replaced: their control
    inputs move onto the new node that stands for them, so a folded constant that
    waited on ``inc`` still makes ``inc`` run, before the constant's readers. A
    substitute that is an existing graph value (``x * 1 -> x``) cannot take control
    inputs: such a substitution is not made when what it replaces waited on
    something. ``roots`` are values to keep computing though nothing reads them."""
    new = dict(new)
    roots = tuple(dict.fromkeys((*ir.roots, *roots)))
    if not new and roots == ir.roots:
        return ir
    while True:
        subst = _chained({**ir.subst, **new})
        fetches = tuple(subst.get(f, f) if isinstance(f, Output) else f for f in ir.fetches)
        targets = fetches + tuple(subst.get(r, r) for r in roots)
        ops = prune(targets, ir.fed, subst)
        kept = set(ops)
        removed = {op for op in ir.ops if op not in kept}
        if not any(op.control_inputs for op in removed):
            return PlanIR(fetches, ir.feeds, tuple(ops), subst, roots)
        refused = False
        waiting: dict[Operation, list[Operation]] = {}  # plan node -> what it must wait on
        for source, target in list(new.items()):
            waits = _waits(ir, source.op, removed)
            if not waits:
                continue
            node = subst.get(target, target).op
            if in_graph(node):
                del new[source]
                refused = True
            else:
                waiting.setdefault(node, []).extend(waits)
        if not refused:
            for node, waits in waiting.items():  # nodes are values: a copy waits too
                new.update(zip(node.outputs, with_controls(node, waits).outputs))
            subst = _chained({**ir.subst, **new})
            fetches = tuple(subst.get(f, f) if isinstance(f, Output) else f for f in ir.fetches)
            targets = fetches + tuple(subst.get(r, r) for r in roots)
            return PlanIR(fetches, ir.feeds, tuple(prune(targets, ir.fed, subst)), subst, roots)


def with_controls(node: Operation, waits: Sequence[Operation]) -> Operation:
    """A copy of plan node ``node`` that also waits on ``waits`` (a plan never changes a
    node, its own or the user's: a rewrite makes a new one)."""
    controls = tuple(dict.fromkeys((*node.control_inputs, *waits)))
    return Operation.stand_in(node, node.op_def, node.inputs, node.arg_lengths, node.attrs,
                              [(o.dtype, o.shape) for o in node.outputs], name=node.name,
                              control_inputs=controls)


def in_graph(op: Operation) -> bool:
    """Whether ``op`` is a node of its graph (not one a pass made for a plan)."""
    return op.graph._by_name.get(op.name) is op


def _waits(ir: PlanIR, root: Operation, removed: set) -> list[Operation]:
    """The control inputs of the removed ops that ``root``'s value was computed from."""
    cone: set[Operation] = set()
    stack = [root]
    while stack:
        op = stack.pop()
        if op in cone or op not in removed:
            continue
        cone.add(op)
        for i in op.inputs:
            stack += [i.op, ir.resolve(i).op]
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
    each op once, after the ops its inputs and control inputs need (the order a serial
    plan runs), substitutes collapsed and never of a feed, every fetch computed or fed,
    and the user's graph as it was (``graph_before``: :func:`graph_fingerprint`)."""
    def broken(what: str):
        raise InternalError(f"the plan pass '{after}' broke an invariant of the plan IR: {what}")

    order = {op: k for k, op in enumerate(ir.ops)}
    if len(order) != len(ir.ops):
        broken("an op is listed twice")
    fed = ir.fed
    for op, k in order.items():
        for x in op.inputs:
            x = ir.resolve(x)
            if x not in fed and order.get(x.op, k) >= k:
                broken(f"'{op.name}' reads '{x.name}', which no earlier op computes")
        for c in op.control_inputs:
            if any(order.get(t, k) >= k for t in control_targets(c, dict(ir.subst), fed)):
                broken(f"'{op.name}' waits on '{c.name}', which does not run before it")
    for source, target in ir.subst.items():
        if target in ir.subst or source in fed:
            broken(f"the substitute of '{source.name}' is not final, or replaces a feed")
    for f in ir.targets:
        if isinstance(f, Output) and f not in fed and (f in ir.subst or f.op not in order):
            broken(f"'{f.name}' is fetched but not computed")
    if graph_before is not None:
        now = graph_fingerprint(ir)
        changed = [a[0].name for a, b in zip(graph_before, now) if a != b]
        if changed or len(now) != len(graph_before):
            added = [entry[0].name for entry in now[len(graph_before):]]
            broken(f"it changed the user's graph: {changed or ('added ' + ', '.join(added))}")


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
    (a substitute's name where a rewrite replaced a value), control inputs."""
    rows = [("NAME", "TYPE", "OUTPUTS", "INPUTS")]
    for op in ir.ops:
        outs = ", ".join(f"{o.dtype.name} {o.shape}" for o in op.outputs) or "-"
        ins = [ir.resolve(i).name for i in op.inputs] + [f"^{c.name}" for c in op.control_inputs]
        rows.append((op.name, op.type, outs, ", ".join(ins) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1]
             for row in rows]
    fetched = ", ".join(f.name if isinstance(f, Output) else f"^{f.name}" for f in ir.fetches)
    lines.append(f"{len(ir.ops)} ops; fetches: {fetched or '-'}; {len(ir.subst)} substitutes")
    return "\n".join(lines)
