"""Shared fixtures: a fresh graph and scope per test, and a one-call runner."""
from __future__ import annotations

import os

import pytest
from hypothesis import settings

import graphflow as gf

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
