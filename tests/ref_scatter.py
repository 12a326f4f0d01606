"""Old name of tests/support/ref_scatter.py, for test modules that still import it."""
from support.ref_scatter import *  # noqa: F401,F403
from support.ref_scatter import _combine  # noqa: F401
