"""How each graphflow op is written as TensorFlow nodes (used by tf_export).

What is written comes from each op's OpDef: an op whose ``op_def.tf`` is a
``registry.TFForm`` (declared with ``same_as_tf`` where the op is declared, ops/*.py)
is written as TF's op of that name with its inputs, its attrs renamed (ResourceScatterNd*:
graphflow's ``dtype`` is TF's ``T``), completed with TF's values for the attrs graphflow's
op leaves out and less those TF's lacks: ``tf_form`` gives that node. What TF's ops do
not do as graphflow's do is lowered to ops TF has by the op's TF exporter,
``op_def.exporters["tf"]`` (filed here with ``@exports(op_type)``: a function writing
the nodes through the exporter's writer, whose last node keeps the op's name; returning
None writes the op as its TFForm):

- GatherNd with batch_dims > 0 (TF's op has none; tf.gather_nd lowers it in Python);
- ResourceSparseApplyAdagrad (graphflow sums duplicate rows first, TF's kernel not);
- _ResourceSparseApplyAdam (TF 1.x's AdamOptimizer builds its sparse update from ops);
- the internal ops of gradient graphs: _BatchIndexTuples, _StitchWinners,
  _ScatterWinners, _ScatterMinMaxShares, _AssertEqual;
- If/StatelessIf/While/StatelessWhile: written as themselves, their gf.Functions as
  FunctionDefs of the GraphDef's library (``tf_export_functions``).

``SAME_AS_TF``, ``RESOURCE_OPS``, ``TF_DEFAULTS``, ``DROPPED`` and ``LOWERINGS`` are
views of the registry kept for readers of the former tables (each access reads the
OpDefs again).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from ..dtypes import DType, bool_, int32, int64, string
from ..errors import NotFoundError, UnimplementedError
from ..graph import Operation, Output
from ..registry import OpDef, exporters_of, op_def, registered_ops
from ..shapes import TensorShape

if TYPE_CHECKING:  # pragma: no cover
    from .tf_export import _Writer


def exports(*op_types: str) -> Callable:
    """File the decorated function as the TF exporter of ``op_types``
    (``op_def(t).exporters["tf"]``)."""
    def register(fn: Callable) -> Callable:
        for op_type in op_types:
            op_def(op_type).export("tf")(fn)
        return fn
    return register


def kinded_attrs(op: Operation) -> dict[str, tuple[str, Any]]:
    """``op``'s attrs as {name: (kind, value)}."""
    return {k: (op.op_def.attrs[k].kind if k in op.op_def.attrs else "string", v)
            for k, v in op.attrs.items()}


def tf_form(op: Operation) -> tuple[str, dict]:
    """The TF op type and attrs ({name: (kind, value)}) of ``op`` written as one node:
    TF's names, TF's values for the attrs graphflow lacks (``op.op_def.tf``; an op with
    none is written under its own type and attrs)."""
    attrs = kinded_attrs(op)
    form = op.op_def.tf
    if form is not None:
        for ours, theirs in form.renamed.items():
            attrs[theirs] = attrs.pop(ours)
    if op.type == "VarHandleOp":  # TF 1.x names a graph's variable after its handle node
        attrs["shared_name"] = ("string", op.attrs["shared_name"] or op.name)
    if form is None:
        return op.type, attrs
    for key in form.dropped:
        attrs.pop(key, None)
    for key, value in form.defaults.items():
        attrs.setdefault(key, value)
    return form.op, attrs


def _registered(op_type: str) -> OpDef | None:
    """The OpDef registered under exactly ``op_type`` (internal ones too), or None."""
    try:
        d = op_def(op_type)
    except NotFoundError:
        return None
    return d if d.name == op_type else None  # not a builder name or alias


def has_tf_counterpart(op_type: str) -> bool:
    """Whether ``export_tf_graph`` can write an op of this type: it has a TFForm or a
    TF exporter."""
    d = _registered(op_type)
    return d is not None and (d.tf is not None or "tf" in d.exporters)


