"""Old name of tests/support/ref_partition.py, for test modules that still import it."""
from support.ref_partition import *  # noqa: F401,F403
