"""Hypothesis strategies for random graphs of the whole operator set.

:func:`graph_specs` grows a graph one op at a time. Each op takes existing outputs
or fresh leaves as inputs; the reference value of every node is computed as the
graph grows, so that the next op can fit its shapes and indices to the values it
reads (index tuples mostly in range, updates of the right shape), and then break
them on purpose now and then: duplicate, negative and out-of-bound indices,
mismatched shapes, bad partition ids. Leaves are constants (errors found at build
time) or placeholders whose static shape hides some dims or the rank (errors
found at run time). Every draw shrinks towards the simple, valid case.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
from hypothesis import strategies as st

import graphflow as gf

from .reference import Undefined
from .spec import GraphSpec, Node, Ref, evaluate, evaluate_node

STRING = np.dtype(object)
FLOATS = [np.dtype(t) for t in (np.float32, np.float64, np.float16)]
SIGNED_INTS = [np.dtype(t) for t in (np.int32, np.int64, np.int8, np.int16)]
UNSIGNED_INTS = [np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64)]
COMPLEX = [np.dtype(np.complex64), np.dtype(np.complex128)]
BOOL = np.dtype(np.bool_)

REAL = FLOATS + SIGNED_INTS + UNSIGNED_INTS
NUMBER = REAL + COMPLEX
SIGNED = FLOATS + SIGNED_INTS + COMPLEX          # Neg
#: Mul: numpy's complex product depends on the loop (SIMD with FMA or not), and
#: TensorFlow's on Eigen's: not bit-exact, so complex numbers are left out.
MULTIPLIABLE = REAL
ANY = NUMBER + [BOOL, STRING]
ADDABLE = NUMBER + [STRING]                       # Add concatenates strings

#: The kernels' dtypes (docs/ops.md): TensorScatterAdd/Sub take numbers,
#: TensorScatterMin/Max real numbers, everything else any dtype.
TENSOR_SCATTER_TYPES = {"TensorScatterUpdate": ANY, "TensorScatterAdd": NUMBER,
                        "TensorScatterSub": NUMBER, "TensorScatterMin": REAL,
                        "TensorScatterMax": REAL}
POLICIES = ["", "IGNORE", "ERROR", "DEFAULT"]

#: Stop adding ops once the graph has this many nodes (an op adds up to ~15).
SOFT_NODE_LIMIT = 20
#: Existing outputs larger than this are not reused as inputs (keeps loops fast).
MAX_REUSED_ELEMENTS = 64


def _elements(dtype: np.dtype) -> st.SearchStrategy:
    """Element values of ``dtype``: half of the draws plain values (zeros of both signs
    often, so that ties and duplicates happen), half edge cases (NaN, infinities,
    extremes, a subnormal, odd bytes). Shrinks to the first plain value."""
    if dtype == STRING:
        plain, edge = [b"a", b"", b"bc"], [b"\xff\x00", b"a\x00"]
    elif dtype == BOOL:
        plain, edge = [False, True], [True]
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        plain = [0, 1, 2] + ([-1] if dtype.kind == "i" else [])
        edge = [7, int(info.max)] + ([int(info.min)] if dtype.kind == "i" else [])
    else:
        info = np.finfo(dtype.type(0).real.dtype)
        plain, edge = [0.0, 1.0, -0.0, 2.0], [math.nan, math.inf, -math.inf, -1.5,
                                               float(info.max), float(info.smallest_subnormal)]
    return st.one_of(st.sampled_from(plain), st.sampled_from(edge))


class GraphDrawer:
    """Grows one GraphSpec with hypothesis draws, keeping every node's reference outcome
    (on a GPU, with ``gpu``: later ops then read what a bad index gives there)."""

    def __init__(self, draw: Callable, gpu: bool = False):
        self.draw = draw
        self.gpu = gpu
        self.nodes: list[Node] = []
        self.outcomes: dict = {}

    # -- basics ------------------------------------------------------------------------
    def chance(self, one_in: int) -> bool:
        """True about once in ``one_in`` draws; shrinks to False."""
        return self.draw(st.integers(1, one_in)) == one_in

    def add(self, node: Node) -> list[Ref]:
        self.nodes.append(node)
        k = len(self.nodes) - 1
        evaluate_node(self.nodes, self.outcomes, k, self.gpu)
        return [Ref(k, i) for i in range(node.num_outputs)]

    def op(self, op_type: str, inputs: Sequence, num_outputs: int = 1, **attrs) -> list[Ref]:
        return self.add(Node(op_type, tuple(inputs), attrs, num_outputs=num_outputs))

    def value(self, ref: Ref) -> np.ndarray | None:
        """The reference value of ``ref``, None if the reference rejects it."""
        v = self.outcomes[ref]
        return v if isinstance(v, np.ndarray) else None

    def shape(self, min_rank: int, max_rank: int) -> tuple:
        rank = self.draw(st.integers(min_rank, max_rank))
        return tuple(self.draw(st.sampled_from([1, 2, 3, 0, 4])) for _ in range(rank))

    def array(self, dtype: np.dtype, shape: tuple) -> np.ndarray:
        elements = _elements(dtype)
        n = math.prod(shape)
        if dtype.kind == "c":
            parts = [self.draw(elements) for _ in range(2 * n)]
            items = [complex(parts[2 * i], parts[2 * i + 1]) for i in range(n)]
        else:
            items = [self.draw(elements) for _ in range(n)]
        out = np.empty(n, dtype)
        out[:] = items
        return out.reshape(shape)

    def leaf(self, value: np.ndarray, const_only: bool = False) -> Ref:
        """A Const, or a Placeholder fed ``value`` whose static shape is exact, partly
        unknown or of unknown rank; sometimes behind an Identity."""
        mode = "const" if const_only else self.draw(
            st.sampled_from(["const", "exact", "partial", "unknown rank"]))
        if mode == "const":
            (ref,) = self.add(Node("Const", value=value))
        else:
            static = None if mode == "unknown rank" else [
                d if mode == "exact" or self.draw(st.booleans()) else None for d in value.shape]
            (ref,) = self.add(Node("Placeholder", value=value, static_shape=static))
        if not const_only and self.chance(8):
            (ref,) = self.op("Identity", [ref])
        return ref

    def existing(self, accept: Callable[[np.ndarray], bool]) -> list[Ref]:
        """Outputs with a value that ``accept``s, the latest first (long chains of ops
        are where buffers get forwarded)."""
        return [r for r, v in reversed(self.outcomes.items()) if isinstance(v, np.ndarray)
                and v.size <= MAX_REUSED_ELEMENTS and accept(v)]

    def reuse_or(self, candidates: list[Ref], fresh: Callable[[], Ref]) -> Ref:
        if candidates and self.draw(st.booleans()):
            return self.draw(st.sampled_from(candidates))
        return fresh()

    def tensor(self, dtypes: list, min_rank: int = 0, max_rank: int = 3) -> Ref:
        """An existing output, or a fresh leaf, of one of ``dtypes``."""
        def fresh() -> Ref:
            dtype = self.draw(st.sampled_from(dtypes))
            return self.leaf(self.array(dtype, self.shape(min_rank, max_rank)))
        return self.reuse_or(self.existing(lambda v: v.dtype in dtypes
                                           and min_rank <= v.ndim <= max_rank), fresh)

    def tensor_of(self, dtype: np.dtype, shape: tuple) -> Ref:
        """An existing output, or a fresh leaf, of exactly this dtype and shape."""
        return self.reuse_or(self.existing(lambda v: v.dtype == dtype and v.shape == shape),
                             lambda: self.leaf(self.array(dtype, shape)))

    def mutated(self, shape: Sequence[int]) -> tuple:
        """``shape`` made wrong: one dim changed, or a dim added or dropped."""
        shape = list(shape)
        how = self.draw(st.sampled_from(["change", "add", "drop"]))
        if how == "change" and shape:
            i = self.draw(st.integers(0, len(shape) - 1))
            shape[i] = self.draw(st.sampled_from([d for d in (0, 1, 2, 5) if d != shape[i]]))
        elif how == "drop" and shape:
            shape.pop(self.draw(st.integers(0, len(shape) - 1)))
        else:
            shape.insert(self.draw(st.integers(0, len(shape))), 2)
        return tuple(shape)

    def indices(self, outer: tuple, dims: Sequence[int], dtype) -> Ref:
        """Index tuples of shape ``outer + (len(dims),)`` into ``dims``: in range,
        crowded into a few duplicates, or partly negative or past the end."""
        mode = self.draw(st.sampled_from(["in range", "duplicates", "bad"]))
        n = math.prod(outer)
        out = np.zeros((n, len(dims)), dtype)
        for c, d in enumerate(dims):
            lo, hi = 0, max(d - 1, 0)
            if mode == "duplicates":
                hi = min(hi, 1)
            elif mode == "bad":
                lo, hi = -2, d + 1
            for i in range(n):
                out[i, c] = self.draw(st.integers(lo, hi))
        return self.leaf(out.reshape(outer + (len(dims),)))

    def policy(self) -> str:
        return self.draw(st.sampled_from(POLICIES))

    # -- the ops ---------------------------------------------------------------------------
    def scatter_nd(self) -> None:
        updates = self.tensor(ANY, min_rank=1)
        u = self.value(updates)
        outer_rank = self.draw(st.integers(1, min(u.ndim, 2)))
        outer, inner = u.shape[:outer_rank], u.shape[outer_rank:]
        prefix = self.shape(1, 3)
        index_type = self.draw(st.sampled_from([np.int32, np.int64]))
        indices = self.indices(outer, prefix, index_type)
        dims = prefix + inner
        if self.chance(8):
            dims = self.mutated(dims)
        if self.chance(16):
            dims = dims[:-1] + (self.draw(st.sampled_from([-1, -2])),)
        shape = self.leaf(np.array(dims, index_type))
        self.op("ScatterNd", [indices, updates, shape], bad_indices_policy=self.policy())

    def tensor_scatter(self, op_type: str) -> None:
        tensor = self.tensor(TENSOR_SCATTER_TYPES[op_type], min_rank=1)
        t = self.value(tensor)
        depth = self.draw(st.integers(1, t.ndim))
        if self.chance(16):
            depth = t.ndim + 1
        outer = self.shape(1, 2)
        index_type = self.draw(st.sampled_from([np.int32, np.int64]))
        indices = self.indices(outer, (t.shape + (2,))[:depth], index_type)
        updates_shape = outer + t.shape[depth:]
        if self.chance(8):
            updates_shape = self.mutated(updates_shape)
        updates = self.tensor_of(t.dtype, updates_shape)
        self.op(op_type, [tensor, indices, updates], bad_indices_policy=self.policy())

    def gather_nd(self) -> None:
        params = self.tensor(ANY, min_rank=1)
        p = self.value(params)
        b = self.draw(st.integers(0, min(2, p.ndim - 1)))
        depth = self.draw(st.integers(0, p.ndim - b))
        batch = p.shape[:b]
        if b and self.chance(6):  # only the element count of the batch dims must agree
            batch = batch[::-1] if self.draw(st.booleans()) else self.mutated(batch)
        inner = self.shape(0, 2)
        index_type = self.draw(st.sampled_from([np.int32, np.int64, np.int16]))
        indices = self.indices(batch + inner, p.shape[b:b + depth], index_type)
        if self.chance(16):
            b = p.ndim
        self.op("GatherNd", [params, indices], batch_dims=b, bad_indices_policy=self.policy())

    def partition_ids(self, shape: tuple, k: int) -> Ref:
        """int32 ids in [0, k) (sometimes not), or Cast(bool mask) for k >= 2."""
        if k >= 2 and self.draw(st.booleans()):
            mask = self.leaf(self.array(BOOL, shape))
            return self.op("Cast", [mask], DstT=gf.int32)[0]
        hi, lo = (k, -1) if self.chance(6) else (k - 1, 0)
        ids = np.array([self.draw(st.integers(lo, hi)) for _ in range(math.prod(shape))],
                       np.int32).reshape(shape)
        return self.leaf(ids)

    def dynamic_partition(self) -> None:
        data = self.tensor(ANY)
        d = self.value(data)
        shape = d.shape[:self.draw(st.integers(0, min(d.ndim, 2)))]
        if self.chance(8):
            shape = self.mutated(shape)
        k = self.draw(st.integers(1, 4))
        ids = self.partition_ids(shape, k)
        self.op("DynamicPartition", [data, ids], num_outputs=k, num_partitions=k)

    def stitch(self, op_type: str) -> None:
        first = self.tensor(ANY)
        d0 = self.value(first)
        rank0 = self.draw(st.integers(0, min(d0.ndim, 2)))
        slice_shape = d0.shape[rank0:]
        data, index_shapes = [first], [d0.shape[:rank0]]
        for _ in range(self.draw(st.integers(0, 2))):
            fits = self.existing(lambda v: v.dtype == d0.dtype and v.ndim >= len(slice_shape)
                                 and v.ndim - len(slice_shape) <= 2
                                 and v.shape[v.ndim - len(slice_shape):] == slice_shape)
            ref = self.reuse_or(fits, lambda: self.leaf(
                self.array(d0.dtype, self.shape(0, 2) + slice_shape)))
            data.append(ref)
            index_shapes.append(self.value(ref).shape[:self.value(ref).ndim - len(slice_shape)])
        if self.chance(8):
            m = self.draw(st.integers(0, len(data) - 1))
            index_shapes[m] = self.mutated(index_shapes[m])
        mode = self.draw(st.sampled_from(["in range", "duplicates", "bad"]))
        lo, hi = {"in range": (0, 5), "duplicates": (0, 1), "bad": (-2, 5)}[mode]
        indices = [self.leaf(np.array([self.draw(st.integers(lo, hi))
                                       for _ in range(math.prod(s))], np.int32).reshape(s))
                   for s in index_shapes]
        self.op(op_type, [tuple(indices), tuple(data)])

    def pipeline(self) -> None:
        """The pattern the optimizer fuses: partition x and range(size(x)) by the same
        ids, element-wise ops with scalars on each part, stitch back."""
        x = self.tensor(ADDABLE, min_rank=1, max_rank=1)
        v = self.value(x)
        k = self.draw(st.integers(1, 3))
        ids = self.partition_ids(v.shape, k)
        start, delta = (self.leaf(np.array(c, np.int32), const_only=True) for c in (0, 1))
        rows = self.op("Range", [start, self.op("Size", [x])[0], delta])[0]
        row_parts = self.op("DynamicPartition", [rows, ids], num_outputs=k, num_partitions=k)
        parts = self.op("DynamicPartition", [x, ids], num_outputs=k, num_partitions=k)
        steps = ["Identity", "Add"] + (["Sub"] if v.dtype in NUMBER else []) + \
            (["Mul"] if v.dtype in MULTIPLIABLE else []) + (["Neg"] if v.dtype in SIGNED else [])
        for j, part in enumerate(parts):
            for _ in range(self.draw(st.integers(0, 2))):
                step = self.draw(st.sampled_from(steps))
                if step in ("Identity", "Neg"):
                    part = self.op(step, [part])[0]
                else:
                    scalar = self.leaf(self.array(v.dtype, ()))
                    pair = [part, scalar] if self.draw(st.booleans()) else [scalar, part]
                    part = self.op(step, pair)[0]
            parts[j] = part
        order = self.draw(st.permutations(range(k)))
        stitch = self.draw(st.sampled_from(["DynamicStitch", "ParallelDynamicStitch"]))
        self.op(stitch, [tuple(row_parts[j] for j in order), tuple(parts[j] for j in order)])

    def elementwise(self) -> None:
        """Identity, Neg, Add, Sub or Mul; the second operand broadcasts (or not)."""
        op_type = self.draw(st.sampled_from(["Add", "Identity", "Sub", "Mul", "Neg"]))
        if op_type in ("Identity", "Neg"):
            self.op(op_type, [self.tensor(ANY if op_type == "Identity" else SIGNED)])
            return
        x = self.tensor({"Add": ADDABLE, "Sub": NUMBER, "Mul": MULTIPLIABLE}[op_type])
        v = self.value(x)
        shape = v.shape[self.draw(st.integers(0, v.ndim)):]
        shape = tuple(1 if self.draw(st.booleans()) else d for d in shape)
        if self.chance(8):
            shape = self.mutated(shape)
        y = self.tensor_of(v.dtype, shape)
        self.op(op_type, [x, y] if self.draw(st.booleans()) else [y, x])

    def cast(self) -> None:
        x = self.tensor([t for t in ANY if t != STRING])
        v = self.value(x)
        targets = [t for t in ANY if t != STRING and _cast_is_defined(v, t)]
        self.op("Cast", [x], DstT=gf.as_dtype(self.draw(st.sampled_from(targets))))


def _cast_is_defined(value: np.ndarray, dst: np.dtype) -> bool:
    """Whether C++'s static_cast (TensorFlow's Cast) is defined for every element and
    rounds once: no NaN, infinity or out-of-range float to an integer, and float16
    only from types that float32 holds exactly (Eigen converts through float)."""
    src = value.dtype
    if dst == np.float16 and src not in (BOOL, np.int8, np.uint8, np.int16, np.uint16,
                                         np.float16, np.float32, np.complex64):
        return False
    if dst.kind in "iu" and src.kind in "fc":
        real = value.real
        if not np.isfinite(real).all():
            return False
        info = np.iinfo(dst)
        return all(info.min <= math.trunc(float(r)) <= info.max for r in real.reshape(-1))
    return True


OP_KINDS = ["ScatterNd", "TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub",
            "TensorScatterMin", "TensorScatterMax", "GatherNd", "DynamicPartition",
            "DynamicStitch", "ParallelDynamicStitch", "pipeline", "elementwise", "Cast"]


def _add_op(g: GraphDrawer, kind: str) -> None:
    if kind == "ScatterNd":
        g.scatter_nd()
    elif kind.startswith("TensorScatter"):
        g.tensor_scatter(kind)
    elif kind == "GatherNd":
        g.gather_nd()
    elif kind == "DynamicPartition":
        g.dynamic_partition()
    elif kind.endswith("DynamicStitch"):
        g.stitch(kind)
    elif kind == "pipeline":
        g.pipeline()
    elif kind == "elementwise":
        g.elementwise()
    else:
        g.cast()


def _fetches(g: GraphDrawer) -> list[Ref]:
    """About half of the ops' outputs that have values (many pinned buffers, so that
    one written in place by mistake is seen), and now and then one the reference
    rejects; never none."""
    refs = [r for r in g.outcomes if g.nodes[r.node].op not in ("Const", "Placeholder")]
    good = [r for r in refs if g.value(r) is not None]
    bad = [r for r in refs if g.value(r) is None]
    fetches = [r for r in good if g.draw(st.booleans())]
    if bad and (not fetches or g.chance(3)):
        fetches.append(g.draw(st.sampled_from(bad)))
    return fetches or [refs[-1]]


@st.composite
def graph_specs(draw: Callable, max_ops: int = 8, gpu: bool = False) -> GraphSpec:
    """A random graph of 1 to ``max_ops`` ops (plus their leaves) and what to fetch;
    ``gpu``: drawn for a graph built on "/gpu:0"."""
    g = GraphDrawer(draw, gpu)
    for _ in range(draw(st.integers(1, max_ops))):
        if len(g.nodes) >= SOFT_NODE_LIMIT:
            break
        _add_op(g, draw(st.sampled_from(OP_KINDS)))
    fetches = _fetches(g)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    fed = {r: _shuffled(rng, g.value(r)) for r in g.outcomes if g.value(r) is not None
           and g.nodes[r.node].op not in ("Const", "Placeholder") and g.chance(8)}
    second = {k: _second_feed(g, rng, n) for k, n in enumerate(g.nodes) if n.op == "Placeholder"}
    spec = GraphSpec(g.nodes, fetches, fed, second)
    if not _defined(spec, gpu):  # the shuffled values met a Cast (of NaN to int, ...)
        spec = GraphSpec(g.nodes, fetches, {}, {k: n.value.copy() for k, n in
                                                enumerate(g.nodes) if n.op == "Placeholder"})
    return spec


def _defined(spec: GraphSpec, gpu: bool = False) -> bool:
    """Whether the reference defines every value for both feeds, with and without the
    fed outputs (the first feeds alone are defined: the drawer checked them)."""
    second = spec.with_second_feeds()
    try:
        for s in (spec, second, GraphSpec(second.nodes, second.fetches)):
            evaluate(s, gpu)
    except Undefined:
        return False
    return True


def _shuffled(rng: np.random.Generator, value: np.ndarray) -> np.ndarray:
    """The elements of ``value`` in another order (same shape, dtype, values)."""
    return rng.permutation(value.reshape(-1)).reshape(value.shape)


def _second_feed(g: GraphDrawer, rng: np.random.Generator, node: Node) -> np.ndarray:
    """The placeholder's feed shuffled, or (half the time) its values in a new shape
    that the static shape allows: the dims it leaves unknown drawn again, so that a
    kernel's cached shape checks must be redone (and now often fail)."""
    value = node.value
    if value.size == 0 or g.draw(st.booleans()):
        return _shuffled(rng, value)
    static = node.static_shape or [None] * value.ndim
    shape = tuple(d if d is not None else g.draw(st.sampled_from([1, 2, 3, 0, 4]))
                  for d in static)
    return _shuffled(rng, np.resize(value, shape))
