"""Scale-out on Dask distributed: a Session with ``gf.SessionConfig(cluster=client)``
runs each op on the task its device names (``/job:worker/task:K``).

    tasks.py        level 1 of placement: a task for every op
    stages.py       cut the placed graph into stages at cross-task edges (pure)
    stage_graph.py  a stage as a graph of its own, for a worker to compile
    cluster.py      the client's view: task -> worker, graphs shipped, workers that left
    worker.py       what runs in a worker: graphs, compiled stages, variables, journals
    plan.py         the client's compiled signature and its runs

Importing this package does not import dask; only a Session with a cluster does.
"""
