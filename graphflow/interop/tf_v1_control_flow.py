"""TF 1.x control flow as TF 2's functional form, for ``gf.import_tf_graph``.

Graphs built with ``tf.compat.v1.disable_control_flow_v2()`` (and every TF 1.x graph)
express control flow with dataflow primitives: a cond is Switch nodes (one per
tensor the branches use, ``:1`` feeding the true branch, ``:0`` the false one) and a
Merge per result; a while loop is a *frame*: Enter (one per loop variable, and one
``is_constant`` Enter per loop-invariant tensor), Merge (initial value or
NextIteration), the cond computing a LoopCond, Switch (``:1`` into the body, ``:0`` to
Exit), the body, NextIteration. graphflow runs control flow as If/While over graph
functions, so the plan nodes of each construct are cut out into functions
(``FunctionBody``, built by ``tf_functions``) and replaced by one StatelessIf/If or
StatelessWhile/While node; the Merges (conds) and Exits (loops) become Identities of
its outputs, so their names still fetch the results. Innermost constructs first: a
cond or loop inside another is one node when the outer one is cut out.

What does not have that shape (a Merge's value_index used, a tensor of a branch or
loop body used outside it, a Switch whose outputs reach both sides...) is an
UnimplementedError naming the node.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from ..errors import UnimplementedError
from . import tf_proto as tp
from .tf_import_plan import V1_CONTROL_FLOW, FunctionBody, Node, Planner

_Ref = tuple[str, Any]  # (node, output index); index None for a control edge


class _NotInnermost(Exception):
    """The construct encloses another one not converted yet."""


class _Graph:
    """The plan nodes being rewritten: by name, and each node's consumers."""

    def __init__(self, nodes: list[Node], planner: Planner):
        self.nodes = nodes
        self.planner = planner
        self.by_name = {n.name: n for n in nodes}
        self.consumers: dict[str, list[tuple[Node, Any]]] = defaultdict(list)
        for n in nodes:
            for src, ref in n.inputs:
                self.consumers[src].append((n, ref))
            for c in n.controls:
                self.consumers[c].append((n, None))

    def op(self, name: str) -> str:
        return self.by_name[name].op

    def fresh(self, base: str) -> str:
        """A node name not taken (``base``, ``base_1``...)."""
        name, k = base, 0
        while name in self.by_name:
            k += 1
            name = f"{base}_{k}"
        return name

    def fresh_function(self, base: str) -> str:
        taken = set(self.planner.bodies) | set(self.planner.functions)
        name, k = base.replace("/", "_"), 0
        while name in taken:
            k += 1
            name = f"{base.replace('/', '_')}_{k}"
        return name

    def forward(self, starts: Iterable[str], stop: frozenset) -> set[str]:
        """The nodes downstream of ``starts`` (data and control edges), not past nodes
        of the op types ``stop`` (which are included)."""
        seen, stack = set(), list(starts)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if self.op(name) not in stop or name in starts:
                stack += [c.name for c, _ in self.consumers[name]]
        return seen

    def stateful(self, nodes: Iterable[Node]) -> bool:
        ops = self.planner.ops
        return any(n.op in ops and ops[n.op].stateful for n in nodes)


def _unimplemented(message: str, n: Node) -> UnimplementedError:
    return UnimplementedError(f"TF 1.x control flow: {message}; graphflow converts conds "
                              f"(Switch/Merge) and while loops (Enter...Exit) of the shapes "
                              f"tf.compat.v1.cond and tf.compat.v1.while_loop build", n.name,
                              n.op)


def _resolve(g: _Graph, ref: _Ref) -> _Ref:
    """``ref`` through Identity nodes: the tensor it copies."""
    while g.op(ref[0]) == "Identity" and len(g.by_name[ref[0]].inputs) == 1:
        ref = g.by_name[ref[0]].inputs[0]
    return ref


