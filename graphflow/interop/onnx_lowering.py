"""The ONNX lowering of each op: ``op_def.exporters["onnx"](em, op, inputs)`` (filed with
``@lowering(*op_types)``) adds the ONNX nodes computing ``op``'s outputs through an
:class:`Emitter` and returns their value names; ``op_def.export_checks["onnx"](op,
opset)`` (``@check``) says why a node cannot be lowered, or None.

Every lowering keeps TensorFlow's semantics exactly, also where ONNX leaves a case
undefined or counts from the end (and where tf2onnx's lowerings are wrong):

- ScatterNd / TensorScatterAdd / Sub sum duplicates (ScatterND ``reduction="add"``;
  Sub adds the negated updates); TensorScatterMin / Max keep TF's NaN rules.
- TensorScatterUpdate and the stitches keep the last write for duplicates (ONNX's
  ``reduction="none"`` leaves them undefined): a max-scatter of positions finds each
  slot's last writer, then only the winners are written.
- DynamicStitch is ``max(index) + 1`` rows long, rows no index names are zero;
  DynamicPartition selects each partition's rows with Compress, any partitions rank.
- What TensorFlow rejects at run time (a negative or out-of-range index, a partition id
  out of range, a zero integer divisor) becomes an out-of-bounds index, which ONNX makes
  an error: the run fails instead of going on with a wrong value.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from graphflow.dtypes import (DType, bool_ as _BOOL, float32, int8, int16, int32 as _INT32,
                              int64, uint8, uint16, uint32, uint64)
from graphflow.graph import Operation, Output
from graphflow.inference import constant_value
from graphflow.registry import OpDef, exporters_of, op_def

#: op type -> lowering(em, op, inputs) -> ONNX value names of the op's outputs: a view of
#: the OpDefs' ``exporters["onnx"]``, which ``@lowering`` fills
LOWERINGS: Mapping[str, Callable[["Emitter", Operation, list], list]] = exporters_of("onnx")

INT64_MAX = np.iinfo(np.int64).max


def _registrar(register: Callable[[OpDef], Callable], what: str) -> Callable:
    """A decorator factory: ``@decorator(*op_types)`` files a function on each op's OpDef
    (``register(op_def)`` gives the OpDef's decorator)."""
    def decorator(*op_types: str):
        def register_all(fn):
            for op_type in op_types:
                register(op_def(op_type))(fn)
            return fn
        return register_all
    decorator.__doc__ = f"Register the decorated function as the {what} of ``op_types``."
    return decorator


lowering = _registrar(lambda d: d.export("onnx"), "ONNX lowering")


#: op type -> check(op, opset) -> why it cannot be exported, or None: a view of the
#: OpDefs' ``export_checks["onnx"]``, which ``@check`` fills
CHECKS: Mapping[str, Callable[[Operation, int], str | None]] = exporters_of("onnx", checks=True)

check = _registrar(lambda d: d.export_check("onnx"), "export-time check")


def elem_type(onnx, dtype: DType) -> int:
    """The ONNX TensorProto element type of ``dtype``."""
    if dtype.is_string:
        return onnx.TensorProto.STRING
    return onnx.helper.np_dtype_to_tensor_dtype(dtype.as_numpy_dtype)


#: ONNX op -> {dtype onnxruntime's CPU kernels lack (1.32): a wider type that gives the
#: same bits}: computed there and cast back (modular for sums and products, as the
#: narrow type wraps; uint64 through int64 keeps the bits of Where's choice)
ORT_WIDER: dict[str, dict[DType, DType]] = {
    "Where": {_BOOL: uint8, int16: _INT32, uint16: _INT32, uint64: int64},
    "Max": {int16: _INT32, uint16: _INT32},
    "Min": {int16: _INT32, uint16: _INT32},
    "Pad": {int16: _INT32, uint16: _INT32},
    "ReduceSum": {t: int64 for t in (int8, int16, uint8, uint16, uint32, uint64)},
    "ReduceProd": {t: int64 for t in (int8, int16, uint8, uint16, uint32, uint64)},
    "Range": {t: int64 for t in (int8, uint16, uint32)},
}


# -- building the ONNX graph -----------------------------------------------------------------
class Emitter:
    """The ONNX nodes and initializers made so far, and each graphflow Output's value name.

    A lowering calls ``node``/``const`` for what it needs; the value it returns for an
    output is renamed to the output's own name (``op:0``) when one of its nodes made it."""

    def __init__(self, onnx, opset: int, frozen: dict[Operation, np.ndarray]):
        self.onnx, self.h, self.opset, self.frozen = onnx, onnx.helper, opset, frozen
        self.nodes: list = []
        self.initializers: list = []
        self.values: dict[Output, str] = {}
        self._names: set[str] = set()
        self._consts: dict[tuple, str] = {}
        self._op: Operation | None = None
        self._first = 0
        #: what this emitter's names start with: "" for the model's graph, the
        #: control-flow node and role ("while/body/") for a subgraph's
        self.prefix = ""
        #: names only the model's graph may take (its outputs', given at the end)
        self.reserved: set[str] = set()

    def child(self, prefix: str) -> "Emitter":
        """An emitter for an ONNX subgraph (a branch, a loop body): nodes and values of
        its own, names ``prefix``-ed; the names, constants (initializers of the model's
        graph, which a subgraph sees as outer-scope values) and frozen variables
        shared, so that no name in the model is defined twice."""
        sub = Emitter.__new__(Emitter)
        sub.__dict__.update(self.__dict__)
        sub.nodes, sub.values, sub.frozen = [], {}, dict(self.frozen)
        sub._op, sub._first, sub.prefix = None, 0, prefix
        return sub

    def unique(self, base: str) -> str:
        name, i = base, 1
        while name in self._names or (self.prefix and name in self.reserved):
            name, i = f"{base}_{i}", i + 1
        self._names.add(name)
        return name

    def begin(self, op: Operation) -> None:
        self._op, self._first = op, len(self.nodes)

    def end(self, op: Operation, names: list) -> None:
        """Give the values this op's nodes made for its outputs the outputs' names."""
        made = {v for node in self.nodes[self._first:] for v in node.output}
        for out, value in zip(op.outputs, names):
            name = self.prefix + out.name
            if value in made and name not in self._names and not (
                    self.prefix and name in self.reserved) and value not in (
                    self.values.get(o) for o in op.outputs[:out.index]):
                self._names.add(name)
                for node in self.nodes[self._first:]:
                    node.output[:] = [name if v == value else v for v in node.output]
                    node.input[:] = [name if v == value else v for v in node.input]
                names[out.index] = name

    def node(self, op_type: str, inputs: Sequence[str], n_out: int = 1, **attrs) -> Any:
        """Add one ONNX node; its output name (a list when ``n_out != 1``)."""
        base = f"{self.prefix}{self._op.name}/{op_type}"
        outs = [self.unique(f"{base}:{i}") for i in range(n_out)]
        self.nodes.append(self.h.make_node(op_type, list(inputs), outs, name=self.unique(base),
                                           **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value: Any, dtype: Any = None) -> str:
        """An initializer holding ``value`` (shared between equal small constants)."""
        array = np.asarray(value, dtype=dtype)
        key = None
        if array.size <= 16 and array.dtype != object:
            key = (array.dtype.str, array.shape, array.tobytes())
            if key in self._consts:
                return self._consts[key]
        name = self.initializer(self.unique(f"{self.prefix}{self._op.name}/const"), array)
        if key is not None:
            self._consts[key] = name
        return name

    def initializer(self, name: str, array: np.ndarray) -> str:
        """An initializer called ``name`` holding ``array`` (strings as bytes)."""
        if array.dtype == object:
            tensor = self.h.make_tensor(name, self.onnx.TensorProto.STRING, array.shape,
                                        [bytes(v) for v in array.reshape(-1)])
        else:
            tensor = self.onnx.numpy_helper.from_array(np.array(array, order="C"), name)
        self.initializers.append(tensor)
        return name

    def scalar(self, dtype: DType, value: Any) -> str:
        """A scalar of ``dtype`` (``value`` cast; b"" for a string zero)."""
        if dtype.is_string:
            return self.const(np.array(value if isinstance(value, bytes) else b"", object))
        return self.const(np.array(value).astype(dtype.as_numpy_dtype))

    def i64(self, value: str, dtype: DType) -> str:
        """``value`` as int64 (ONNX's index type)."""
        return value if dtype == int64 else self.cast(value, int64)

    def typed(self, op_type: str, inputs: Sequence[str], dtype: DType,
              positions: Sequence[int] | None = None, **attrs) -> str:
        """One ``op_type`` node whose inputs at ``positions`` (all by default) and output
        are of ``dtype``; through a wider type where onnxruntime lacks ``dtype``
        (``ORT_WIDER``), so the model runs there too, with the same result."""
        wider = ORT_WIDER.get(op_type, {}).get(dtype)
        if wider is None:
            return self.node(op_type, inputs, **attrs)
        positions = range(len(inputs)) if positions is None else positions
        inputs = [self.cast(v, wider) if i in positions else v for i, v in enumerate(inputs)]
        return self.cast(self.node(op_type, inputs, **attrs), dtype)

    def index(self, value: str, dtype: DType) -> str:
        """Indices as int64 with each negative one made out of bounds: ONNX would count it
        from the end, TensorFlow rejects it; an out-of-bounds index is an error in ONNX
        (the run fails, with the backend's message, not TensorFlow's)."""
        value = self.i64(value, dtype)
        negative = self.node("Less", [value, self.const(0, np.int64)])
        return self.node("Where", [negative, self.const(INT64_MAX, np.int64), value])

    def fail_if(self, condition: str, dtype: DType) -> str:
        """Zeros of ``dtype`` shaped as ``condition``, and a failed run where it is true:
        a Gather out of bounds, the one error ONNX has."""
        return self.node("Gather", [self.const([0], dtype.as_numpy_dtype),
                                    self.i64(condition, _BOOL)], axis=0)

    def cast(self, value: str, dtype: DType) -> str:
        return self.node("Cast", [value], to=elem_type(self.onnx, dtype))

    def slice1(self, value: str, start: Any, end: Any = None) -> str:
        """``value[start:end]`` of a 1-D value; ``start`` / ``end`` ints or [1] values."""
        starts = start if isinstance(start, str) else self.const([start], np.int64)
        ends = end if isinstance(end, str) else self.const(
            [INT64_MAX if end is None else end], np.int64)
        return self.node("Slice", [value, starts, ends])

    def gather_rows(self, table: str, ids: str) -> str:
        """``table[ids]`` along dim 0 (ids any shape), as GatherND: onnxruntime's Gather
        (1.32) copies only the first string of each row of a string table."""
        rows = self.node("Unsqueeze", [ids, self.const([-1], np.int64)])
        return self.node("GatherND", [table, rows])

    def flat_rows(self, data: str, lead: str) -> tuple[str, str]:
        """``lead`` (a tensor whose shape is a prefix of ``data``'s) and ``data`` with that
        prefix flattened to one dim: ([n], [n] + data.shape[rank(lead):])."""
        lead_shape = self.node("Shape", [lead])
        n = self.node("ReduceProd", [lead_shape], keepdims=1)
        rank = self.node("Shape", [lead_shape])
        rest = self.slice1(self.node("Shape", [data]), rank)
        rows = self.node("Reshape", [data, self.node("Concat", [n, rest], axis=0)], allowzero=1)
        return self.node("Reshape", [lead, n], allowzero=1), rows


def lower_ops(em: Emitter, ops: Sequence[Operation], fed: set) -> None:
    """ONNX nodes for ``ops`` (in a topological order) through ``em``, each op's outputs
    then in ``em.values``; an op whose outputs are all ``fed`` is skipped (its values
    are there already). Shared by the model's graph and every subgraph."""
    for op in ops:
        if all(o in fed for o in op.outputs):
            continue
        em.begin(op)
        names = op.op_def.exporters["onnx"](em, op, [em.values.get(i) for i in op.inputs])
        em.end(op, names)
        for out, value in zip(op.outputs, names):
            em.values.setdefault(out, value)

# -- element-wise math ---------------------------------------------------------------------------
def _simple(onnx_op: str, positions: Sequence[int] | None = None) -> Callable:
    """The lowering of an op that is ``onnx_op``, one node (of the last input's dtype at
    ``positions``, all by default: ``Emitter.typed``)."""
    def lower(em: Emitter, op: Operation, ins: list) -> list:
        return [em.typed(onnx_op, ins, op.inputs[-1].dtype, positions)]
    lower.__name__ = lower.__qualname__ = f"_simple_{onnx_op}"
    return lower


for _op, _onnx in (("Add", "Add"), ("Sub", "Sub"), ("Mul", "Mul"), ("RealDiv", "Div"),
                   ("Maximum", "Max"), ("Minimum", "Min"), ("Equal", "Equal"), ("Less", "Less"),
                   ("Greater", "Greater"), ("LogicalAnd", "And"), ("LogicalOr", "Or"),
                   ("LogicalNot", "Not"), ("Neg", "Neg"), ("Identity", "Identity"),
                   ("StopGradient", "Identity")):
    lowering(_op)(_simple(_onnx))
lowering("SelectV2")(_simple("Where", [1, 2]))  # the condition stays bool


@check("Add")
def _check_add(op: Operation, opset: int) -> str | None:
    if op.inputs[0].dtype.is_string:
        return "on strings (ONNX's Add does not concatenate)"
    return None


@check("Equal", "NotEqual")
def _check_equal(op: Operation, opset: int) -> str | None:
    if op.inputs[0].dtype.is_string and opset < 19:
        return "on strings (ONNX's Equal takes strings from opset 19: pass opset=19)"
    return None


@lowering("NotEqual")
def _not_equal(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Not", [em.node("Equal", ins)])]


@lowering("Conj")
def _conj(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Identity", ins)]  # real inputs only: complex ones are refused


@lowering("AddN")
def _add_n(em: Emitter, op: Operation, ins: list) -> list:
    total = ins[0] if len(ins) > 1 else em.node("Identity", ins)
    for x in ins[1:]:  # in order, as TensorFlow's CPU kernel adds them
        total = em.node("Add", [total, x])
    return [total]


@lowering("FloorDiv", "FloorMod")
def _floor_div_mod(em: Emitter, op: Operation, ins: list) -> list:
    """Integer floor division and Python's remainder. ONNX's Mod(fmod=0) is Python's %
    for integers; x // y = (x - x % y) / y divides exactly. Divisors 0 and -1 are replaced
    by 1 so no backend traps (MIN / -1 overflows in C; -1 is done as a negation); a zero
    one then fails the run, as TensorFlow's "Integer division by zero"."""
    x, y = ins
    dtype = op.inputs[0].dtype
    bad = em.node("Equal", [y, em.scalar(dtype, 0)])
    if not dtype.is_unsigned:
        bad = em.node("Or", [bad, em.node("Equal", [y, em.scalar(dtype, -1)])])
    safe = em.typed("Where", [bad, em.scalar(dtype, 1), y], dtype, [1, 2])
    # a zero divisor where an output element needs it fails the run, as in TensorFlow
    zero = em.node("And", [em.node("Equal", [y, em.scalar(dtype, 0)]), em.node("Equal", [x, x])])
    safe = em.node("Add", [safe, em.fail_if(zero, dtype)])
    mod = em.node("Mod", [x, safe], fmod=0)
    if op.type == "FloorMod":
        return [mod]
    div = em.node("Div", [em.node("Sub", [x, mod]), safe])
    if dtype.is_unsigned:
        return [div]
    minus_one = em.node("Equal", [y, em.scalar(dtype, -1)])
    return [em.typed("Where", [minus_one, em.node("Neg", [x]), div], dtype, [1, 2])]


@lowering("Cast")
def _cast(em: Emitter, op: Operation, ins: list) -> list:
    return [em.cast(ins[0], op.attrs["DstT"])]


# -- array ops ---------------------------------------------------------------------------------
@check("Const")
def _check_const(op: Operation, opset: int) -> str | None:
    value = np.asarray(op.attrs["value"])
    if value.dtype == object:
        try:
            for item in value.reshape(-1):
                bytes(item).decode("utf-8")
        except UnicodeDecodeError:
            return "holding strings that are not UTF-8 (ONNX's strings are UTF-8)"
    return None


@lowering("Const")
def _const(em: Emitter, op: Operation, ins: list) -> list:
    name = em.unique(em.prefix + op.outputs[0].name)
    return [em.initializer(name, np.asarray(op.attrs["value"]))]


@lowering("Shape", "Size")
def _shape_size(em: Emitter, op: Operation, ins: list) -> list:
    value = em.node(op.type, ins)
    out_type = op.attrs["out_type"]
    return [value if out_type == int64 else em.cast(value, out_type)]


@lowering("Rank")
def _rank(em: Emitter, op: Operation, ins: list) -> list:
    return [em.cast(em.node("Size", [em.node("Shape", ins)]), op.outputs[0].dtype)]


@lowering("Reshape")
def _reshape(em: Emitter, op: Operation, ins: list) -> list:
    # allowzero: a 0 in TensorFlow's shape is a 0, not "copy the input's dim"
    return [em.node("Reshape", [ins[0], em.i64(ins[1], op.inputs[1].dtype)], allowzero=1)]


@lowering("Range")
def _range(em: Emitter, op: Operation, ins: list) -> list:
    """Range; a zero delta, or one pointing away from limit, fails the run as TensorFlow's
    checks do (ONNX would give an empty range)."""
    dtype = op.outputs[0].dtype
    wide = ORT_WIDER["Range"].get(dtype, dtype)
    start, limit, delta = (v if wide == dtype else em.cast(v, wide) for v in ins)
    zero = em.scalar(wide, 0)
    up = em.node("Greater", [delta, zero])
    bad = em.node("Or", [
        em.node("Equal", [delta, zero]),
        em.node("Or", [em.node("And", [up, em.node("Greater", [start, limit])]),
                       em.node("And", [em.node("Not", [up]), em.node("Less", [start, limit])])])])
    delta = em.node("Add", [delta, em.fail_if(bad, wide)])
    out = em.node("Range", [start, limit, delta])
    return [out if wide == dtype else em.cast(out, dtype)]


@lowering("Fill")
def _fill(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Expand", [ins[1], em.i64(ins[0], op.inputs[0].dtype)])]


@lowering("BroadcastTo")
def _broadcast_to(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Expand", [ins[0], em.i64(ins[1], op.inputs[1].dtype)])]


@lowering("ZerosLike", "OnesLike")
def _zeros_ones_like(em: Emitter, op: Operation, ins: list) -> list:
    dtype = op.outputs[0].dtype
    fill = em.scalar(dtype, 1 if op.type == "OnesLike" else 0)
    return [em.node("Expand", [fill, em.node("Shape", ins)])]


def _constant_int(op: Operation, index: int) -> int | None:
    value = constant_value(op.inputs[index])
    return None if value is None or np.ndim(value) > 1 or np.size(value) != 1 \
        else int(np.ravel(value)[0])


@check("ConcatV2")
def _check_concat(op: Operation, opset: int) -> str | None:
    if _constant_int(op, len(op.inputs) - 1) is None:
        return "with an axis that is not a constant (ONNX's Concat takes it as an attribute)"
    return None


@lowering("ConcatV2")
def _concat(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Concat", ins[:-1], axis=_constant_int(op, len(ins) - 1))]


@lowering("ExpandDims")
def _expand_dims(em: Emitter, op: Operation, ins: list) -> list:
    axis = em.node("Reshape", [em.i64(ins[1], op.inputs[1].dtype), em.const([1], np.int64)])
    return [em.node("Unsqueeze", [ins[0], axis])]


@lowering("Squeeze")
def _squeeze(em: Emitter, op: Operation, ins: list) -> list:
    dims = list(op.attrs["squeeze_dims"])
    return [em.node("Squeeze", ins + ([em.const(dims, np.int64)] if dims else []))]


@lowering("Pack")
def _pack(em: Emitter, op: Operation, ins: list) -> list:
    axis = op.attrs["axis"]
    rows = [em.node("Unsqueeze", [x, em.const([axis], np.int64)]) for x in ins]
    return [rows[0] if len(rows) == 1 else em.node("Concat", rows, axis=axis)]


@lowering("Unpack")
def _unpack(em: Emitter, op: Operation, ins: list) -> list:
    num, axis = op.attrs["num"], op.attrs["axis"]
    if num == 0:
        return []
    parts = [ins[0]] if num == 1 else em.node("Split", ins, n_out=num, axis=axis, num_outputs=num)
    return [em.node("Squeeze", [p, em.const([axis], np.int64)]) for p in parts]


@lowering("Pad")
def _pad(em: Emitter, op: Operation, ins: list) -> list:
    # TF's paddings [[before, after], ...] -> ONNX's [befores..., afters...]; a negative
    # one fails the run as in TensorFlow (ONNX would crop)
    paddings = em.i64(ins[1], op.inputs[1].dtype)
    paddings = em.node("Add", [paddings, em.fail_if(
        em.node("Less", [paddings, em.const(0, np.int64)]), int64)])
    dtype, rank = op.outputs[0].dtype, op.inputs[0].shape.rank
    if not dtype.is_string or rank is None:
        pads = em.node("Reshape", [em.node("Transpose", [paddings], perm=[1, 0]),
                                   em.const([-1], np.int64)])
        return [em.typed("Pad", [ins[0], pads, em.scalar(dtype, 0)], dtype, [0, 2])]
    # strings (onnxruntime has no string Pad): blocks of "" concatenated on each side
    x = ins[0]
    for axis in range(rank):
        sides = []
        for side in (0, 1):
            width = em.node("Slice", [paddings, em.const([axis, side], np.int64),
                                      em.const([axis + 1, side + 1], np.int64)])
            shape = em.node("ScatterND", [em.node("Shape", [x]), em.const([[axis]], np.int64),
                                          em.node("Reshape", [width, em.const([1], np.int64)])])
            sides.append(em.node("Expand", [em.scalar(dtype, b""), shape]))
        x = em.node("Concat", [sides[0], x, sides[1]], axis=axis)
    return [x]


@lowering("Slice")
def _slice(em: Emitter, op: Operation, ins: list) -> list:
    """Slice; a begin outside [0, dim] or a size past the end fails the run, as in
    TensorFlow (ONNX would count a negative begin from the end, and clamp)."""
    begin = em.i64(ins[1], op.inputs[1].dtype)
    size = em.i64(ins[2], op.inputs[2].dtype)
    to_end = em.node("Equal", [size, em.const(-1, np.int64)])  # size -1: to the end
    dims = em.node("Shape", [ins[0]])
    room = em.node("Sub", [dims, begin])
    bad = em.node("Or", [
        em.node("Or", [em.node("Less", [begin, em.const(0, np.int64)]),
                       em.node("Greater", [begin, dims])]),
        em.node("And", [em.node("Not", [to_end]),
                        em.node("Or", [em.node("Less", [size, em.const(0, np.int64)]),
                                       em.node("Greater", [size, room])])])])
    begin = em.node("Add", [begin, em.fail_if(bad, int64)])
    end = em.node("Where", [to_end, em.const(INT64_MAX, np.int64), em.node("Add", [begin, size])])
    return [em.node("Slice", [ins[0], begin, end])]


def _sum_axes(op: Operation) -> list[int] | None:
    """Sum's constant axes, each dim once; None if not constant or, with an unknown rank,
    possibly naming a dim twice (negative and not)."""
    value = constant_value(op.inputs[1])
    if value is None or np.ndim(value) > 1:
        return None
    axes, rank = [int(a) for a in np.ravel(value)], op.inputs[0].shape.rank
    if rank is not None:
        axes = [a % rank if rank else a for a in axes]
    elif any(a < 0 for a in axes) and any(a >= 0 for a in axes):
        return None
    return list(dict.fromkeys(axes))


@lowering("Sum")
def _sum(em: Emitter, op: Operation, ins: list) -> list:
    dtype, keep = op.outputs[0].dtype, op.attrs["keep_dims"]
    axes = _sum_axes(op)
    if dtype.is_integer and axes is not None:
        # exact and wrapping in every backend: the last of a running sum (onnxruntime's
        # integer ReduceSum goes through floating point and saturates)
        wide = dtype if dtype in (_INT32, int64) else int64  # its CumSum kernels
        x = ins[0] if wide == dtype else em.cast(ins[0], wide)
        for axis in axes:
            axis_list = em.const([axis], np.int64)
            x = em.node("Pad", [x, em.const([1, 0], np.int64), em.scalar(wide, 0), axis_list])
            x = em.node("CumSum", [x, em.const(axis, np.int64)])
            x = em.node("Slice", [x, em.const([-1], np.int64), em.const([INT64_MAX], np.int64),
                                  axis_list])
        if not keep and axes:
            x = em.node("Squeeze", [x, em.const(axes, np.int64)])
        return [x if wide == dtype else em.cast(x, dtype)]
    axes = em.node("Reshape", [em.i64(ins[1], op.inputs[1].dtype), em.const([-1], np.int64)])
    # no axes reduce nothing in TensorFlow (ONNX's default reduces everything)
    return [em.typed("ReduceSum", [ins[0], axes], op.outputs[0].dtype, [0],
                     keepdims=int(op.attrs["keep_dims"]), noop_with_empty_axes=1)]


@lowering("Prod")
def _prod(em: Emitter, op: Operation, ins: list) -> list:
    axes = em.node("Reshape", [em.i64(ins[1], op.inputs[1].dtype), em.const([-1], np.int64)])
    return [em.typed("ReduceProd", [ins[0], axes], op.outputs[0].dtype, [0],
                     keepdims=int(op.attrs["keep_dims"]), noop_with_empty_axes=1)]


@lowering("Tile")
def _tile(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Tile", [ins[0], em.i64(ins[1], op.inputs[1].dtype)])]


def _constant_ints(op: Operation, index: int) -> list[int] | None:
    value = constant_value(op.inputs[index])
    return None if value is None or np.ndim(value) != 1 else [int(v) for v in value]


@check("Transpose")
def _check_transpose(op: Operation, opset: int) -> str | None:
    if _constant_ints(op, 1) is None:
        return "with a perm that is not a constant (ONNX's Transpose takes it as an attribute)"
    return None


@lowering("Transpose")
def _transpose(em: Emitter, op: Operation, ins: list) -> list:
    return [em.node("Transpose", [ins[0]], perm=_constant_ints(op, 1))]


def _gather_axes(op: Operation) -> tuple[int, int] | None:
    """GatherV2's (axis, batch_dims) made non-negative where needed; None when that needs
    a rank the static shapes do not give."""
    axis, batch_dims = _constant_int(op, 2), op.attrs["batch_dims"]
    rank, k = op.inputs[0].shape.rank, op.inputs[1].shape.rank
    if batch_dims < 0:
        if k is None:
            return None
        batch_dims += k
    if axis < 0:
        if rank is None:
            return None
        axis += rank
    return axis, batch_dims


@check("GatherV2")
def _check_gather(op: Operation, opset: int) -> str | None:
    if _constant_int(op, 2) is None:
        return "with an axis that is not a constant"
    plain = op.attrs["batch_dims"] == 0 and not op.outputs[0].dtype.is_string
    axes = _gather_axes(op)
    if not plain and (axes is None or (axes[0] != axes[1] and (
            op.inputs[0].shape.rank is None or op.inputs[1].shape.rank is None))):
        return "with batch_dims or strings and an unknown rank"
    return None


@lowering("GatherV2")
def _gather_v2(em: Emitter, op: Operation, ins: list) -> list:
    """Gather; with batch_dims (or strings, which onnxruntime's Gather loses) a GatherND
    of one-element tuples behind batch_dims, the axis moved there and back if need be."""
    indices = em.index(ins[1], op.inputs[1].dtype)
    if op.attrs["batch_dims"] == 0 and not op.outputs[0].dtype.is_string:
        return [em.node("Gather", [ins[0], indices], axis=_constant_int(op, 2))]
    axis, b = _gather_axes(op)
    tuples = em.node("Unsqueeze", [indices, em.const([-1], np.int64)])
    if axis == b:
        return [em.node("GatherND", [ins[0], tuples], batch_dims=b)]
    rank, k = op.inputs[0].shape.rank, op.inputs[1].shape.rank
    front = list(range(b)) + [axis] + [d for d in range(b, rank) if d != axis]
    rows = em.node("GatherND", [em.node("Transpose", [ins[0]], perm=front), tuples],
                   batch_dims=b)
    # rows: batch dims, indices' own dims, params' dims between batch and axis, the rest
    own, between = list(range(b, k)), list(range(k, k + axis - b))
    back = list(range(b)) + between + own + list(range(k + axis - b, k + rank - 1 - b))
    return [em.node("Transpose", [rows], perm=back)]


@check("StridedSlice")
def _check_strided_slice(op: Operation, opset: int) -> str | None:
    if any(_constant_ints(op, i) is None for i in (1, 2, 3)):
        return "with begin, end or strides that are not constants"
    if op.attrs["ellipsis_mask"] and op.inputs[0].shape.rank is None:
        return "with an ellipsis on an input of unknown rank"
    return None


@lowering("StridedSlice")
def _strided_slice(em: Emitter, op: Operation, ins: list) -> list:
    """One Slice over the sliced dims, Squeeze for the shrunk ones, Unsqueeze for the
    new axes. A masked begin/end becomes the far end of its direction (ONNX clamps)."""
    begin, end, strides = (_constant_ints(op, i) for i in (1, 2, 3))
    bit = lambda mask, i: bool(op.attrs[mask] >> i & 1)  # noqa: E731
    n = len(begin)
    ellipsis = [i for i in range(n) if bit("ellipsis_mask", i)][:1]
    new_axis = [bit("new_axis_mask", i) and i not in ellipsis for i in range(n)]
    consuming = sum(1 for i in range(n) if not new_axis[i] and i not in ellipsis)
    axes, starts, ends, steps, shrunk, new_positions = [], [], [], [], [], []
    dim = pos = 0  # the input dim and the output position the next entry takes
    for i in range(n):
        if i in ellipsis:
            covered = op.inputs[0].shape.rank - consuming
            dim, pos = dim + covered, pos + covered
        elif new_axis[i]:
            new_positions.append(pos)
            pos += 1
        elif bit("shrink_axis_mask", i):
            axes.append(dim)
            starts.append(begin[i])
            ends.append(INT64_MAX if begin[i] == -1 else begin[i] + 1)
            steps.append(1)
            shrunk.append(dim)
            dim += 1
        else:
            forward = strides[i] > 0
            axes.append(dim)
            starts.append((0 if forward else INT64_MAX) if bit("begin_mask", i) else begin[i])
            ends.append((INT64_MAX if forward else np.iinfo(np.int64).min)
                        if bit("end_mask", i) else end[i])
            steps.append(strides[i])
            dim, pos = dim + 1, pos + 1
    out = ins[0]
    if axes:
        out = em.node("Slice", [out] + [em.const(v, np.int64) for v in (starts, ends, axes, steps)])
    if shrunk:
        out = em.node("Squeeze", [out, em.const(shrunk, np.int64)])
    if new_positions:
        out = em.node("Unsqueeze", [out, em.const(new_positions, np.int64)])
    return [out if out != ins[0] else em.node("Identity", [out])]


# -- variables (frozen from a session) -----------------------------------------------------------
@lowering("VarHandleOp")
def _var_handle(em: Emitter, op: Operation, ins: list) -> list:
    return [None]  # its readers take the frozen value directly


@lowering("ReadVariableOp")
def _read_variable(em: Emitter, op: Operation, ins: list) -> list:
    return [em.const(em.frozen[op.inputs[0].op])]


@lowering("ResourceGather")
def _resource_gather(em: Emitter, op: Operation, ins: list) -> list:
    table = em.const(em.frozen[op.inputs[0].op])
    return [em.gather_rows(table, em.index(ins[1], op.inputs[1].dtype))]


# -- the scatter / gather / partition / stitch family --------------------------------------------
@check("ScatterNd", "TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub",
       "TensorScatterMin", "TensorScatterMax", "GatherNd")
def _check_indexing(op: Operation, opset: int) -> str | None:
    if op.type == "ScatterNd" and op.outputs[0].dtype.is_string:
        return "on strings (ONNX's ScatterND cannot concatenate duplicates)"
    return None


def _index_rows(em: Emitter, indices: str) -> tuple[str, str, str]:
    """indices [..., K] as int64 rows [n, K]; the row count n as a [1] value; K as [1]."""
    shape = em.node("Shape", [indices])
    depth = em.slice1(shape, -1)
    n = em.node("ReduceProd", [em.slice1(shape, 0, -1)], keepdims=1)
    rows = em.node("Reshape", [indices, em.node("Concat", [n, depth], axis=0)], allowzero=1)
    return rows, n, depth


def _update_rows(em: Emitter, indices: str, updates: str, n: str) -> str:
    """updates [..., slice] as [n, slice], n the number of index tuples."""
    n_lead = em.node("Sub", [em.node("Size", [em.node("Shape", [indices])]),
                             em.const(1, np.int64)])
    rest = em.slice1(em.node("Shape", [updates]),
                     em.node("Reshape", [n_lead, em.const([1], np.int64)]))
    return em.node("Reshape", [updates, em.node("Concat", [n, rest], axis=0)], allowzero=1)


def _valid_tuples(em: Emitter, tuples: str, bounds: str) -> str:
    """Per index tuple (the last dim of ``tuples``), whether 0 <= tuple < bounds."""
    ok = em.node("And", [em.node("GreaterOrEqual", [tuples, em.const(0, np.int64)]),
                         em.node("Less", [tuples, bounds])])
    bad = em.node("ReduceSum", [em.cast(em.node("Not", [ok]), int64),
                                em.const([-1], np.int64)], keepdims=0)
    return em.node("Equal", [bad, em.const(0, np.int64)])


def _scatter_indices(em: Emitter, op: Operation, indices: str, updates: str,
                     dims: str) -> tuple[str, str]:
    """The indices as int64, and the updates. A bad tuple (outside ``dims``) is dropped
    with its update under bad_indices_policy="IGNORE", as TensorFlow skips it; otherwise
    made out of bounds, so TensorFlow's error fails the ONNX run."""
    dtype = op.inputs[0 if op.type == "ScatterNd" else 1].dtype
    if op.attrs.get("bad_indices_policy", "") != "IGNORE":
        return em.index(indices, dtype), updates
    indices = em.i64(indices, dtype)
    rows, n, depth = _index_rows(em, indices)
    valid = _valid_tuples(em, rows, em.slice1(dims, 0, depth))
    return (em.node("Compress", [rows, valid], axis=0),
            em.node("Compress", [_update_rows(em, indices, updates, n), valid], axis=0))


def _scatter_reduce(em: Emitter, op: Operation, tensor: str, indices: str, updates: str,
                    reduction: str) -> str:
    dtype = op.outputs[0].dtype
    if reduction not in ("min", "max") or not dtype.is_floating:
        return em.node("ScatterND", [tensor, indices, updates], reduction=reduction)
    # TensorFlow's min/max: a NaN update never wins (made the identity, -inf for max),
    # a NaN already in the tensor stays (put back: backends differ on NaN operands)
    worst = em.scalar(dtype, -np.inf if reduction == "max" else np.inf)
    updates = em.node("Where", [em.node("IsNaN", [updates]), worst, updates])
    if dtype.as_numpy_dtype == np.float16:  # exact through float32; onnxruntime has no
        # float16 min/max ScatterND
        wide = em.node("ScatterND", [em.cast(tensor, float32), indices,
                                     em.cast(updates, float32)], reduction=reduction)
        out = em.cast(wide, dtype)
    else:
        out = em.node("ScatterND", [tensor, indices, updates], reduction=reduction)
    return em.node("Where", [em.node("IsNaN", [tensor]), tensor, out])


@lowering("ScatterNd")
def _scatter_nd(em: Emitter, op: Operation, ins: list) -> list:
    """zeros(shape) + updates at indices, duplicates summed (bools OR-ed, as max)."""
    shape = em.i64(ins[2], op.inputs[2].dtype)
    indices, updates = _scatter_indices(em, op, ins[0], ins[1], shape)
    dtype = op.outputs[0].dtype
    if dtype.is_bool:
        zeros = em.node("Expand", [em.scalar(_INT32, 0), shape])
        out = em.node("ScatterND", [zeros, indices, em.cast(updates, _INT32)], reduction="max")
        return [em.cast(out, dtype)]
    zeros = em.node("Expand", [em.scalar(dtype, 0), shape])
    return [em.node("ScatterND", [zeros, indices, updates], reduction="add")]


@lowering("TensorScatterAdd", "TensorScatterSub", "TensorScatterMin", "TensorScatterMax")
def _tensor_scatter_reduce(em: Emitter, op: Operation, ins: list) -> list:
    tensor = ins[0]
    indices, updates = _scatter_indices(em, op, ins[1], ins[2], em.node("Shape", [tensor]))
    kind = op.type[len("TensorScatter"):].lower()
    if kind == "sub":  # x - u1 - u2 == x + (-u1) + (-u2), also for -0.0 (Neg, not 0 - u)
        dtype = op.outputs[0].dtype
        updates = em.node("Sub", [em.scalar(dtype, 0), updates]) if dtype.is_unsigned \
            else em.node("Neg", [updates])
        kind = "add"
    return [_scatter_reduce(em, op, tensor, indices, updates, kind)]


def _last_writers(em: Emitter, slots_shape: str, rows: str, n: str,
                  scatter: str) -> tuple[str, str]:
    """For each slot (a tensor of ``slots_shape``), the position of the last row of
    ``rows`` that writes it, or -1 (positions 0..n-1 scattered with reduction max, by
    ``scatter``: ScatterND for index tuples, ScatterElements for plain ids); and the
    positions."""
    count = em.node("Squeeze", [n, em.const([0], np.int64)])
    positions = em.node("Range", [em.const(0, np.int64), count, em.const(1, np.int64)])
    nobody = em.node("Expand", [em.const(-1, np.int64), slots_shape])
    if scatter == "ScatterND":
        return em.node("ScatterND", [nobody, rows, positions], reduction="max"), positions
    return em.node("ScatterElements", [nobody, rows, positions], axis=0, reduction="max"), \
        positions


@lowering("TensorScatterUpdate")
def _tensor_scatter_update(em: Emitter, op: Operation, ins: list) -> list:
    """TensorFlow's last write wins: keep only each slot's last writer, then write those
    (no duplicates left, so ScatterND's undefined order no longer matters)."""
    tensor = ins[0]
    indices, updates = _scatter_indices(em, op, ins[1], ins[2], em.node("Shape", [tensor]))
    rows, n, depth = _index_rows(em, indices)
    upd_rows = _update_rows(em, indices, updates, n)
    slots_shape = em.slice1(em.node("Shape", [tensor]), 0, depth)
    winners, positions = _last_writers(em, slots_shape, rows, n, "ScatterND")
    wins = em.node("Equal", [em.node("GatherND", [winners, rows]), positions])
    return [em.node("ScatterND", [tensor, em.node("Compress", [rows, wins], axis=0),
                                  em.node("Compress", [upd_rows, wins], axis=0)])]


@lowering("GatherNd")
def _gather_nd(em: Emitter, op: Operation, ins: list) -> list:
    batch_dims = op.attrs["batch_dims"]
    shape = op.inputs[1].shape
    if batch_dims == 0 and shape.rank is not None and shape.dims[-1] == 0:
        # empty tuples: each names all of params (ONNX's reference GatherND fails on them)
        lead = em.slice1(em.node("Shape", [ins[1]]), 0, -1)
        params = em.node("Unsqueeze", [ins[0], em.const(list(range(shape.rank - 1)), np.int64)])
        return [em.node("Expand", [params, em.node("Concat", [lead, em.node("Shape", [ins[0]])],
                                                    axis=0)])]
    if op.attrs["bad_indices_policy"] != "IGNORE":
        indices = em.index(ins[1], op.inputs[1].dtype)
        return [em.node("GatherND", [ins[0], indices], batch_dims=batch_dims)]
    # IGNORE: a bad tuple gathers zeros (TensorFlow's): gather at 0 there, then mask
    indices = em.i64(ins[1], op.inputs[1].dtype)
    depth = em.slice1(em.node("Shape", [indices]), -1)
    start = em.const([batch_dims], np.int64)
    bounds = em.slice1(em.node("Shape", [ins[0]]), start, em.node("Add", [start, depth]))
    valid = _valid_tuples(em, indices, bounds)
    safe = em.node("Where", [em.node("Unsqueeze", [valid, em.const([-1], np.int64)]), indices,
                             em.const(0, np.int64)])
    gathered = em.node("GatherND", [ins[0], safe], batch_dims=batch_dims)
    # valid with a 1 for each slice dim, to broadcast over the gathered slices
    extra = em.node("Sub", [em.node("Size", [em.node("Shape", [gathered])]),
                            em.node("Size", [em.node("Shape", [valid])])])
    ones = em.node("Expand", [em.const([1], np.int64),
                              em.node("Reshape", [extra, em.const([1], np.int64)])])
    mask = em.node("Reshape", [valid, em.node("Concat", [em.node("Shape", [valid]), ones],
                                              axis=0)])
    dtype = op.outputs[0].dtype
    return [em.typed("Where", [mask, gathered, em.scalar(dtype, 0)], dtype, [1, 2])]


@lowering("DynamicPartition")
def _dynamic_partition(em: Emitter, op: Operation, ins: list) -> list:
    """Output i = the rows of data (partitions' dims flattened) whose id is i, in order."""
    ids, rows = em.flat_rows(ins[0], ins[1])
    num = op.attrs["num_partitions"]
    # an id outside [0, num) fails the run (TensorFlow's error) instead of dropping its row
    ids = em.node("Gather", [em.const(np.arange(num, dtype=np.int32)), em.index(ids, _INT32)])
    return [em.node("Compress", [rows, em.node("Equal", [ids, em.const(i, np.int32)])], axis=0)
            for i in range(num)]


@lowering("DynamicStitch", "ParallelDynamicStitch")
def _dynamic_stitch(em: Emitter, op: Operation, ins: list) -> list:
    """merged[indices[m][i]] = data[m][i], the later (m, i) winning; max(index) + 1 rows,
    zeros where no index points. Each slot's last writer w (or -1) is found with a
    max-scatter of positions; the result is rows w + 1 of [zero row; all data rows]."""
    n = len(ins) // 2
    flat_ids, flat_rows = [], []
    for indices, data in zip(ins[:n], ins[n:]):
        ids, rows = em.flat_rows(data, em.i64(indices, op.inputs[0].dtype))
        flat_ids.append(ids)
        flat_rows.append(rows)
    ids = flat_ids[0] if n == 1 else em.node("Concat", flat_ids, axis=0)
    rows = flat_rows[0] if n == 1 else em.node("Concat", flat_rows, axis=0)
    size = em.node("Add", [em.node("ReduceMax", [em.node("Concat", [ids, em.const([-1], np.int64)],
                                                         axis=0)], keepdims=1),
                           em.const([1], np.int64)])
    # a negative index fails the run (TensorFlow's error), as ONNX would count it from the end
    ids = em.node("Where", [em.node("Less", [ids, em.const(0, np.int64)]), size, ids])
    winners, _ = _last_writers(em, size, ids, em.node("Shape", [ids]), "ScatterElements")
    row_shape = em.node("Concat", [em.const([1], np.int64),
                                   em.slice1(em.node("Shape", [rows]), 1)], axis=0)
    zero_row = em.node("Expand", [em.scalar(op.outputs[0].dtype, 0), row_shape])
    table = em.node("Concat", [zero_row, rows], axis=0)
    return [em.gather_rows(table, em.node("Add", [winners, em.const(1, np.int64)]))]