def _forms() -> list[OpDef]:
    return [d for d in registered_ops(include_internal=True) if d.tf is not None]


def __getattr__(name: str) -> Any:
    """The former tables, as views of the OpDefs."""
    if name == "SAME_AS_TF":  # written under the same name, inputs and attrs
        return frozenset(d.name for d in _forms() if not d.tf.renamed)
    if name == "RESOURCE_OPS":  # their variable dtype attr is graphflow's dtype, TF's T
        return frozenset(d.name for d in _forms() if dict(d.tf.renamed) == {"dtype": "T"})
    if name == "TF_DEFAULTS":  # TF attrs graphflow's ops lack: (kind, TF's value)
        return {d.name: dict(d.tf.defaults) for d in _forms() if d.tf.defaults}
    if name == "DROPPED":  # graphflow attrs TF's op lacks
        return {d.name: d.tf.dropped for d in _forms() if d.tf.dropped}
    if name == "LOWERINGS":  # op type -> its TF exporter
        return exporters_of("tf")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- lowerings -------------------------------------------------------------------------
@exports("GatherNd")
def _lower_gather_nd(w: _Writer, op: Operation) -> list[str] | None:
    """GatherNd(params, indices, batch_dims=b > 0) -> GatherNd(params, tuples) whose
    tuples have each element's batch position prepended (TF's GatherNd op has no
    batch_dims; tf.gather_nd lowers it in Python much the same way)."""
    b = op.attrs["batch_dims"]
    if b == 0:
        return None
    params, indices = op.inputs
    tindices = op.attrs["Tindices"]
    params_shape = w.node(w.fresh(f"{op.name}/params_shape"), "Shape", [w.ref(params)],
                          {"T": ("type", params.dtype), "out_type": ("type", tindices)},
                          op.device,
                          outputs=[(tindices, TensorShape([params.shape.rank]))])[0]
    tuples = _batch_index_tuples(w, op, params_shape, w.ref(indices), indices, b, tindices)
    _, attrs = tf_form(op)
    attrs["Tindices"] = ("type", int64)
    return w.node(op.name, "GatherNd", [w.ref(params), tuples], attrs, op.device,
                  [c.name for c in op.control_inputs], [(o.dtype, o.shape) for o in op.outputs])


@exports("_BatchIndexTuples")
def _lower_batch_index_tuples(w: _Writer, op: Operation) -> list[str]:
    """_BatchIndexTuples(params_shape, indices) in TF's ops, named after the op."""
    params_shape, indices = op.inputs
    return [_batch_index_tuples(w, op, w.ref(params_shape), w.ref(indices), indices,
                                op.attrs["batch_dims"], op.attrs["Tindices"], name=op.name)]