def _walk(g: _Graph, starts: Iterable[_Ref], is_boundary, inside: set[str]) -> dict[str, Node]:
    """The nodes reached backward (data and control edges) from ``starts``, not past
    boundary refs (``is_boundary(src, index)``) nor nodes outside ``inside``; a TF 1.x
    control-flow node reached means an enclosed construct not converted yet."""
    reached: dict[str, Node] = {}
    stack = list(starts)
    while stack:
        src, ref = stack.pop()
        if is_boundary(src, ref) or src in reached or src not in inside:
            continue
        n = g.by_name[src]
        if n.op in V1_CONTROL_FLOW:
            raise _NotInnermost(src)
        reached[src] = n
        stack += list(n.inputs) + [(c, None) for c in n.controls]
    return reached


class _Args:
    """The arguments of the functions cut out of one construct, and the outer tensor
    (or loop variable) each stands for."""

    def __init__(self, taken: set[str]):
        self.taken = set(taken)
        self.names: list[str] = []
        self.outer: list[_Ref] = []
        self._by_outer: dict[Any, str] = {}

    def of(self, outer: Any, ref: _Ref | None = None) -> tuple[str, int]:
        """The argument standing for ``outer`` (a key; ``ref`` the tensor fed to it)."""
        name = self._by_outer.get(outer)
        if name is None:
            name, k = f"arg{len(self.names)}", len(self.names)
            while name in self.taken:
                k += 1
                name = f"arg{k}"
            self.taken.add(name)
            self._by_outer[outer] = name
            self.names.append(name)
            self.outer.append(outer if ref is None else ref)
        return name, 0


def _cut(nodes: dict[str, Node], mapped, controls_out: list[str]) -> list[Node]:
    """Copies of ``nodes`` for a function: inputs from outside them as ``mapped(src,
    index)`` (an argument); control inputs from outside dropped (``mapped`` returns
    None: the construct's own nodes) or waited on by the new node (``controls_out``)."""
    out = []
    for n in nodes.values():
        inputs = [(s, r) if s in nodes else mapped(s, r) for s, r in n.inputs]
        controls = []
        for c in n.controls:
            if c in nodes:
                controls.append(c)
            elif mapped(c, None) is not None and c not in controls_out:
                controls_out.append(c)
        out.append(Node(n.name, n.op, inputs, controls, n.device, dict(n.attrs)))
    return out


def _check_unused_outside(g: _Graph, removed: set[str], kept: set[str], what: str) -> None:
    for name in removed - kept:
        for consumer, _ in g.consumers[name]:
            if consumer.name not in removed:
                raise _unimplemented(f"'{consumer.name}' uses '{name}' from inside {what}",
                                     consumer)


def _replace(g: _Graph, removed: set[str], new: list[Node], replaced: dict[str, Node]
             ) -> list[Node]:
    """The node list with ``removed`` out, ``replaced`` (same names) swapped in, and
    ``new`` added before the first replacement."""
    out: list[Node] = []
    for n in g.nodes:
        if n.name in replaced:
            if new:
                out += new
                new = []
            out.append(replaced[n.name])
        elif n.name not in removed:
            out.append(n)
    return out + new


def _dead_code(g: _Graph, removed: set[str], kept: set[str], inside: set[str]) -> set[str]:
    """``removed`` and the stateless nodes of the construct (``inside``) left with no
    use once it is gone (a loop variable's Identity the body never reads, a branch's
    unused constant); ``kept``: removed nodes replaced under their names."""
    removed = set(removed)
    changed = True
    while changed:
        changed = False
        for name in list(removed - kept):
            for consumer, _ in g.consumers[name]:
                c = consumer.name
                if c in removed or c not in inside or g.stateful([consumer]):
                    continue
                if all(u.name in removed for u, _ in g.consumers[c]):
                    removed.add(c)
                    changed = True
    return removed


def _scope(n: Node) -> str:
    return n.name.rsplit("/", 1)[0] if "/" in n.name else n.name


def _function_body(name: str, args: _Args, nodes: list[Node], results: list) -> FunctionBody:
    return FunctionBody(name, [(a, None, None) for a in args.names], nodes, results)


