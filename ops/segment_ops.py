"""(in progress: issue #35)"""
from __future__ import annotations
