"""A fuzzed graph as plain data (:class:`GraphSpec`), its reference evaluation, and
its construction as a graphflow graph.

The same spec drives both sides: :func:`evaluate` runs every node through
``reference.py``, :func:`build` creates the graphflow nodes with a Scope. A spec
prints as the list of its nodes, which is what hypothesis shows for a failure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import numpy as np

import graphflow as gf
from graphflow.errors import InvalidArgumentError

from . import reference


@dataclass(frozen=True)
class Ref:
    """Output ``index`` of node ``node``."""

    node: int
    index: int = 0

    def __repr__(self) -> str:
        return f"n{self.node}" + (f":{self.index}" if self.index else "")


@dataclass
class Node:
    """One node. Leaves (Const, Placeholder) hold their value: the constant, or what
    is fed. An input is a Ref, or a tuple of Refs for a list input (the stitches)."""

    op: str
    inputs: tuple = ()
    attrs: dict = field(default_factory=dict)
    value: np.ndarray | None = None
    static_shape: list | None = None   # Placeholder: its declared shape; None: unknown rank
    num_outputs: int = 1

    def __repr__(self) -> str:
        if self.op == "Const":
            return f"Const({_show(self.value)})"
        if self.op == "Placeholder":
            return f"Placeholder(shape={self.static_shape}, feed={_show(self.value)})"
        attrs = "".join(f", {k}={v!r}" for k, v in self.attrs.items())
        return f"{self.op}({', '.join(map(repr, self.inputs))}{attrs})"


def _show(value: np.ndarray) -> str:
    dtype = "object" if value.dtype == object else value.dtype.name
    return f"np.array({value.tolist()!r}, {dtype}).reshape({value.shape})"


@dataclass
class GraphSpec:
    """The nodes in creation (= topological) order, the outputs to fetch, ops' outputs
    that are fed too (a feed replaces any output), and a second feed for each
    placeholder (its first one shuffled) for a second run of each session."""

    nodes: list[Node]
    fetches: list[Ref]
    fed: dict[Ref, np.ndarray] = field(default_factory=dict)
    second_feeds: dict[int, np.ndarray] = field(default_factory=dict)

    def with_second_feeds(self) -> "GraphSpec":
        """This graph with the placeholders fed their second feeds."""
        nodes = [Node(n.op, n.inputs, n.attrs, self.second_feeds[k], n.static_shape,
                      n.num_outputs) if k in self.second_feeds else n
                 for k, n in enumerate(self.nodes)]
        return GraphSpec(nodes, self.fetches, self.fed)

    def refs(self) -> list[Ref]:
        return [Ref(k, i) for k, n in enumerate(self.nodes) for i in range(n.num_outputs)]

    def ancestors(self, refs: list[Ref]) -> set[int]:
        """The nodes that computing ``refs`` needs, theirs included (not behind a feed)."""
        seen: set[int] = set()
        stack = list(refs)
        while stack:
            ref = stack.pop()
            if ref not in self.fed and ref.node not in seen:
                seen.add(ref.node)
                stack.extend(_flat(self.nodes[ref.node].inputs))
        return seen

    def __repr__(self) -> str:
        lines = [f"  n{k} = {node!r}" for k, node in enumerate(self.nodes)]
        lines += [f"  fed {ref}: {_show(v)}" for ref, v in self.fed.items()]
        lines += [f"  second feed of n{k}: {_show(v)}" for k, v in self.second_feeds.items()]
        return "GraphSpec(\n" + "\n".join(lines) + f"\n  fetches={self.fetches})"

    def _repr_pretty_(self, printer, cycle) -> None:  # how hypothesis prints a failing case
        printer.text(repr(self))


def _flat(inputs: tuple) -> list[Ref]:
    return [r for i in inputs for r in (i if isinstance(i, tuple) else (i,))]


# -- reference evaluation -------------------------------------------------------------------
@dataclass(frozen=True)
class Failure:
    """The reference rejects node ``node``'s inputs (``own``), or an ancestor's;
    ``bad_index``: for an out-of-bound index tuple, ``reason`` being TensorFlow's message."""

    node: int
    own: bool
    reason: str
    bad_index: bool = False