# -- conds -------------------------------------------------------------------------------
def _cond_merges(g: _Graph) -> list[Node]:
    """The Merges of conds (a loop's Merge takes an Enter and a NextIteration)."""
    return [n for n in g.nodes if n.op == "Merge" and not any(
        g.op(s) in ("Enter", "NextIteration") for s, _ in n.inputs)]


def _branch(g: _Graph, start: _Ref, tainted: set[str]) -> tuple:
    """(the nodes of the branch computing ``start``, the Switch outputs it reads, the
    sides (1: true, 0: false) those are, the predicates they switch on)."""
    switches: list[_Ref] = []

    def boundary(src: str, ref: Any) -> bool:
        if g.op(src) == "Switch":
            switches.append((src, ref))
            return True
        return False

    nodes = _walk(g, [start], boundary, tainted)
    sides = {ref for _, ref in switches if ref is not None}
    preds = {_resolve(g, g.by_name[s].inputs[1]) for s, _ in switches}
    return nodes, switches, sides, preds


def _analyse_merge(g: _Graph, m: Node, tainted: set[str]) -> tuple:
    """(predicate, (true branch nodes, switches), (false ...), index of the true input)."""
    if len(m.inputs) != 2:
        raise _unimplemented(f"a Merge of {len(m.inputs)} inputs is not a cond's", m)
    a, b = (_branch(g, ref, tainted) for ref in m.inputs)
    preds = a[3] | b[3]
    if len(preds) != 1 or a[2] | b[2] != {0, 1} or len(a[2]) != 1 or len(b[2]) != 1:
        raise _unimplemented("the Merge's inputs are not the two sides (Switch outputs :1 "
                             "and :0) of one predicate", m)
    true = 0 if a[2] == {1} else 1
    branches = (a, b) if true == 0 else (b, a)
    return next(iter(preds)), branches[0], branches[1], true


def _cond_group(g: _Graph, first: Node) -> tuple:
    """The Merges of the cond ``first`` belongs to (same name scope and predicate)."""
    tainted = g.forward({n.name for n in g.nodes if n.op == "Switch"},
                        frozenset({"Merge", "Exit"}))
    pred, t, f, true = _analyse_merge(g, first, tainted)
    group = [(first, t, f, true)]
    for m in _cond_merges(g):
        if m is first or _scope(m) != _scope(first):
            continue
        try:
            p2, t2, f2, true2 = _analyse_merge(g, m, tainted)
        except (_NotInnermost, UnimplementedError):
            continue
        if p2 == pred:
            group.append((m, t2, f2, true2))
    return pred, group


def _convert_cond(g: _Graph, first: Node) -> list[Node]:
    """The cond of Merge ``first`` as one If node."""
    pred, group = _cond_group(g, first)
    sides = [{}, {}]  # true, false branch nodes
    for _, t, f, _ in group:
        sides[0].update(t[0])
        sides[1].update(f[0])
    shared = set(sides[0]) & set(sides[1])
    if shared:
        raise _unimplemented(f"node '{min(shared)}' is in both branches", first)
    args = _Args(set(sides[0]) | set(sides[1]))
    controls: list[str] = []

    def mapped(src: str, ref: Any):
        if g.op(src) == "Switch":
            return None if ref is None else args.of(g.by_name[src].inputs[0])
        return True if ref is None else args.of((src, ref))

    cut = [_cut(side, mapped, controls) for side in sides]
    results: list[list] = [[], []]
    for m, _, _, true in group:
        for k, ref in ((0, m.inputs[true]), (1, m.inputs[1 - true])):
            results[k].append(ref if ref[0] in sides[k] else mapped(*ref))
        if any(ref == 1 for _, ref in g.consumers[m.name]):
            raise _unimplemented("the Merge's value_index (output 1) is used", m)
    scope = _scope(first)
    names = []
    for label, nodes, res in (("true", cut[0], results[0]), ("false", cut[1], results[1])):
        name = g.fresh_function(f"{scope}_{label}")
        g.planner.bodies[name] = _function_body(name, args, nodes, res)
        names.append(name)
    op = "If" if g.stateful(list(sides[0].values()) + list(sides[1].values())) else "StatelessIf"
    node = Node(g.fresh(scope), op, [pred] + args.outer, controls, first.device,
                {"then_branch": ("func", tp.Func(names[0], {})),
                 "else_branch": ("func", tp.Func(names[1], {}))})
    replaced = {m.name: Node(m.name, "Identity", [(node.name, k)], [], m.device)
                for k, (m, *_) in enumerate(group)}
    switches = {s for _, t, f, _ in group for s, _ in t[1] + f[1]}
    removed = _dead_code(g, set(sides[0]) | set(sides[1]) | set(replaced) | switches,
                         set(replaced), g.forward(switches, frozenset({"Merge"})))
    _check_unused_outside(g, removed, set(replaced), f"the cond '{scope}'")
    return _replace(g, removed, [node], replaced)


