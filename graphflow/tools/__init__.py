"""The tools layer: what acts on a Session, above the runtime and below the facade.

- ``saver``: ``gf.train.Saver``, checkpoints in TensorFlow's format (the formats
  themselves, tf_bundle, sstable, crc32c, checkpoint_state, are core: graphflow/).
- ``train``: ``gf.train``, the optimizers and schedules, and the Saver.
- ``gradient_check``: ``gf.gradient_check``, gradients against central differences.
- ``summary``: ``gf.summary``, TensorBoard logs.
- ``visualize``: ``graph.to_dot()``, Graphviz pictures (``fused=True`` asks the planner).
- ``cli``: the ``graphflow`` command (``python -m graphflow``).

A tool may import the core, ops and the runtime, never the facade
(tests/test_layers.py holds it). Use them through the facade: ``gf.train``,
``gf.summary``, ``gf.gradient_check``; this package adds no names of its own.
"""
