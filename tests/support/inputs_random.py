"""test_every_op.py input builders for the ops of issue #35 (random): op name -> fn(opdef, inputs)."""
from __future__ import annotations

INPUTS: dict = {}