# -- while loops -------------------------------------------------------------------------
def _frames(g: _Graph) -> dict[str, list[Node]]:
    frames: dict[str, list[Node]] = defaultdict(list)
    for n in g.nodes:
        if n.op == "Enter":
            name = n.attrs.get("frame_name", ("string", ""))[1]
            frames[name.decode() if isinstance(name, bytes) else name].append(n)
    return frames


def _is_constant(n: Node) -> bool:
    return bool(n.attrs.get("is_constant", ("bool", False))[1])


def _loop_var(g: _Graph, e: Node) -> tuple[Node, Node, Node, Node | None]:
    """(Merge, NextIteration, Switch, Exit or None) of the loop variable entering at
    ``e``."""
    uses = g.consumers[e.name]
    if len(uses) != 1 or uses[0][0].op != "Merge" or len(uses[0][0].inputs) != 2:
        raise _unimplemented("a loop variable's Enter must feed one Merge (with its "
                             "NextIteration) and nothing else", e)
    m = uses[0][0]
    nexts = [s for s, _ in m.inputs if s != e.name and g.op(s) == "NextIteration"]
    switches = [c for c, ref in g.consumers[m.name] if c.op == "Switch" and
                c.inputs[0] == (m.name, 0)]
    if len(nexts) != 1 or len(switches) != 1:
        raise _unimplemented("a loop variable's Merge must take its Enter and a "
                             "NextIteration, and feed one Switch", m)
    s = switches[0]
    if g.op(s.inputs[1][0]) != "LoopCond":
        raise _unimplemented("a loop variable's Switch must switch on the LoopCond", s)
    exits = [c for c, ref in g.consumers[s.name] if c.op == "Exit" and ref == 0]
    return m, g.by_name[nexts[0]], s, exits[0] if exits else None


