"""Pictures of graphs: Graphviz DOT text, and rendering it with the ``dot`` binary.

``to_dot`` needs nothing but the graph. Each op is a box labelled with its
name, type and each output's dtype and shape, filled by requested device (a
legend says which colour is which); constants are smaller and show small
values; name scopes (``scope.with_sub_scope``) are dashed clusters, or one box
each when collapsed (``collapse=``, ``depth=``). Data edges
are solid and carry the tensor shape, control edges are dashed. ``render`` runs Graphviz's ``dot`` if it is
installed (``apt-get install graphviz``, ``brew install graphviz``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import TYPE_CHECKING, Iterable

import numpy as np

from ..errors import InternalError, InvalidArgumentError, NotFoundError

if TYPE_CHECKING:  # pragma: no cover
    from ..graph import Graph, Operation

#: Fill colour per requested device type ("" = no device requested).
DEVICE_COLORS = {"cpu": "#dae8fc", "gpu": "#d5e8d4", "": "#ffffff"}
_LEGEND = (("cpu", "requested CPU"), ("gpu", "requested GPU"), ("", "no device requested"))
#: Fill colour of a fused element-wise region's cluster.
FUSED_COLOR = "#fff2cc"
#: Fill colour of a collapsed name scope's box.
BOX_COLOR = "#eeeeee"
#: Formats ``render`` asks ``dot`` for, by file extension.
RENDER_FORMATS = ("svg", "png", "pdf")
_MAX_SHOWN_VALUE = 4  # a Const with at most this many elements shows its value


def _quote(text: str) -> str:
    """A DOT double-quoted string; newlines become centred line breaks."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "\\n".join(text.split("\n")) + '"'


def device_type(op: "Operation") -> str:
    """``"cpu"``, ``"gpu"`` or ``""``: the device type the op asked for."""
    device = op.device.upper()
    if ":GPU:" in device:
        return "gpu"
    if ":CPU:" in device:
        return "cpu"
    return ""


def _scope_of(name: str, op_names: set[str]) -> str:
    """The name scope an op is drawn in: the longest ``/``-prefix of its name that
    is not itself an op (``layer/Add/y`` sits with ``layer/Add`` in ``layer``)."""
    parts = name.split("/")[:-1]
    while parts and "/".join(parts) in op_names:
        parts.pop()
    return "/".join(parts)


def _label(op: "Operation", scope: str = "") -> str:
    short = op.name[len(scope) + 1:] if scope else op.name
    lines = [short]
    if op.type != short:
        lines.append(f"({op.type})")
    many = len(op.outputs) > 1
    for out in op.outputs:
        lines.append(f"{f'{out.index}: ' if many else ''}{out.dtype.name} {out.shape}")
    if op.type == "Const":
        value = op.attrs["value"]
        if value.size <= _MAX_SHOWN_VALUE:
            lines.append("= " + np.array2string(value, separator=", ").replace("\n", ""))
    if op.device:
        lines.append(op.device)
    return "\n".join(lines)


def _node_line(op: "Operation", scope: str) -> str:
    color = DEVICE_COLORS[device_type(op)]
    extra = ", fontsize=8, color=gray50" if op.type == "Const" else ""
    return f"{_quote(op.name)} [label={_quote(_label(op, scope))}, fillcolor=\"{color}\"{extra}];"


def to_dot(graph: "Graph", *, legend: bool = True, rankdir: str = "TB",
           fused: bool = False, collapse: Iterable[str] = (), depth: int | None = None) -> str:
    """The DOT text of ``graph``: one box per op (constants smaller, in grey), name
    scopes as dashed clusters, solid data edges labelled with the shape (and the
    output index of a multi-output op) and dashed control edges. ``fused=True`` also
    draws each element-wise region that a plan fetching the graph's unread outputs
    fuses into one kernel (runtime/fusion.py) as a filled cluster of the ops it
    replaces, inside the innermost name scope that holds them all.

    ``collapse``: name scopes drawn as one box each (what they hold, sub-scopes
    included, inside it; edges to and from it merged), as TensorBoard draws a closed
    scope; ``depth=N`` closes every scope nested deeper than N levels (0: every
    top-level scope is a box). A scope the graph lacks is an InvalidArgumentError."""
    ops = graph.operations()
    boxes = _collapsed(ops, tuple(collapse), depth)
    regions = [r for r in (_fused_regions(graph) if fused else [])
               if not any(op.name in boxes for op in r.members)]
    lines = ["digraph graphflow {",
             f"  graph [rankdir={rankdir}, fontname=Helvetica, fontsize=10];",
             '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10];',
             "  edge [fontname=Helvetica, fontsize=9];"]
    shown = [op for op in ops if op.name not in boxes]
    _ScopeTree(shown, regions, _box_counts(boxes)).emit(lines, "", "  ")
    lines += _edge_lines(ops, boxes)
    if legend:
        lines += _legend()
    lines.append("}")
    return "\n".join(lines) + "\n"


