"""The ``deep500lite`` command line.

Each subcommand is a module with ``add_parser(subparsers)`` and ``run(args) -> int``. Mistakes
in the user's input are printed in one line without a traceback and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from deep500lite.errors import Deep500Error

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

SUBCOMMANDS = ("env", "list", "infer", "run", "compare", "report", "bench", "pack", "launch")


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line and exit 2."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (used by ``main`` and the CLI reference)."""
    parser = _Parser(prog="deep500lite", description=(
        "Benchmark deep learning frameworks on one ONNX experiment, with statistics."))
    parser.add_argument("--traceback", action="store_true",
                        help="show the full traceback of errors (for bug reports)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in SUBCOMMANDS:
        importlib.import_module(f"deep500lite.cli.{name}_cmd").add_parser(sub)
    return parser


def _is_user_error(exc: BaseException) -> bool:
    return isinstance(exc, (Deep500Error, ValueError, TypeError, ImportError, FileNotFoundError,
                            KeyError, OSError))


def main(argv=None) -> int:
    """Run the CLI; returns (and, as a console script, exits with) the status code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("deep500lite: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, as other command-line tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 - one line for the user, traceback on request
        if args.traceback or os.environ.get("DEEP500LITE_TRACEBACK"):
            raise
        message = " ".join(str(exc).split()) if str(exc) else type(exc).__name__
        if isinstance(exc, KeyError) and message.startswith(("'", '"')):
            message = message[1:-1]
        if _is_user_error(exc):
            print(f"deep500lite {args.command}: error: {message}", file=sys.stderr)
            return EXIT_USAGE
        print(f"deep500lite {args.command}: internal error: {type(exc).__name__}: {message} "
              "(rerun with --traceback for details)", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
