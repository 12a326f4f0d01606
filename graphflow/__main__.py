"""``python -m graphflow``: the same command line as the ``graphflow`` script."""
import sys

from graphflow.tools.cli import main

sys.exit(main())