def _batch_index_tuples(w: _Writer, op: Operation, params_shape: str, indices_ref: str,
                        indices: Output, b: int, tindices: DType, name: str | None = None
                        ) -> str:
    """int64 tuples[p..., :] = (p[:b]) + indices[p..., :], shaped params_shape[:b] +
    indices.shape[b:-1] + [b + depth]: a BroadcastTo of a Range per batch dim,
    concatenated before the indices."""
    rank = indices.shape.rank
    if rank is None:
        raise UnimplementedError(f"Cannot export {op.type} with batch_dims={b} to TensorFlow: "
                                 f"its indices '{indices.name}' have an unknown rank",
                                 op.name, op.type)
    at, dev = f"{op.name}/batch_tuples", op.device

    def add(suffix, op_type, inputs, attrs):
        return w.node(w.fresh(f"{at}/{suffix}"), op_type, inputs, _plain(attrs), dev,
                      outputs=[(int64, None)])[0]

    def const(suffix, value):
        return w.const(f"{at}/{suffix}", np.asarray(value, np.int64), dev)

    def int64_of(ref, dtype, suffix):
        return ref if dtype == int64 else add(suffix, "Cast", [ref], {
            "SrcT": dtype, "DstT": int64, "Truncate": False})

    shape64 = int64_of(params_shape, tindices, "params_shape")
    index_shape = add("indices_shape", "Shape", [indices_ref],
                      {"T": indices.dtype, "out_type": int64})
    batch = add("batch_shape", "Slice", [shape64, const("zero", [0]), const("b", [b])],
                {"T": int64, "Index": int64})
    inner = add("inner_shape", "Slice", [index_shape, const("b_begin", [b]),
                                         const("inner_size", [rank - 1 - b])],
                {"T": int64, "Index": int64})
    axis0 = const("axis0", 0)
    prefix = add("prefix_shape", "ConcatV2", [batch, inner, axis0],
                 {"N": 2, "T": int64, "Tidx": int64})
    last = const("last_axis", -1)
    parts = []
    for k in range(b):
        dim = add(f"dim{k}", "Reshape", [
            add(f"dim{k}_slice", "Slice", [shape64, const(f"k{k}", [k]), const("one", [1])],
                {"T": int64, "Index": int64}), const("scalar", np.zeros(0, np.int64))],
            {"T": int64, "Tshape": int64})
        positions = add(f"range{k}", "Range", [const("start", 0), dim, const("delta", 1)],
                        {"Tidx": int64})
        along = [1] * k + [-1] + [1] * (rank - 2 - k)
        column = add(f"column{k}", "Reshape", [positions, const(f"along{k}", along)],
                     {"T": int64, "Tshape": int64})
        spread = add(f"broadcast{k}", "BroadcastTo", [column, prefix],
                     {"T": int64, "Tidx": int64})
        parts.append(add(f"expand{k}", "ExpandDims", [spread, last],
                         {"T": int64, "Tdim": int64}))
    parts.append(int64_of(indices_ref, tindices, "indices"))
    attrs = {"N": len(parts), "T": int64, "Tidx": int64}
    if name is None:
        return add("tuples", "ConcatV2", parts + [last], attrs)
    return w.node(name, "ConcatV2", parts + [last], _plain(attrs), dev,
                  [c.name for c in op.control_inputs],
                  [(o.dtype, o.shape) for o in op.outputs])[0]


