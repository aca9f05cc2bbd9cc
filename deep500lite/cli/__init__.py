"""The ``deep500lite`` command line.

Each subcommand is a module with ``add_parser(subparsers)`` and ``run(args) -> int``.

Error policy of :func:`main`:

- a :class:`~deep500lite.errors.Deep500Error` (bad input, a missing file, an absent framework, ...)
  is printed in one line, ``deep500lite COMMAND: error: MESSAGE``, and exits with status 2;
- an argparse usage error is one line and exits with status 2;
- any other exception is a bug in deep500lite: one line ``deep500lite COMMAND: internal error:
  TYPE: MESSAGE (rerun with --traceback for details)`` and exit status 1;
- ``--traceback`` (or ``DEEP500LITE_TRACEBACK=1``) prints the full traceback instead, with the
  same exit status;
- Ctrl-C (SIGINT) exits with status 130, SIGTERM and SIGHUP with 128 + N, after the same clean-up
  (:func:`deep500lite.processes.signals_unwind`): MPI jobs and workers ended, staging folders removed.

Every error line goes through :func:`deep500lite.escaping.one_line`: a control character that came
from a file or an argument (a newline or an ANSI escape in a node name) is shown as ``\\n`` or
``\\x1b``, never sent to the terminal, and a line longer than 2,000 characters is cut in the middle.
A :class:`~deep500lite.errors.CompilationError`, whose message carries the compiler's output after
its first line, shows that first line only, unless ``--traceback`` is given.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from deep500lite.errors import CompilationError, Deep500Error
from deep500lite.escaping import one_line

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

SUBCOMMANDS = ("env", "list", "infer", "run", "compare", "report", "bench", "pack", "launch", "emulate", "model", "verify",
               "db", "history", "regress", "dashboard")


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line and exit 2."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A value such as "-1,1e9" or "-4KiB" is an option's value, not an option: argparse's own
        # pattern takes only plain negative numbers ("-1", "-.5") as values.
        import re

        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message):
        # argparse's own wording for a closed set, in the project's: what is allowed, then what was received
        import re

        choice = re.fullmatch(r"(argument [^:]+: )invalid choice: (.*) \(choose from (.*)\)", message, re.S)
        if choice:
            message = f"{choice.group(1)}must be one of {choice.group(3)}. Received: {choice.group(2)}"
        self.exit(EXIT_USAGE, f"{one_line(self.prog)}: error: {one_line(message)} (see '{one_line(self.prog)} "
                              "--help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (used by ``main`` and the CLI reference)."""
    parser = _Parser(prog="deep500lite", description=(
        "Benchmark deep learning frameworks on one ONNX experiment, with statistics."), epilog=(
        "run, compare, bench and model record their results in a database (--db, --label; default "
        "d5-results/deep500lite.sqlite); history, regress and dashboard read it. See docs/tracking.md."))
    parser.add_argument("--traceback", action="store_true",
                        help="show the full traceback of errors (for bug reports)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in SUBCOMMANDS:
        importlib.import_module(f"deep500lite.cli.{name}_cmd").add_parser(sub)
    from deep500lite.cli.store_args import wire_store_options

    wire_store_options(sub)  # --db and --label on every command whose results are recorded
    _name_subcommands(sub)
    return parser


def _name_subcommands(sub) -> None:
    """Append each command's own sub-commands to its line in the top-level help, so none is left out."""
    for choice in sub._choices_actions:
        inner = [a for a in sub.choices[choice.dest]._actions if isinstance(a, argparse._SubParsersAction)]
        if inner:
            choice.help = f"{choice.help}: {', '.join(inner[0].choices)}"


def _one_line(exc: BaseException) -> tuple[str, int]:
    """``exc``'s message as one escaped line (its type's name when it has none) and the number of lines left out.

    Only a :class:`~deep500lite.errors.CompilationError` leaves lines out (the compiler's output);
    any other message is shown whole, a line break in it written ``\\n``.
    """
    text = str(exc).strip()
    if not text:
        return type(exc).__name__, 0
    if isinstance(exc, CompilationError):
        lines = [line for line in text.splitlines() if line.strip()]
        return one_line(" ".join(lines[0].split())), len(lines) - 1
    return one_line(text), 0


def main(argv=None) -> int:
    """Run the CLI; returns (and, as a console script, exits with) the status code.

    Returns:
        0 on success, 1 when a run's acceptable metrics do not hold or on an internal error (a
        bug in deep500lite), 2 on a usage error or a :class:`~deep500lite.errors.Deep500Error`,
        130 when interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error (one line printed, status 2) or --help (status 0)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    show_traceback = bool(args.traceback or os.environ.get("DEEP500LITE_TRACEBACK"))
    # the command as typed, down to the subcommand: "bench allreduce", "model scaling", "db list"
    command = " ".join(str(part) for part in (args.command, getattr(args, "benchmark", None),
                                              getattr(args, "model_command", None), getattr(args, "db_command", None))
                       if part)
    from deep500lite.cli.store_args import store_session
    from deep500lite.processes import signal_name, signals_unwind, terminated_by

    try:
        # SIGTERM and SIGHUP unwind like Ctrl-C: jobs are ended, staging folders removed, old results kept whole.
        with signals_unwind(), store_session(args):
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("deep500lite: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        signum = terminated_by()
        if signum is None:
            raise
        print(f"deep500lite {args.command}: stopped by {signal_name(signum)}", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, as other command-line tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Deep500Error as exc:
        if show_traceback:
            traceback.print_exc()
        else:
            message, more = _one_line(exc)
            if more:
                message += f" [{more} more line(s): rerun with --traceback]"
            print(f"deep500lite {command}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - anything else is a bug: one line, traceback on request
        if show_traceback:
            traceback.print_exc()
        else:
            print(f"deep500lite {command}: internal error: {type(exc).__name__}: {_one_line(exc)[0]} "
                  "(rerun with --traceback for details)", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