def _collapsed(ops: list, collapse: tuple[str, ...], depth: int | None) -> dict[str, str]:
    """{op name: the closed scope it is drawn in} for the ops inside a closed scope (the
    outermost one, where scopes nest)."""
    names = {op.name for op in ops}
    scopes = {}
    for op in ops:
        parts = _scope_of(op.name, names).split("/")
        scopes[op.name] = ["/".join(parts[:k]) for k in range(1, len(parts) + 1) if parts[0]]
    known = {s for enclosing in scopes.values() for s in enclosing}
    unknown = [c.strip("/") for c in collapse if c.strip("/") not in known]
    if unknown:
        tops = sorted({s for s in known if "/" not in s})
        raise InvalidArgumentError(f"Cannot collapse name scope(s) {', '.join(unknown)}: the "
                                   f"graph has no such scope (its top-level scopes: "
                                   f"{', '.join(tops) or 'none'})")
    closed = {c.strip("/") for c in collapse}
    boxes = {}
    for name, enclosing in scopes.items():
        box = next((s for k, s in enumerate(enclosing)
                    if s in closed or (depth is not None and k >= depth)), None)
        if box is not None:
            boxes[name] = box + ":"  # the box's node id: no op name holds a colon
    return boxes


def _box_counts(boxes: dict[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for box in boxes.values():
        counts[box] = counts.get(box, 0) + 1
    return counts


class _ScopeTree:
    """The name scopes of a graph as nested clusters: per scope, its child scopes, the
    fused regions drawn in it and the ops drawn directly in it."""

    def __init__(self, ops: list, regions: list, boxes: dict[str, int] | None = None):
        names = {op.name for op in ops}
        in_region = {op for r in regions for op in r.members}
        self.boxes: dict[str, list[tuple[str, int]]] = {}
        for box, count in (boxes or {}).items():  # a closed scope sits in its parent
            self.boxes.setdefault(box[:-1].rpartition("/")[0], []).append((box, count))
        self.regions: dict[str, list] = {}
        for r in regions:
            scope = _common_scope([_scope_of(op.name, names) for op in r.members])
            self.regions.setdefault(scope, []).append(r)
        self.members: dict[str, list] = {scope: [] for scope in (*self.regions, *self.boxes)}
        for op in ops:
            if op not in in_region:
                self.members.setdefault(_scope_of(op.name, names), []).append(op)
        self.children: dict[str, list[str]] = {}
        for scope in sorted(self.members):
            parts = scope.split("/") if scope else []
            for depth in range(len(parts)):  # every enclosing scope, outermost first
                parent, child = "/".join(parts[:depth]), "/".join(parts[:depth + 1])
                if child not in self.children.setdefault(parent, []):
                    self.children[parent].append(child)
        self._cluster_ids = iter(range(len(ops) + len(regions) + 1))

    def emit(self, lines: list[str], scope: str, indent: str) -> None:
        """The lines of ``scope``'s clusters and ops, its child scopes first."""
        for child in self.children.get(scope, []):
            lines.append(f"{indent}subgraph cluster_{next(self._cluster_ids)} {{")
            lines.append(f"{indent}  label={_quote(child.rsplit('/', 1)[-1])}; "
                         "style=\"rounded,dashed\"; color=gray60; fontcolor=gray30;")
            self.emit(lines, child, indent + "  ")
            lines.append(f"{indent}}}")
        for r in self.regions.get(scope, []):
            lines.append(f"{indent}subgraph cluster_{next(self._cluster_ids)} {{")
            lines.append(f"{indent}  label={_quote('fused: ' + r.name)}; style=\"rounded,filled\"; "
                         f"fillcolor=\"{FUSED_COLOR}\"; color=gray50; fontcolor=gray30;")
            for op in r.members:
                lines.append(indent + "  " + _node_line(op, scope))
            lines.append(f"{indent}}}")
        for op in self.members.get(scope, []):
            lines.append(indent + _node_line(op, scope))
        for box, count in self.boxes.get(scope, []):
            short = box[len(scope) + 1:-1] if scope else box[:-1]
            label = f"{short}\n({count} op{'s' * (count > 1)})"
            lines.append(f"{indent}{_quote(box)} [label={_quote(label)}, shape=box3d, "
                         f"style=filled, fillcolor=\"{BOX_COLOR}\"];")


def _edge_lines(ops: list, boxes: dict[str, str]) -> list[str]:
    """Data edges labelled with the shape (and the output index of a multi-output
    producer), then dashed control edges, per consumer; an edge into, out of or between
    closed scopes is drawn once per pair of ends (labelled with its count when several
    tensors travel it), an edge inside one not at all."""
    data: dict[tuple, list[str]] = {}
    control: dict[tuple, None] = {}
    for op in ops:
        dst = boxes.get(op.name, op.name)
        for j, src in enumerate(op.inputs):
            end = (boxes.get(src.op.name, src.op.name), dst)
            if end[0] != end[1]:  # between two ops: one edge per input
                key = end if src.op.name in boxes or op.name in boxes else (*end, j)
                port = f":{src.index} " if len(src.op.outputs) > 1 else ""
                data.setdefault(key, []).append(port + str(src.shape))
        for ctrl in op.control_inputs:
            end = (boxes.get(ctrl.name, ctrl.name), dst)
            if end[0] != end[1]:
                control[end] = None
    lines = []
    for (src, dst, *_), labels in data.items():
        label = labels[0] if len(labels) == 1 else f"{len(labels)} tensors"
        lines.append(f"  {_quote(src)} -> {_quote(dst)} [label={_quote(label)}];")
    for src, dst in control:  # one per pair, as before: an op lists a control input once
        lines.append(f"  {_quote(src)} -> {_quote(dst)} "
                     f"[style=dashed, color=gray40, arrowhead=odot];")
    return lines


def install_to_dot(graph_class: type) -> None:
    """Give ``graph_class`` (graphflow's Graph) ``to_dot(**options)``: :func:`to_dot` of
    the graph. Installed from here, a tool, so that the data model needs no runtime."""
    def graph_to_dot(self, **options) -> str:
        """Graphviz DOT text of the graph (see graphflow.tools.visualize.to_dot)."""
        return to_dot(self, **options)
    graph_to_dot.__name__, graph_to_dot.__qualname__ = "to_dot", f"{graph_class.__name__}.to_dot"
    graph_class.to_dot = graph_to_dot


def _fused_regions(graph: "Graph") -> list:
    from graphflow.runtime.fusion import plan_regions
    return plan_regions(graph)


def _common_scope(scopes: list[str]) -> str:
    """The innermost name scope enclosing every one of ``scopes``."""
    common = scopes[0].split("/") if scopes[0] else []
    for scope in scopes[1:]:
        parts = scope.split("/") if scope else []
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    return "/".join(common)


def _legend() -> list[str]:
    # Names starting with "_" cannot clash with op names (those start with [A-Za-z0-9.]).
    # Invisible edges stack the entries in one column.
    lines = ["  subgraph cluster_legend {",
             '    label="legend"; fontsize=9; style=dashed; color=gray60;',
             '    node [fontsize=9, width=0, height=0];']
    keys = []
    for key, text in _LEGEND:
        keys.append(f'"_legend_{key or "none"}"')
        lines.append(f'    {keys[-1]} [label="{text}", fillcolor="{DEVICE_COLORS[key]}"];')
    lines += ['    "_legend_a" [label="producer", fillcolor="#ffffff"];',
              '    "_legend_b" [label="consumer", fillcolor="#ffffff"];',
              '    "_legend_c" [label="runs after", fillcolor="#ffffff"];',
              f'    {" -> ".join(keys)} -> "_legend_a" [style=invis];',
              '    "_legend_a" -> "_legend_b" [label="data [shape]"];',
              '    "_legend_b" -> "_legend_c" [label="control", style=dashed, color=gray40, '
              'arrowhead=odot];',
              "  }"]
    return lines


def dot_binary() -> str | None:
    """The path of Graphviz's ``dot``, or None if it is not installed."""
    return shutil.which("dot")


def render(dot_text: str, path: str | os.PathLike, fmt: str | None = None) -> None:
    """Write ``dot_text`` drawn as ``fmt`` (default: the extension of ``path``)."""
    fmt = (fmt or os.path.splitext(os.fspath(path))[1].lstrip(".")).lower()
    if fmt not in RENDER_FORMATS:
        raise InvalidArgumentError(f"Cannot render to '{fmt}': use one of "
                                 f"{', '.join(RENDER_FORMATS)} (or .dot for the text)")
    binary = dot_binary()
    if binary is None:
        raise NotFoundError("Rendering needs Graphviz's `dot` binary, which is not on PATH: "
                            "install Graphviz (apt-get install graphviz, brew install "
                            "graphviz), or write .dot text instead")
    done = subprocess.run([binary, f"-T{fmt}", "-o", os.fspath(path)], input=dot_text.encode(),
                          capture_output=True, check=False)
    if done.returncode != 0:
        raise InternalError(f"dot failed (exit {done.returncode}): "
                                 f"{done.stderr.decode(errors='replace').strip()}")


__all__ = ["to_dot", "install_to_dot", "render", "dot_binary", "device_type", "DEVICE_COLORS", "RENDER_FORMATS"]
