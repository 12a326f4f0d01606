"""Helpers shared by the test modules (tests/ is on sys.path, so `from support import ...`):

- gpu_devices: the simulated, emulated and real GPUs a test Session can run on;
- cuda_emulator: graphflow's CUDA kernels compiled for the CPU, behind a cupy-like module;
- ref_scatter, ref_partition: plain-loop references for the scatter/gather and
  partition/stitch families;
- probe_ops: a test op that sleeps, fails on demand and records when it ran;
- threads: run a function in several threads at once and collect what they raised.
"""
