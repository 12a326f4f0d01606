"""``gf.nn``: neural-network helpers built from the operator set.

``embedding_lookup`` looks rows up in a table that may be split into shards
(variables or tensors), with TensorFlow 1.x's rules (``tf.compat.v1.nn.
embedding_lookup``). Over several shards it is the graph TensorFlow builds: the
flattened ids are assigned to shards (``"mod"`` or ``"div"``), DynamicPartition
splits them, one gather per shard runs **on that shard's device** (so a shard that
lives on another task is read there and only the rows travel), and a
ParallelDynamicStitch puts the rows back in the ids' order, reshaped to
``ids.shape + row shape``. The gradient w.r.t. each shard variable is an
IndexedSlices of only the rows looked up in it, so an optimizer updates each shard
in place, on its own device.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .builder import as_operand
from .convert import to_array
from .dtypes import as_dtype, int32, int64
from .errors import InvalidArgumentError, InvalidDTypeError, UnimplementedError
from .graph import Graph, Output
from .scope import Scope
from .shapes import TensorShape
from .variables import Variable

PARTITION_STRATEGIES = ("mod", "div")


def embedding_lookup(params: Any, ids: Any, partition_strategy: str = "mod",
                     name: str | None = None, validate_indices: bool = True,
                     max_norm: float | None = None, *, scope: Scope | None = None) -> Output:
    """Rows ``ids`` of the table ``params``: an Output of shape ``ids.shape + row shape``.

    ``params``: one table, or a list of shards of one dtype and one row shape (their
    first dims may differ): ``gf.Variable`` s, Outputs or arrays. With ``n`` shards,
    id ``i`` is row ``i // n`` of shard ``i % n`` (``"mod"``), or, with ``"div"``,
    the ids are dealt out in contiguous blocks where the first ``total % n`` shards
    hold one row more (``total``: the sum of the shards' first dims, from their
    static shapes where known, else read at run time). ``ids``: int32 or int64 of
    any shape, duplicates allowed; an id out of range is an InvalidArgumentError
    naming the node (the shard's gather, or with ``"div"`` the DynamicPartition).

    ``validate_indices`` is ignored, as in TensorFlow (ids are always checked).
    ``max_norm`` (clipping each row's l2-norm) is not implemented: it needs a Sqrt op.
    ``scope``: where the lookup's own ops go (name prefix, device, control
    dependencies); by default the graph's root scope on the ids' device. Each shard's
    gather always goes on that shard's device.
    """
    del validate_indices  # accepted for TensorFlow's signature; ids are always validated
    shards = _shards(params)
    _check_options(partition_strategy, max_norm, name)
    root = _root_scope(shards, ids, scope)
    tables = [_as_table(shard, k) for k, shard in enumerate(shards)]
    row_shape = _check_tables(tables)
    ids_value = _as_ids(ids)
    # every check passed: only now does the graph grow
    s = root.with_sub_scope(name or "embedding_lookup")
    ids = _add_constants(s, tables, ids_value)
    if len(tables) == 1:
        return s.identity(_gather(s, tables[0], ids), name="Identity")
    return _sharded_lookup(s, tables, ids, partition_strategy, row_shape)


def _check_options(partition_strategy: Any, max_norm: Any, name: Any) -> None:
    if not isinstance(partition_strategy, str):
        raise TypeError(f"embedding_lookup: partition_strategy must be a string, got "
                        f"{partition_strategy!r}")
    if partition_strategy not in PARTITION_STRATEGIES:
        raise InvalidArgumentError(
            f"embedding_lookup: unrecognized partition strategy '{partition_strategy}'; "
            f"must be one of {', '.join(repr(s) for s in PARTITION_STRATEGIES)}")
    if max_norm is not None:
        raise UnimplementedError(
            f"embedding_lookup: max_norm={max_norm!r} is not implemented (clipping rows to an "
            f"l2-norm needs a Sqrt op, which graphflow does not have yet); pass max_norm=None")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"embedding_lookup: name must be a string, got {name!r}")


def _add_constants(s: Scope, tables: list[_Table], ids_value: Any) -> Output:
    """Consts for the shards and ids given as plain values; the ids as an Output."""
    for k, table in enumerate(tables):
        if table.tensor is None and table.variable is None:
            table.tensor = s.constant(table.value, name=f"Params_{k}")
    return ids_value if isinstance(ids_value, Output) else s.constant(ids_value, name="Ids")


def _sharded_lookup(s: Scope, tables: list[_Table], ids: Output, partition_strategy: str,
                    row_shape: TensorShape) -> Output:
    """TensorFlow's graph over several shards: assign each id to a shard, partition, gather
    on each shard's device, stitch back in the ids' order and reshape."""
    flat_ids = s.reshape(ids, [-1], name="FlatIds")
    positions = s.range(0, s.size(flat_ids, out_type=int32), 1, name="Positions")
    if partition_strategy == "mod":
        shard_of, row_of = _mod_assignment(s, flat_ids, len(tables))
    else:
        shard_of, row_of = _div_assignment(s, flat_ids, tables)
    shard_of = s.cast(shard_of, int32, name="ShardOf")
    rows_per_shard = s.dynamic_partition(row_of, shard_of, num_partitions=len(tables),
                                         name="PartitionIds")
    positions_per_shard = s.dynamic_partition(positions, shard_of, num_partitions=len(tables),
                                              name="PartitionPositions")
    looked_up = [_gather(s, table, rows) for table, rows in zip(tables, rows_per_shard)]
    stitched = s.parallel_dynamic_stitch(positions_per_shard, looked_up, name="Stitch")
    return s.reshape(stitched, _result_shape(s, ids, tables, row_shape), name="Reshape")


# -- arguments --------------------------------------------------------------------------
class _Table:
    """One shard: a Variable (gathered with ResourceGather), a tensor (GatherNd), or a
    plain value that becomes a Const once every argument is checked."""

    __slots__ = ("device", "dtype", "label", "shape", "tensor", "value", "variable")

    def __init__(self, label: str, variable: Variable | None = None,
                 tensor: Output | None = None, value: np.ndarray | None = None):
        self.variable, self.tensor, self.value, self.label = variable, tensor, value, label
        if value is not None:
            self.device, self.dtype, self.shape = "", as_dtype(value.dtype), \
                TensorShape(value.shape)
            return
        source = variable if variable is not None else tensor
        self.device = variable.device if variable is not None else tensor.op.device
        self.dtype, self.shape = source.dtype, source.shape


def _shards(params: Any) -> list:
    if params is None:
        raise InvalidArgumentError("embedding_lookup: params must be specified")
    shards = list(params) if isinstance(params, (list, tuple)) else [params]
    if not shards:
        raise InvalidArgumentError("embedding_lookup: params is an empty list; it needs at "
                                   "least one shard")
    return shards


def _graph_of(value: Any) -> Graph | None:
    if isinstance(value, Variable):
        return value.graph
    out = as_operand(value)
    return out.graph if out is not None else None


def _root_scope(shards: Sequence, ids: Any, scope: Scope | None) -> Scope:
    """The scope of the lookup's own ops; every graph object in one graph."""
    if scope is not None and not isinstance(scope, Scope):
        raise TypeError(f"embedding_lookup: scope must be a gf.Scope, got {scope!r}")
    graphs = [(f"params[{k}]", _graph_of(p)) for k, p in enumerate(shards)]
    graphs.append(("ids", _graph_of(ids)))
    if scope is not None:
        graphs.insert(0, ("scope", scope.graph))
    known = [(what, g) for what, g in graphs if g is not None]
    if not known:
        raise InvalidArgumentError(
            "embedding_lookup: no graph to build in: params and ids are plain values; pass "
            "a gf.Variable or Output, or scope=")
    first_what, graph = known[0]
    for what, g in known[1:]:
        if g is not graph:
            raise InvalidArgumentError(f"embedding_lookup: {what} is from another graph "
                                       f"than {first_what}")
    if scope is not None:
        return scope
    ids_out = as_operand(ids)
    return Scope(graph).beside(ids_out if ids_out is not None else "")


def _as_table(shard: Any, k: int) -> _Table:
    label = f"params[{k}]"
    if isinstance(shard, Variable):
        return _Table(f"{label} (variable '{shard.name}')", variable=shard)
    out = as_operand(shard)
    if out is not None:
        return _Table(f"{label} ('{out.name}')", tensor=out)
    return _Table(label, value=_as_array(shard, label))


def _as_array(value: Any, what: str) -> np.ndarray:
    try:
        return to_array(value)
    except (TypeError, ValueError) as e:
        raise InvalidDTypeError(f"embedding_lookup: {what} does not convert to a tensor: "
                                f"{e}") from None


def _check_tables(tables: list[_Table]) -> TensorShape:
    """The shards' (merged) row shape, after checking they share one dtype; build-time
    errors otherwise."""
    first = tables[0]
    for t in tables:
        if t.dtype != first.dtype:
            raise InvalidDTypeError(
                f"embedding_lookup: every shard must have one dtype, but {first.label} is "
                f"{first.dtype.name} and {t.label} is {t.dtype.name}")
        if t.shape.rank == 0:
            raise InvalidArgumentError(
                f"embedding_lookup: {t.label} is a scalar; a shard must be at least 1-D")
    row_shape = TensorShape(None)
    for t in tables:
        rows = t.shape[1:] if t.shape.rank is not None else TensorShape(None)
        try:
            row_shape = row_shape.merge_with(rows)
        except ValueError:
            raise InvalidArgumentError(
                f"embedding_lookup: every shard must have one row shape, but {t.label} has "
                f"rows of shape {rows} where the shards before it have {row_shape}") from None
    return row_shape


def _as_ids(ids: Any) -> Output | np.ndarray:
    """The ids as given (an Output) or as an array, checked to be int32 or int64."""
    out = as_operand(ids)
    value = out if out is not None else _as_array(ids, "ids")
    dtype = out.dtype if out is not None else as_dtype(value.dtype)
    if dtype not in (int32, int64):
        what = f"ids '{out.name}'" if out is not None else "ids"
        raise InvalidDTypeError(f"embedding_lookup: {what} must be int32 or int64, got "
                                f"{dtype.name}")
    return value


# -- the graph ----------------------------------------------------------------------------
def _gather(s: Scope, table: _Table, rows: Output) -> Output:
    """Rows ``rows`` (any shape) of one shard, gathered on the shard's device."""
    on_shard = s.beside(table)
    if table.variable is not None:
        v = table.variable
        return on_shard.resource_gather(v.handle, rows, dtype=v.dtype, name="Gather")
    return on_shard.gather_nd(table.tensor, on_shard.expand_dims(rows, -1, name="GatherRows"),
                              name="Gather")


def _mod_assignment(s: Scope, flat_ids: Output, n: int) -> tuple[Output, Output]:
    """id -> (id % n, id // n)."""
    count = s.constant(n, dtype=flat_ids.dtype, name="NumShards")
    return s.floor_mod(flat_ids, count, name="ShardOfId"), \
        s.floor_div(flat_ids, count, name="RowOfId")


def _div_assignment(s: Scope, flat_ids: Output, tables: list[_Table]) -> tuple[Output, Output]:
    """TensorFlow's contiguous blocks: shard p < extras holds ``per + 1`` rows, the
    others ``per`` (``per = total // n``, ``extras = total % n``)."""
    dtype, n = flat_ids.dtype, len(tables)
    total = _total_rows(s, tables, dtype)
    count = s.constant(n, dtype=dtype, name="NumShards")
    per = s.floor_div(total, count, name="IdsPerShard")
    extras = s.floor_mod(total, count, name="Extras")
    per_plus_one = s.add(per, s.constant(1, dtype=dtype, name="One"), name="IdsPerBigShard")
    past_extras = s.sub(flat_ids, extras, name="IdsPastExtras")
    shard_of = s.maximum(s.floor_div(flat_ids, per_plus_one, name="ShardIfBig"),
                         s.floor_div(past_extras, per, name="ShardIfSmall"), name="ShardOfId")
    row_of = s.select_v2(s.less(shard_of, extras, name="IsBigShard"),
                         s.floor_mod(flat_ids, per_plus_one, name="RowIfBig"),
                         s.floor_mod(past_extras, per, name="RowIfSmall"), name="RowOfId")
    return shard_of, row_of


def _total_rows(s: Scope, tables: list[_Table], dtype) -> Output:
    """The sum of the shards' first dims: a constant when all are static (as TF,
    only when that sum is non-zero), else the static ones plus Shape reads made on
    the shards' own devices."""
    dims = [t.shape.as_list()[0] if t.shape.rank is not None else None for t in tables]
    if None not in dims and sum(dims):
        return s.constant(sum(dims), dtype=dtype, name="TotalRows")
    parts = []
    for t, d in zip(tables, dims):
        if d is not None:
            parts.append(s.constant([d], dtype=dtype, name="ShardRows"))
            continue
        on_shard = s.beside(t)
        shape = on_shard.shape(t.tensor, out_type=dtype, name="ShardShape")
        parts.append(on_shard.slice(shape, [0], [1], name="ShardRows"))
    stacked = s.concat(parts, 0, name="AllShardRows")
    return s.reduce_sum(stacked, name="TotalRows")


def _result_shape(s: Scope, ids: Output, tables: list[_Table], row_shape: TensorShape):
    """ids.shape + row shape: a constant when both are static, else built so that the
    result's static shape keeps every dim known here (TF's set_shape); row dims not
    known here are read from the first shard at run time, on its device."""
    if ids.shape.is_fully_defined() and row_shape.is_fully_defined():
        return ids.shape.as_list() + row_shape.as_list()
    first = tables[0]  # if a row dim is unknown, a tensor: a variable's shape is static
    on_shard = s.beside(first)
    parts = [s.shape(ids, name="IdsShape")]
    if row_shape.rank is None:
        parts.append(on_shard.slice(on_shard.shape(first.tensor, name="FirstShardShape"), [1],
                                    [-1], name="RowShape"))
    for i, dim in enumerate(row_shape.as_list() if row_shape.rank is not None else []):
        if dim is not None:
            parts.append(s.constant([dim], dtype=int32, name="RowDim"))
        else:
            parts.append(on_shard.slice(on_shard.shape(first.tensor, name="FirstShardShape"),
                                        [i + 1], [1], name="RowDim"))
    if len(parts) == 1:  # rows are scalars
        return parts[0]
    return s.concat(parts, 0, name="ResultShape")


__all__ = ["embedding_lookup"]


# -- the nn functions models are made of (ops/nn_ops.py, ops/dense_math_ops.py) -------------
def _scope_of(*values: Any) -> Scope:
    """The Scope an nn function builds in: that of its first graph operand."""
    from .builder import as_operand
    from .operators import scope_of
    for value in values:
        out = as_operand(value)
        if out is not None:
            return scope_of(out)
    raise InvalidArgumentError("gf.nn functions need at least one graph Output among their "
                               "arguments (or build with scope.<function>(...))")


def _delegate(method: str, doc: str, *operands: str):
    """``gf.nn.<method>(...)``: ``scope.<method>(...)`` in its operands' scope."""
    def function(*args, **kwargs):
        named = [kwargs.get(k) for k in operands]
        return getattr(_scope_of(*args, *named), method)(*args, **kwargs)
    function.__name__ = function.__qualname__ = method
    function.__doc__ = doc
    return function


softmax = _delegate("softmax", "``tf.nn.softmax(logits, axis=-1)``.", "logits")
log_softmax = _delegate("log_softmax", "``tf.nn.log_softmax(logits, axis=-1)``.", "logits")
softmax_cross_entropy_with_logits = _delegate(
    "softmax_cross_entropy_with_logits",
    "``tf.nn.softmax_cross_entropy_with_logits(labels, logits, axis=-1)``: the loss per row.",
    "labels", "logits")
sparse_softmax_cross_entropy_with_logits = _delegate(
    "sparse_softmax_cross_entropy_with_logits",
    "``tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)``: the loss per row.",
    "labels", "logits")
sigmoid_cross_entropy_with_logits = _delegate(
    "sigmoid_cross_entropy_with_logits",
    "``tf.nn.sigmoid_cross_entropy_with_logits(labels, logits)``.", "labels", "logits")
l2_loss = _delegate("l2_loss", "``tf.nn.l2_loss(t)``: sum(t ** 2) / 2.", "t")
bias_add = _delegate("bias_add", "``tf.nn.bias_add(value, bias, data_format=None)``.",
                     "value", "bias")
leaky_relu = _delegate("leaky_relu", "``tf.nn.leaky_relu(features, alpha=0.2)``.", "features")
relu = _delegate("relu", "``tf.nn.relu(features)``.", "features")
relu6 = _delegate("relu6", "``tf.nn.relu6(features)``.", "features")
elu = _delegate("elu", "``tf.nn.elu(features)``.", "features")
selu = _delegate("selu", "``tf.nn.selu(features)``.", "features")
softplus = _delegate("softplus", "``tf.nn.softplus(features)``.", "features")
softsign = _delegate("softsign", "``tf.nn.softsign(features)``.", "features")
sigmoid = _delegate("sigmoid", "``tf.nn.sigmoid(x)``.", "x")
tanh = _delegate("tanh", "``tf.nn.tanh(x)``.", "x")