Outcome = Union[np.ndarray, Failure]


def evaluate_node(nodes: list[Node], outcomes: dict[Ref, Outcome], k: int,
                  gpu: bool = False) -> None:
    """Add the reference outcomes of node ``k`` (its inputs' are in ``outcomes``);
    fed outputs are set afterwards by :func:`evaluate`. ``gpu``: the graph is built
    on "/gpu:0" (see ``reference.run_op``)."""
    node = nodes[k]
    if node.op in ("Const", "Placeholder"):
        outcomes[Ref(k)] = node.value
        return
    args, failed = [], None
    for i in node.inputs:
        group = [outcomes[r] for r in (i if isinstance(i, tuple) else (i,))]
        failed = failed or next((o for o in group if isinstance(o, Failure)), None)
        args.append(group if isinstance(i, tuple) else group[0])
    if failed is not None:
        result: list[Outcome] = [Failure(failed.node, False, failed.reason)] * node.num_outputs
    else:
        try:
            result = reference.run_op(node.op, args, node.attrs, gpu)
        except reference.RefError as e:
            result = [Failure(k, True, str(e), isinstance(e, reference.BadIndexError))] \
                * node.num_outputs
    assert len(result) == node.num_outputs
    for index, value in enumerate(result):
        outcomes[Ref(k, index)] = value


def evaluate(spec: GraphSpec, gpu: bool = False) -> dict[Ref, Outcome]:
    """The reference outcome of every output of the spec (on a GPU, with ``gpu``)."""
    outcomes: dict[Ref, Outcome] = {}
    for k in range(len(spec.nodes)):
        evaluate_node(spec.nodes, outcomes, k, gpu)
        outcomes.update((ref, v) for ref, v in spec.fed.items() if ref.node == k)
    return outcomes


# -- construction with graphflow ------------------------------------------------------------
def dtype_of(value: np.ndarray) -> gf.DType:
    return gf.string if value.dtype == object else gf.as_dtype(value.dtype)


@dataclass
class Built:
    """The graphflow side of a spec. A node whose construction raised is in
    ``build_errors``; the nodes that consume it are in ``skipped``."""

    outputs: dict[Ref, gf.Output]
    names: dict[int, str]
    placeholders: dict[int, gf.Output]
    consts: dict[int, gf.Output]
    build_errors: dict[int, InvalidArgumentError]
    skipped: set[int]


def build(spec: GraphSpec, scope: gf.Scope) -> Built:
    """Create the spec's nodes in ``scope``. Only InvalidArgumentError is expected from
    a builder; anything else propagates (and fails the test)."""
    built = Built({}, {}, {}, {}, {}, set())
    for k, node in enumerate(spec.nodes):
        if node.op == "Const":
            out = scope.constant(node.value, dtype=dtype_of(node.value))
            built.consts[k] = out
            outs = [out]
        elif node.op == "Placeholder":
            out = scope.placeholder(dtype_of(node.value), shape=node.static_shape)
            built.placeholders[k] = out
            outs = [out]
        elif any(r.node in built.build_errors or r.node in built.skipped
                 for r in _flat(node.inputs)):
            built.skipped.add(k)
            continue
        else:
            args = [[built.outputs[r] for r in i] if isinstance(i, tuple) else built.outputs[i]
                    for i in node.inputs]
            try:
                result = scope.create_op(node.op, *args, **node.attrs)
            except InvalidArgumentError as e:
                built.build_errors[k] = e
                continue
            outs = result if isinstance(result, list) else [result]
        built.names[k] = outs[0].op.name
        for index, out in enumerate(outs):
            built.outputs[Ref(k, index)] = out
    return built