def _convert_loop(g: _Graph, enters: list[Node]) -> list[Node]:
    """The while frame entered at ``enters`` as one While node."""
    loop = [e for e in enters if not _is_constant(e)]
    if not loop:
        raise _unimplemented("a while frame without loop variables", enters[0])
    parts = [_loop_var(g, e) for e in loop]
    loop_cond = g.by_name[parts[0][2].inputs[1][0]]
    if any(s.inputs[1][0] != loop_cond.name for _, _, s, _ in parts):
        raise _unimplemented("the loop variables' Switches switch on different LoopConds",
                             parts[0][2])
    merges = {m.name: k for k, (m, _, _, _) in enumerate(parts)}
    switches = {s.name: k for k, (_, _, s, _) in enumerate(parts)}
    constants = {e.name for e in enters if _is_constant(e)}
    inside = g.forward({e.name for e in enters}, frozenset({"Exit"}))
    cond_nodes = _walk(g, [loop_cond.inputs[0]], lambda s, r: s in merges or s in constants,
                       inside)
    body_nodes = _walk(g, [n.inputs[0] for _, n, _, _ in parts],
                       lambda s, r: s in switches or s in constants, inside)
    args = _Args(set(cond_nodes) | set(body_nodes))
    for k, e in enumerate(loop):
        args.of(("loop variable", k), e.inputs[0])
    controls = [c for e in enters for c in e.controls]

    def mapped(src: str, ref: Any):
        if src in merges or src in switches:
            if ref is None:
                return None
            if src in switches and ref != 1:
                raise _unimplemented("the loop body reads a Switch's exit side (:0)",
                                     g.by_name[src])
            return args.of(("loop variable", merges.get(src, switches.get(src))))
        if src in constants:
            return None if ref is None else args.of(g.by_name[src].inputs[0])
        return True if ref is None else args.of((src, ref))

    cond_cut = _cut(cond_nodes, mapped, controls)
    body_cut = _cut(body_nodes, mapped, controls)
    cond_result = [_inner(loop_cond.inputs[0], cond_nodes, mapped)]
    body_results = [_inner(n.inputs[0], body_nodes, mapped) for _, n, _, _ in parts]
    body_results += [(name, 0) for name in args.names[len(loop):]]  # invariants pass through
    return _loop_node(g, enters, parts, args, controls, (cond_cut, cond_result),
                      (body_cut, body_results), inside, loop_cond)


def _inner(ref: _Ref, nodes: dict, mapped) -> tuple:
    return ref if ref[0] in nodes else mapped(*ref)


def _loop_node(g: _Graph, enters: list[Node], parts: list, args: _Args, controls: list[str],
               cond: tuple, body: tuple, inside: set[str], loop_cond: Node) -> list[Node]:
    """The While node of a converted frame, its Exits as Identities of its outputs."""
    scope = _scope(enters[0])
    names = []
    for label, (nodes, results) in (("cond", cond), ("body", body)):
        name = g.fresh_function(f"{scope}_{label}")
        g.planner.bodies[name] = _function_body(name, args, nodes, results)
        names.append(name)
    op = "While" if g.stateful(cond[0] + body[0]) else "StatelessWhile"
    attrs = {"cond": ("func", tp.Func(names[0], {})), "body": ("func", tp.Func(names[1], {}))}
    if "parallel_iterations" in enters[0].attrs:
        attrs["parallel_iterations"] = enters[0].attrs["parallel_iterations"]
    node = Node(g.fresh(scope), op, list(args.outer), controls, enters[0].device, attrs)
    replaced = {x.name: Node(x.name, "Identity", [(node.name, k)], [], x.device)
                for k, (_, _, _, x) in enumerate(parts) if x is not None}
    frame = {n.name for n in enters} | {loop_cond.name} | set(replaced)
    for m, n, s, _ in parts:
        frame |= {m.name, n.name, s.name}
    removed = _dead_code(g, frame | {n.name for n in cond[0] + body[0]}, set(replaced), inside)
    _check_unused_outside(g, removed, set(replaced), f"the while loop '{scope}'")
    return _replace(g, removed, [node], replaced)


# -- entry point -------------------------------------------------------------------------
def convert_v1_control_flow(nodes: list[Node], planner: Planner) -> list[Node]:
    """``nodes`` with every TF 1.x cond and while frame as an If/While node over
    functions registered in ``planner.bodies``, innermost first."""
    while True:
        g = _Graph(nodes, planner)
        converted = _convert_one(g)
        if converted is None:
            break
        nodes = converted
    left = next((n for n in nodes if n.op in V1_CONTROL_FLOW), None)
    if left is not None:
        raise _unimplemented("this node is not part of a cond or while loop that could be "
                             "converted to If/While", left)
    return nodes


def _convert_one(g: _Graph) -> list[Node] | None:
    """The nodes with one innermost construct converted, or None if none can be."""
    for m in _cond_merges(g):
        try:
            return _convert_cond(g, m)
        except _NotInnermost:
            continue
    for enters in _frames(g).values():
        try:
            return _convert_loop(g, enters)
        except _NotInnermost:
            continue
    return None


__all__ = ["convert_v1_control_flow"]
