"""What the plan compiler makes of a graph, for ``graphflow inspect --after PASS``.

The same pipeline a CPU Session runs (runtime/pipeline.py), stopped after any pass,
and the compiled segments the serial plan then forms (runtime/segments.py): the
signature is every output no node reads fetched, every Placeholder fed, unless given.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from graphflow.graph import Graph, Output

from .pipeline import plan_passes, stages
from .plan_ir import PlanIR, describe, initial_ir

#: the name ``--after`` gives the last stage: the segments of the built plan
SEGMENTS = "segments"


def default_signature(graph: Graph, fetches: Iterable | None = None,
                      feeds: Iterable[Output] | None = None) -> tuple[list, list[Output]]:
    """(fetches, feeds): by default every output no op reads, every Placeholder fed."""
    ops = list(graph.operations())
    if feeds is None:
        feeds = [o for op in ops if op.type == "Placeholder" for o in op.outputs]
    if fetches is None:
        read = {i for op in ops for i in op.inputs}
        fetches = [o for op in ops for o in op.outputs if o not in read]
    return list(fetches), list(feeds)


def _cpu_pipeline():
    from .device_discovery import list_devices
    from .session import SessionConfig
    return [d for d in list_devices() if d.device_type == "cpu"], SessionConfig()


def plan_stages(graph: Graph, fetches: Iterable | None = None,
                feeds: Iterable[Output] | None = None) -> list[tuple[str, PlanIR]]:
    """``(name, IR)`` as written (``initial``) and after each pass a CPU Session's plan
    runs (runtime/pipeline.py's ``plan_passes``)."""
    fetches, feeds = default_signature(graph, fetches, feeds)
    devices, config = _cpu_pipeline()
    ir = initial_ir(fetches, feeds)
    return [("initial", ir), *stages(ir, plan_passes(devices, config))]


def plan_segments(graph: Graph, fetches: Iterable | None = None,
                  feeds: Iterable[Output] | None = None) -> list[list[str]]:
    """The node names of each compiled segment the plan would form (nothing is run)."""
    from .executor import ForwardCounter, Plan
    from .segments import find_segments
    fetches, feeds = default_signature(graph, fetches, feeds)
    devices, config = _cpu_pipeline()
    plan = Plan(graph, fetches, feeds, devices, config, ForwardCounter())
    return [[plan.steps[k].op.name for k, _ in found.lowered]
            for found in find_segments(plan.steps, plan.junk_slot)]


def stage_names(graph: Graph) -> list[str]:
    return [name for name, _ in plan_stages(graph)] + [SEGMENTS]


def after(graph: Graph, name: str) -> str:
    """The text ``graphflow inspect --after name`` prints (a pass's name or a part of
    it: ``fuse`` for ``fuse_pass``)."""
    if name == SEGMENTS:
        found = plan_segments(graph)
        lines = [f"segment {k}: {len(names)} steps: {', '.join(names)}"
                 for k, names in enumerate(found)]
        return "\n".join(lines + [f"{len(found)} compiled segments"])
    every = plan_stages(graph)
    found = [(n, ir) for n, ir in every if n == name] or [(n, ir) for n, ir in every if name in n]
    if not found:
        raise KeyError(name)
    stage, ir = found[0]
    return f"# the plan IR after {stage}\n{describe(ir)}"


__all__: Sequence[str] = ["plan_stages", "plan_segments", "after", "stage_names",
                          "default_signature"]
