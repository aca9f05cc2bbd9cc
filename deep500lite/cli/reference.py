"""docs/cli.md, generated from the argument parsers: every command, option, default and help text.

Regenerate after changing an option (a test fails while the file is stale)::

    python -m deep500lite.cli.reference --write docs/cli.md

The text comes only from the parsers (``description``, each argument's ``help``, ``metavar``,
``choices`` and ``default``), so ``deep500lite COMMAND --help`` and the reference never disagree.
Defaults that depend on the machine or the environment (core counts, installed plugins, ``$VAR``
lookups) are written as the parser states them in its help, never evaluated here.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["command_parsers", "render_reference", "main"]

# Where each command is explained as a task (the reference only lists what the parser knows).
GUIDES = {
    "env": "tracking.md", "list": "getting-started.md", "infer": "executors.md", "run": "recipes.md",
    "compare": "comparison.md", "report": "comparison.md", "bench": "performance.md",
    "bench op": "operator-benchmarks.md", "bench dataset": "datasets.md", "bench allreduce": "distributed.md",
    "bench zoo": "zoo.md", "bench spatial": "parallelism.md", "bench distributed": "data-parallel-overlap.md", "pack": "datasets.md", "launch": "distributed.md",
    "emulate": "hosts.md", "model": "scaling.md", "db": "tracking.md", "history": "tracking.md",
    "regress": "tracking.md", "dashboard": "tracking.md", "verify": "verify.md",
}

_INTRO = """\
# The `deep500lite` command line

This page is generated from the command's argument parsers by `python -m deep500lite.cli.reference
--write docs/cli.md`; do not edit it by hand. `deep500lite COMMAND --help` prints the same text.
Each command links to the guide that explains it as a task.

```text
deep500lite [--traceback] COMMAND [options]
```

Exit status: `0` success; `1` a run whose acceptable metrics do not all hold (or `regress` finding a
slower benchmark); `2` a usage error or bad input: a wrong value, a missing or corrupt file, an absent
framework (any `deep500lite.errors.Deep500Error`), printed in one line without a traceback; `130`
interrupted. Any other exception is a bug in deep500lite: it is shown as one line, `deep500lite COMMAND:
internal error: TYPE: MESSAGE (rerun with --traceback for details)`, with exit status `1`;
`--traceback` (or `DEEP500LITE_TRACEBACK=1`) prints the full traceback instead.

Commands that measure (`run`, `compare`, every `bench`, `model scaling`, `model layers`) record what they
measure in a results database as well as in their files; `--db PATH|postgresql://...|none` and `--label
NAME` choose where and under which name (default `$DEEP500LITE_DB`, else `d5-results/deep500lite.sqlite`;
see [tracking.md](tracking.md)). `history`, `regress` and `dashboard` read it.
"""


def command_parsers(parser: argparse.ArgumentParser | None = None, prefix: str = "deep500lite"):
    """Every command of the CLI as ``(name, parser, help)``, depth first (``deep500lite bench op`` after ``bench``).

    Args:
        parser: the top-level parser (default: :func:`deep500lite.cli.build_parser`'s).
        prefix: the command's name so far.
    """
    if parser is None:
        from deep500lite.cli import build_parser

        parser = build_parser()
    yield from _walk(parser, prefix, None)


def _walk(parser, prefix, help_text):
    yield prefix, parser, help_text
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{prefix} {name}", helps.get(name))


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _expand(parser, action) -> str:
    if not action.help:
        return ""
    return parser._get_formatter()._expand_help(action)


def _argument(action) -> str:
    if action.option_strings:
        names = ", ".join(f"`{o}`" for o in action.option_strings)
        if action.nargs == 0:
            return names
        metavar = action.metavar or (action.dest.upper() if not action.choices else None)
        if metavar is None:
            metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
        return f"{names} `{metavar if isinstance(metavar, str) else ' '.join(metavar)}`"
    metavar = action.metavar or ("{" + ",".join(str(c) for c in action.choices) + "}" if action.choices else action.dest)
    return f"`{metavar if isinstance(metavar, str) else ' '.join(metavar)}`"


def _default(action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS) or not action.option_strings:
        return ""
    if isinstance(action.default, bool):
        return ""
    return f"`{action.default}`"


def _usage(parser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def render_reference() -> str:
    """docs/cli.md's text: the introduction, then one section per command with its usage and options."""
    out = [_INTRO]
    for name, parser, _help in command_parsers():
        if name == "deep500lite":
            continue
        short = name.split(" ", 1)[1]
        out.append(f"## `{name}`\n")
        if parser.description:
            out.append(" ".join(parser.description.split()) + "\n")
        guide = GUIDES.get(short)
        if guide:
            out.append(f"Guide: [{guide}]({guide}).\n")
        out.append("```text\n" + _usage(parser) + "\n```\n")
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            out.append("| command | what it does |\n|---|---|")
            for choice in subs[0]._choices_actions:
                anchor = f"{name} {choice.dest}".replace(" ", "-")
                out.append(f"| [`{name} {choice.dest}`](#{anchor}) | {_cell(choice.help or '')} |")
            out.append("")
        rows = [a for a in parser._actions
                if a.help != argparse.SUPPRESS and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
        if rows:
            out.append("| argument | default | meaning |\n|---|---|---|")
            for action in rows:
                out.append(f"| {_argument(action)} | {_default(action)} | {_cell(_expand(parser, action))} |")
            out.append("")
        if parser.epilog:
            out.append(" ".join(parser.epilog.split()) + "\n")
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    """``python -m deep500lite.cli.reference [--write PATH]``: print or write the reference."""
    p = argparse.ArgumentParser(prog="python -m deep500lite.cli.reference", description=__doc__.splitlines()[0])
    p.add_argument("--write", metavar="PATH", help="write the reference to PATH instead of printing it")
    args = p.parse_args(argv)
    text = render_reference()
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
