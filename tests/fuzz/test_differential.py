"""Differential fuzzing of the whole operator set: random graphs (tests/fuzz/graphs.py)
run by graphflow's executor in several configurations must agree with the plain-loop
references (tests/fuzz/check.py)."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings

from .check import check_graph
from .graphs import graph_specs
from .spec import GraphSpec

#: Graphs per CI run: about 8 s on two cores; new graphs each run (not derandomized),
#: so runs add up. HYPOTHESIS_PROFILE=long runs the long profile's count (20000).
CI_EXAMPLES = 150
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")


@settings(max_examples=CI_EXAMPLES if PROFILE == "ci" else settings.default.max_examples,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=graph_specs())
def test_graphflow_agrees_with_reference(spec: GraphSpec) -> None:
    check_graph(spec)
