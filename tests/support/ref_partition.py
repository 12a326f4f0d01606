"""Plain Python-loop references for DynamicPartition and DynamicStitch, written
straight from TensorFlow's definitions, to check the vectorised kernels against."""
from __future__ import annotations

import numpy as np


def ref_dynamic_partition(data, partitions, num_partitions: int) -> list[np.ndarray]:
    """outputs[i] = [data[j] for j in ndindex(partitions.shape) if partitions[j] == i]."""
    data, partitions = np.asarray(data), np.asarray(partitions)
    slice_shape = data.shape[partitions.ndim:]
    outputs = [[] for _ in range(num_partitions)]
    for j in np.ndindex(*partitions.shape):
        p = int(partitions[j])
        if not 0 <= p < num_partitions:
            raise ValueError(f"partitions{list(j)} = {p} is not in [0, {num_partitions})")
        outputs[p].append(data[j])
    result = []
    for rows in outputs:
        out = np.empty((len(rows),) + slice_shape, dtype=data.dtype)
        for r, row in enumerate(rows):
            out[r] = row
        result.append(out)
    return result


def ref_dynamic_stitch(indices, data) -> np.ndarray:
    """merged[indices[m][pos]] = data[m][pos] for m in order, pos in row-major order."""
    indices = [np.asarray(i) for i in indices]
    data = [np.asarray(d) for d in data]
    slice_shape = data[0].shape[indices[0].ndim:]
    first = 0
    for idx in indices:
        for pos in np.ndindex(*idx.shape):
            first = max(first, int(idx[pos]) + 1)
    dtype = data[0].dtype
    merged = np.empty((first,) + slice_shape, dtype=dtype)
    for row in range(first):
        merged[row] = b"" if dtype == object else np.zeros(slice_shape, dtype)
    for idx, values in zip(indices, data):
        for pos in np.ndindex(*idx.shape):
            if int(idx[pos]) < 0:
                raise ValueError(f"negative index {int(idx[pos])}")
            merged[int(idx[pos])] = values[pos]
    return merged
