"""Checkpoints of variables that live on a cluster's workers: saved through one run,
restored through one (all-or-none) run, and the file is the one a local Session reads."""
import uuid

import numpy as np
import pytest

import graphflow as gf

pytest.importorskip("distributed")


def test_cluster_variables_save_and_restore(dask_client, tmp_path):
    tag = uuid.uuid4().hex[:8]  # worker variables are shared by name across tests
    scope = gf.Scope(gf.Graph())
    shards = [scope.with_device(f"/job:worker/task:{k}").variable(
        np.arange(6.0).reshape(3, 2) + 10 * k, name=f"ckpt_{tag}_{k}") for k in range(2)]
    bump = [s.scatter_nd_add([[1]], [[100.0, 100.0]], read_value=False) for s in shards]
    config = gf.SessionConfig(cluster=dask_client)
    with gf.Session(scope.graph, config) as sess:
        sess.run(gf.global_variables_initializer(scope.graph))
        sess.run(bump)
        saved = sess.run(shards)
        path = gf.train.Saver().save(sess, tmp_path / "sharded.ckpt")
        sess.run(gf.global_variables_initializer(scope.graph))  # back to the start
        gf.train.Saver().restore(sess, path)
        for got, want in zip(sess.run(shards), saved):
            np.testing.assert_array_equal(got, want)
    rebuilt = gf.Scope(gf.Graph())  # the same names in one process: the file restores there
    local_vars = [rebuilt.variable(np.zeros((3, 2)), name=f"ckpt_{tag}_{k}") for k in range(2)]
    with gf.Session(rebuilt.graph) as local:
        gf.train.Saver().restore(local, path)
        for got, want in zip(local.run(local_vars), saved):
            np.testing.assert_array_equal(got, want)
    with gf.Session(scope.graph, config) as sess:  # a checkpoint missing a variable: no change
        before = sess.run(shards)
        with pytest.raises(gf.errors.NotFoundError):
            gf.train.Saver(shards + [scope.variable([1.0], name=f"extra_{tag}")]).restore(
                sess, path)
        for got, want in zip(sess.run(shards), before):
            np.testing.assert_array_equal(got, want)
