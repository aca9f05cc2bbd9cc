"""Argument types shared by the subcommands: the one positive-integer and non-negative-integer type.

They live in :mod:`deep500lite.utils`, so the recipe worker (below the CLI) uses the same ones.

Both report a bad value through argparse (a one-line usage error, exit status 2) in one wording::

    deep500lite infer: error: argument --batch-size: must be a positive integer (1, 2, 3, ...). Received: '0'
"""

from __future__ import annotations

from deep500lite.utils import nonnegative_int, positive_int

__all__ = ["positive_int", "nonnegative_int"]
