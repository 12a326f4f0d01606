"""graphflow's benchmark suite: ``python -m benchmarks [--quick]`` from the repo root."""
