"""Shared fixtures: a fresh graph and scope per test, and a one-call runner.

The suite runs on one pytest-xdist worker per core, a test file per worker
(pyproject.toml's addopts). Most of a fresh machine's suite time is numba compiling
kernels, one at a time in a process: with a cold kernel cache, 500 s in one process
on 2 cores against 320 s on two workers (a warm cache: 250 s against 180 s).
"""
from __future__ import annotations

import os

import pytest
from hypothesis import settings

import graphflow as gf

# Fused kernels compile before their first call in tests (tests/test_tiered.py turns
# tiered compilation back on), so that a test sees the path it asks about.
os.environ.setdefault("GRAPHFLOW_TIERED", "0")
# Compiled segments (runtime/segments.py) cost numba seconds each, and random-graph
# tests would compile new ones on every run: tests/test_segments.py turns them on.
os.environ.setdefault("GRAPHFLOW_SEGMENTS", "0")
# Every plan pass's result is checked against the plan IR's invariants
# (runtime/pipeline.py, check_ir): a pass that breaks one fails the test that built it.
os.environ.setdefault("GRAPHFLOW_CHECK_PASSES", "1")

settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("long", max_examples=20000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def scope() -> gf.Scope:
    return gf.Scope(gf.Graph())


@pytest.fixture
def run(scope):
    """``run(fetches, feed_dict=None)`` on the scope's graph with a fresh Session."""
    sessions = []

    def _run(fetches, feed_dict=None, **config):
        sess = gf.Session(scope.graph, gf.SessionConfig(**config) if config else None)
        sessions.append(sess)
        return sess.run(fetches, feed_dict)
    yield _run
    for s in sessions:
        s.close()


@pytest.fixture(scope="session")
def dask_client():
    """A Dask LocalCluster of 2 worker processes on the loopback (one thread each),
    shared by the distributed tests of the session and always closed; skips when the
    `distributed` extra is not installed. Pinned tasks of a dead worker fail after
    10 s (`distributed.scheduler.no-workers-timeout`) instead of waiting forever."""
    distributed = pytest.importorskip("distributed")
    import warnings

    import dask

    with dask.config.set({"distributed.scheduler.no-workers-timeout": "10s"}), \
            warnings.catch_warnings():
        # its HTTP server (loopback only) moves off 8787 when another cluster holds it
        warnings.filterwarnings("ignore", message="Port .* is already in use")
        cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                           host="127.0.0.1", dashboard_address=None)
        try:
            client = distributed.Client(cluster)
            try:
                yield client
            finally:
                client.close()
        finally:
            cluster.close()