def _plain(attrs: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """{name: (kind, value)} for attrs of dtypes, lists of dtypes, bools and ints."""
    def kind(v):
        if isinstance(v, (list, tuple)):
            return "list(type)"
        return "type" if isinstance(v, DType) else "bool" if isinstance(v, bool) else "int"
    return {k: (kind(v), v) for k, v in attrs.items()}


@exports("_AssertEqual")
def _lower_assert_equal(w: _Writer, op: Operation) -> list[str]:
    """_AssertEqual(value, x, y) -> Identity(value) after Assert(rank, shape and elements
    of x and y equal, [message, x, y]): TF fails the run with the message where
    graphflow does."""
    value, x, y = op.inputs
    at, dev = f"{op.name}/check", op.device

    def add(suffix, op_type, inputs, attrs, dtype=bool_):
        return w.node(w.fresh(f"{at}/{suffix}"), op_type, inputs, _plain(attrs), dev,
                      outputs=[(dtype, None)])[0]

    def all_of(suffix, t):
        rank = add(f"{suffix}_rank", "Rank", [t], {"T": bool_}, int32)
        axes = add(f"{suffix}_axes", "Range", [w.const(f"{at}/zero", np.int32(0), dev), rank,
                                               w.const(f"{at}/one", np.int32(1), dev)],
                   {"Tidx": int32}, int32)
        return add(suffix, "All", [t, axes], {"keep_dims": False, "Tidx": int32})

    def equal(suffix, a, b, dtype):
        return w.node(w.fresh(f"{at}/{suffix}"), "Equal", [a, b], {
            "T": ("type", dtype), "incompatible_shape_error": ("bool", False)}, dev,
            outputs=[(bool_, None)])[0]

    xr, yr, tcheck = w.ref(x), w.ref(y), op.attrs["Tcheck"]
    ranks = equal("same_rank", add("x_rank", "Rank", [xr], {"T": tcheck}, int32),
                  add("y_rank", "Rank", [yr], {"T": tcheck}, int32), int32)
    shapes = all_of("same_shape", equal(
        "shape_equal", add("x_shape", "Shape", [xr], {"T": tcheck, "out_type": int64}, int64),
        add("y_shape", "Shape", [yr], {"T": tcheck, "out_type": int64}, int64), int64))
    values = all_of("same_values", equal("equal", xr, yr, tcheck))
    ok = add("ok", "LogicalAnd", [ranks, add("same_shape_and_values", "LogicalAnd",
                                             [shapes, values], {})], {})
    message = op.attrs["message"].replace("{x}", "x (below)").replace("{y}", "y (below)")
    text = w.const(f"{at}/message", np.array(message.encode("utf-8"), dtype=object), dev)
    check = w.fresh(f"{at}/Assert")
    w.node(check, "Assert", [ok, text, xr, yr], {
        "T": ("list(type)", [string, tcheck, tcheck]), "summarize": ("int", 100)}, dev)
    return w.node(op.name, "Identity", [w.ref(value)], {"T": ("type", value.dtype)}, dev,
                  [c.name for c in op.control_inputs] + [check],
                  [(o.dtype, o.shape) for o in op.outputs])


class _Helpers:
    """Nodes of one lowering, named ``<op>/<what>/<suffix>`` on the op's device."""

    def __init__(self, w: _Writer, op: Operation, what: str):
        self.w, self.at, self.dev = w, f"{op.name}/{what}", op.device

    def add(self, suffix: str, op_type: str, inputs: list[str], attrs: Mapping[str, Any],
            dtype: Any = int64, outputs: int = 1) -> Any:
        refs = self.w.node(self.w.fresh(f"{self.at}/{suffix}"), op_type, inputs,
                           _plain(attrs), self.dev, outputs=[(dtype, None)] * outputs)
        return refs[0] if outputs == 1 else refs

    def const(self, suffix: str, value: Any, dtype: Any) -> str:
        return self.w.const(f"{self.at}/{suffix}", np.asarray(value, dtype.as_numpy_dtype),
                            self.dev)

    def set_bad_indices_policy(self, policy: str) -> None:
        """Give the node added last TF's ``bad_indices_policy`` attr."""
        self.w.graph_def.node[-1].attr["bad_indices_policy"].s = policy.encode()


def _known_depth(op: Operation, indices: Output) -> int:
    """The depth of ``op``'s index tuples (the last dim of ``indices``); a lowering needs
    it statically."""
    depth = indices.shape[-1] if indices.shape.rank else None
    if depth is None:
        raise UnimplementedError(f"Cannot export {op.type} to TensorFlow: the depth of its "
                                 f"indices '{indices.name}' (their last dim) is unknown",
                                 op.name, op.type)
    return depth


def _index_tuples(h: _Helpers, indices_ref: str, depth: int, ti: DType) -> str:
    """The index tuples as a [-1, depth] matrix."""
    return h.add("tuples", "Reshape", [indices_ref, h.const("tuples_shape", [-1, depth], ti)],
                 {"T": ti, "Tshape": ti}, ti)


@exports("_StitchWinners")
def _lower_stitch_winners(w: _Writer, op: Operation) -> list[str]:
    """_StitchWinners(indices[N]) in TF's ops: number the positions of all indices in
    order, DynamicStitch the numbers (the later position wins a row, as the stitches'
    values do), and keep indices[m][j] where the row's number is (m, j)'s, -1 elsewhere.
    One IdentityN named after the op holds the N results."""
    h = _Helpers(w, op, "winners")
    indices = [w.ref(i) for i in op.inputs]
    zero, one = h.const("zero", 0, int32), h.const("one", 1, int32)
    start, positions = zero, []
    for m, ref in enumerate(indices):
        size = h.add(f"size{m}", "Size", [ref], {"T": int32, "out_type": int32}, int32)
        end = h.add(f"end{m}", "AddV2", [start, size], {"T": int32}, int32)
        numbers = h.add(f"numbers{m}", "Range", [start, end, one], {"Tidx": int32}, int32)
        shape = h.add(f"shape{m}", "Shape", [ref], {"T": int32, "out_type": int32}, int32)
        positions.append(h.add(f"positions{m}", "Reshape", [numbers, shape],
                               {"T": int32, "Tshape": int32}, int32))
        start = end
    n = len(indices)
    last = h.add("last_writer", "DynamicStitch", indices + positions, {"N": n, "T": int32},
                 int32)
    minus_one = h.const("minus_one", -1, int32)
    winners = []
    for m, (ref, pos) in enumerate(zip(indices, positions)):
        kept = h.add(f"kept{m}", "GatherV2", [last, ref, zero], {
            "batch_dims": 0, "Tparams": int32, "Tindices": int32, "Taxis": int32}, int32)
        won = h.add(f"won{m}", "Equal", [kept, pos], {
            "T": int32, "incompatible_shape_error": True}, bool_)
        winners.append(h.add(f"select{m}", "SelectV2", [won, ref, minus_one], {"T": int32},
                             int32))
    return w.node(op.name, "IdentityN", winners, {"T": ("list(type)", [int32] * n)},
                  op.device, [c.name for c in op.control_inputs],
                  [(o.dtype, o.shape) for o in op.outputs])


@exports("_ScatterWinners")
def _lower_scatter_winners(w: _Writer, op: Operation) -> list[str]:
    """_ScatterWinners(indices, shape) in TF's ops: number the index tuples, keep the
    largest number per slot with a TensorScatterMax (checking bad tuples as the forward
    scatter does, under the same bad_indices_policy), and keep a tuple where it is
    valid and its number is its slot's, -1 elsewhere."""
    indices, shape = op.inputs
    depth = _known_depth(op, indices)
    h = _Helpers(w, op, "winners")
    t = op.attrs["Tindices"]
    ref, shape_ref = w.ref(indices), w.ref(shape)
    tuples = _index_tuples(h, ref, depth, t)
    count = h.add("count", "Slice", [h.add("tuples_dims", "Shape", [tuples], {
        "T": t, "out_type": t}, t), h.const("zero_1", [0], t), h.const("one_1", [1], t)],
                  {"T": t, "Index": t}, t)
    numbers = h.add("numbers", "Range", [h.const("zero", 0, t), h.add(
        "n", "Reshape", [count, h.const("scalar", np.zeros(0), t)], {"T": t, "Tshape": t}, t),
        h.const("one", 1, t)], {"Tidx": t}, t)
    slots = h.add("slots", "Slice", [shape_ref, h.const("zero_2", [0], t),
                                     h.const("depth", [depth], t)], {"T": t, "Index": t}, t)
    empty = h.add("empty", "Fill", [slots, h.const("minus_one", -1, t)],
                  {"T": t, "index_type": t}, t)
    last = h.add("last_writer", "TensorScatterMax", [empty, tuples, numbers], {
        "T": t, "Tindices": t}, t)
    h.set_bad_indices_policy(op.attrs["bad_indices_policy"])
    kept = h.add("kept", "GatherNd", [last, tuples], {"Tparams": t, "Tindices": t}, t)
    h.set_bad_indices_policy("IGNORE")
    axis = h.const("last_axis", -1, int32)
    in_range = h.add("in_range", "All", [h.add("valid", "LogicalAnd", [
        h.add("nonnegative", "GreaterEqual", [tuples, h.const("zero_3", 0, t)], {"T": t},
              bool_),
        h.add("below", "Less", [tuples, slots], {"T": t}, bool_)], {}, bool_), axis],
        {"keep_dims": False, "Tidx": int32}, bool_)
    won = h.add("won", "LogicalAnd", [in_range, h.add("is_last", "Equal", [kept, numbers], {
        "T": t, "incompatible_shape_error": True}, bool_)], {}, bool_)
    chosen = h.add("chosen", "SelectV2", [
        h.add("won_column", "ExpandDims", [won, axis], {"T": bool_, "Tdim": int32}, bool_),
        tuples, h.const("minus_one_1", -1, t)], {"T": t}, t)
    return w.node(op.name, "Reshape", [chosen, h.add("indices_shape", "Shape", [ref], {
        "T": t, "out_type": t}, t)], {"T": ("type", t), "Tshape": ("type", t)}, op.device,
        [c.name for c in op.control_inputs], [(o.dtype, o.shape) for o in op.outputs])


@exports("ResourceSparseApplyAdagrad")
def _lower_sparse_adagrad(w: _Writer, op: Operation) -> list[str]:
    """graphflow's ResourceSparseApplyAdagrad sums duplicate rows' gradients first (as TF's
    optimizer does in Python before its kernel, which applies duplicates one by one):
    Unique + UnsortedSegmentSum, then TF's kernel on the unique rows."""
    var, accum, lr, grad, indices = op.inputs
    h = _Helpers(w, op, "dedup")
    t, ti = op.attrs["T"], op.attrs["Tindices"]
    rows, position = h.add("unique", "Unique", [w.ref(indices)],
                           {"T": ti, "out_idx": ti}, ti, outputs=2)
    count = h.add("count", "Size", [rows], {"T": ti, "out_type": ti}, ti)
    summed = h.add("summed", "UnsortedSegmentSum", [w.ref(grad), position, count],
                   {"T": t, "Tindices": ti, "Tnumsegments": ti}, t)
    _, attrs = tf_form(op)
    w.node(op.name, op.type, [w.ref(var), w.ref(accum), w.ref(lr), summed, rows], attrs,
           op.device, [c.name for c in op.control_inputs])
    return []


@exports("_ResourceSparseApplyAdam")
def _lower_sparse_adam(w: _Writer, op: Operation) -> list[str]:
    """graphflow's _ResourceSparseApplyAdam as the nodes TF 1.x's AdamOptimizer builds for
    a sparse gradient (``_apply_sparse_shared``): duplicate rows summed (Unique +
    UnsortedSegmentSum), m = m * beta1 then m[ids] += g * (1 - beta1), v likewise with
    g * g, and var -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + epsilon),
    reading m and v after their updates. A NoOp named after the op waits for it all."""
    var, m, v, b1_power, b2_power, lr, beta1, beta2, epsilon, grad, indices = op.inputs
    h = _Helpers(w, op, "adam")
    t, ti = op.attrs["T"], op.attrs["Tindices"]
    rows, position = h.add("unique", "Unique", [w.ref(indices)], {"T": ti, "out_idx": ti}, ti,
                           outputs=2)
    count = h.add("count", "Size", [rows], {"T": ti, "out_type": ti}, ti)
    g = h.add("summed", "UnsortedSegmentSum", [w.ref(grad), position, count],
              {"T": t, "Tindices": ti, "Tnumsegments": ti}, t)

    def math(suffix, op_type, *inputs):
        return h.add(suffix, op_type, list(inputs), {"T": t}, t)
    one = h.const("one", 1, t)
    step = math("step", "RealDiv", math("lr_sqrt", "Mul", w.ref(lr), math(
        "sqrt_1_b2", "Sqrt", math("one_b2_power", "Sub", one, w.ref(b2_power)))),
        math("one_b1_power", "Sub", one, w.ref(b1_power)))
    now = []
    for name, slot, beta, rows_of in (("m", m, beta1, g), ("v", v, beta2, math("g2", "Mul", g, g))):
        read = h.add(f"{name}_read", "ReadVariableOp", [w.ref(slot)], {"dtype": t}, t)
        assign, scatter = w.fresh(f"{h.at}/{name}_assign"), w.fresh(f"{h.at}/{name}_scatter")
        w.node(assign, "AssignVariableOp", [w.ref(slot), math(f"{name}_decayed", "Mul", read,
                                                               w.ref(beta))],
               _plain({"dtype": t}), op.device)
        scaled = math(f"{name}_scaled", "Mul", rows_of,
                      math(f"one_{name}_beta", "Sub", one, w.ref(beta)))
        w.node(scatter, "ResourceScatterAdd", [w.ref(slot), rows, scaled],
               _plain({"dtype": t, "Tindices": ti}), op.device, [assign])
        now += w.node(w.fresh(f"{h.at}/{name}_now"), "ReadVariableOp", [w.ref(slot)],
                      _plain({"dtype": t}), op.device, [scatter], outputs=[(t, None)])
    delta = math("delta", "Mul", step, math("ratio", "RealDiv", now[0], math(
        "denominator", "AddV2", math("sqrt_v", "Sqrt", now[1]), w.ref(epsilon))))
    update = w.fresh(f"{h.at}/var_update")
    w.node(update, "AssignSubVariableOp", [w.ref(var), delta], _plain({"dtype": t}), op.device)
    w.node(op.name, "NoOp", [], {}, op.device, [update, *(c.name for c in op.control_inputs)])
    return []


@exports("_ScatterMinMaxShares")
def _lower_min_max_shares(w: _Writer, op: Operation) -> list[str]:
    """_ScatterMinMaxShares(tensor, indices, updates, output) in TF's ops: who equals
    ``output`` where (the tensor's element, or a NaN there; each valid update landing on
    it), counted with a TensorScatterAdd under the op's bad_indices_policy; each of the
    k owners gets 1/k. One IdentityN named after the op holds the two shares."""
    tensor, indices, updates, output = op.inputs
    depth = _known_depth(op, indices)
    h = _Helpers(w, op, "shares")
    t = op.attrs["T"]
    tuples, rows, valid_rows = _update_rows(h, op, depth)
    tensor_wins, update_wins = _who_wins(h, op, tuples, rows, valid_rows)
    tensor_share, update_share = _shares(h, op, tuples, tensor_wins, update_wins)
    return w.node(op.name, "IdentityN", [tensor_share, update_share],
                  {"T": ("list(type)", [t, t])}, op.device, [c.name for c in op.control_inputs],
                  [(o.dtype, o.shape) for o in op.outputs])


def _update_rows(h: _Helpers, op: Operation, depth: int) -> tuple[str, str, str]:
    """The index tuples, the updates as one row per tuple, and which rows land in range
    (as a column that broadcasts over a row)."""
    tensor, indices, updates, _ = op.inputs
    t, ti = op.attrs["T"], op.attrs["Tindices"]
    tuples = _index_tuples(h, h.w.ref(indices), depth, ti)
    shape = h.add("tensor_shape", "Shape", [h.w.ref(tensor)], {"T": t, "out_type": ti}, ti)
    slots = h.add("slots", "Slice", [shape, h.const("zero_1", [0], ti),
                                     h.const("depth", [depth], ti)], {"T": ti, "Index": ti}, ti)
    inner = h.add("inner", "Slice", [shape, h.const("depth_1", [depth], ti),
                                     h.const("rest", [-1], ti)], {"T": ti, "Index": ti}, ti)
    axis0, last = h.const("axis0", 0, int32), h.const("last_axis", -1, int32)
    rows_shape = h.add("rows_shape", "ConcatV2", [h.const("minus_one", [-1], ti), inner, axis0],
                       {"N": 2, "T": ti, "Tidx": int32}, ti)
    rows = h.add("rows", "Reshape", [h.w.ref(updates), rows_shape], {"T": t, "Tshape": ti}, t)
    valid = h.add("valid", "All", [h.add("in_range", "LogicalAnd", [
        h.add("nonnegative", "GreaterEqual", [tuples, h.const("zero", 0, ti)], {"T": ti},
              bool_),
        h.add("below", "Less", [tuples, slots], {"T": ti}, bool_)], {}, bool_), last],
        {"keep_dims": False, "Tidx": int32}, bool_)
    column_shape = h.add("column_shape", "ConcatV2", [
        h.const("minus_one_1", [-1], ti), h.add("ones", "OnesLike", [inner], {"T": ti}, ti),
        axis0], {"N": 2, "T": ti, "Tidx": int32}, ti)
    valid_rows = h.add("valid_rows", "Reshape", [valid, column_shape],
                       {"T": bool_, "Tshape": ti}, bool_)
    return tuples, rows, valid_rows


def _gather_ignoring_bad(h: _Helpers, op: Operation, suffix: str, params: str,
                         tuples: str) -> str:
    """params at the index tuples; a tuple out of range gathers zeros (TF's IGNORE)."""
    t, ti = op.attrs["T"], op.attrs["Tindices"]
    ref = h.add(suffix, "GatherNd", [params, tuples], {"Tparams": t, "Tindices": ti}, t)
    h.set_bad_indices_policy("IGNORE")
    return ref


def _who_wins(h: _Helpers, op: Operation, tuples: str, rows: str,
              valid_rows: str) -> tuple[str, str]:
    """Where the tensor's element equals the output (or is NaN), and which valid update
    rows equal the output where they land."""
    tensor, _, _, output = op.inputs
    t = op.attrs["T"]
    tensor_ref, out_ref = h.w.ref(tensor), h.w.ref(output)
    tensor_wins = h.add("tensor_wins", "LogicalOr", [
        h.add("tensor_equal", "Equal", [tensor_ref, out_ref],
              {"T": t, "incompatible_shape_error": True}, bool_),
        h.add("tensor_nan", "IsNan", [tensor_ref], {"T": t}, bool_)], {}, bool_)
    update_wins = h.add("update_wins", "LogicalAnd", [
        h.add("update_equal", "Equal", [rows, _gather_ignoring_bad(h, op, "landed_on", out_ref,
                                                                   tuples)],
              {"T": t, "incompatible_shape_error": True}, bool_), valid_rows], {}, bool_)
    return tensor_wins, update_wins


def _shares(h: _Helpers, op: Operation, tuples: str, tensor_wins: str,
            update_wins: str) -> tuple[str, str]:
    """Each winner's 1/k of the output's gradient: the tensor's, and the updates' (in the
    updates' shape)."""
    tensor, _, updates, _ = op.inputs
    t, ti = op.attrs["T"], op.attrs["Tindices"]

    def as_t(suffix, ref):
        return h.add(suffix, "Cast", [ref], {"SrcT": bool_, "DstT": t, "Truncate": False}, t)

    zeros = h.add("zeros", "ZerosLike", [h.w.ref(tensor)], {"T": t}, t)
    landed = h.add("update_counts", "TensorScatterAdd", [zeros, tuples,
                                                         as_t("update_ones", update_wins)],
                   {"T": t, "Tindices": ti}, t)
    h.set_bad_indices_policy(op.attrs["bad_indices_policy"])
    counts = h.add("counts", "AddV2", [as_t("tensor_ones", tensor_wins), landed], {"T": t}, t)
    share = h.add("share", "Reciprocal", [h.add("at_least_one", "Maximum", [
        counts, h.const("one", 1, t)], {"T": t}, t)], {"T": t}, t)
    tensor_share = h.add("tensor_share", "SelectV2", [tensor_wins, share, zeros], {"T": t}, t)
    update_rows = h.add("update_rows", "SelectV2", [
        update_wins, _gather_ignoring_bad(h, op, "share_there", share, tuples),
        h.const("nothing", 0, t)], {"T": t}, t)
    update_share = h.add("update_share", "Reshape", [update_rows, h.add(
        "updates_shape", "Shape", [h.w.ref(updates)], {"T": t, "out_type": ti}, ti)],
        {"T": t, "Tshape": ti}, t)
    return tensor_share, update_share


@exports("If", "StatelessIf", "While", "StatelessWhile")
def _lower_functional(w: _Writer, op: Operation) -> list[str]:
    """If/While: the node, its functions into the GraphDef's library."""
    from .tf_export_functions import write_functional
    return write_functional(w, op)


__all__ = ["SAME_AS_TF", "RESOURCE_OPS", "TF_DEFAULTS", "DROPPED", "LOWERINGS", "tf_form",
           "has_tf_counterpart", "exports"]
