"""A stand-in for ops/tiering.Tiered whose loop is never ready: what a lean kernel or a
numpy-until-compiled path does before its loop compiles, made to happen on demand."""
from __future__ import annotations


class NeverReady:
    """A loop that is never compiled for any arguments (ops/tiering.Tiered's interface)."""

    def __init__(self, fn):
        self.fn = fn

    def ready(self, *args, asked_before: int = 0) -> bool:
        return False

    def ready_or_cached(self, *args) -> bool:
        return False
