"""docs/cli.md is generated from the parsers: it is current, and every command's help prints."""

import contextlib
import io
import os
import re
import subprocess
import sys

import pytest

from deep500lite.cli.reference import command_parsers, render_reference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMANDS = [name for name, _, _ in command_parsers() if name != "deep500lite"]


def test_docs_cli_md_is_the_generated_reference():
    with open(os.path.join(ROOT, "docs", "cli.md"), encoding="utf-8") as f:
        on_disk = f.read()
    assert on_disk == render_reference(), (
        "docs/cli.md is stale: regenerate it with `python -m deep500lite.cli.reference --write docs/cli.md`")


def test_the_reference_does_not_depend_on_the_machine(monkeypatch):
    before = render_reference()
    for var, value in {"DEEP500LITE_DB": "/elsewhere/x.sqlite", "DEEP500LITE_LABEL": "other", "COLUMNS": "37",
                       "OMP_NUM_THREADS": "1", "DEEP500LITE_MACHINE": "elsewhere"}.items():
        monkeypatch.setenv(var, value)
    assert render_reference() == before


def test_every_command_is_named_in_the_top_level_help():
    out = subprocess.run([sys.executable, "-m", "deep500lite", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines, last = {}, None
    for line in out.stdout.splitlines():  # "    bench      run a benchmark: overhead, op, ..." (wrapped)
        m = re.match(r"^    (\w+)\s+(.*)$", line)
        if m:
            last = m.group(1)
            lines[last] = m.group(2)
        elif last is not None and re.match(r"^ {8,}\S", line):  # argparse's continuation of the help text
            lines[last] += " " + line.strip()
        else:
            last = None
    assert len(COMMANDS) > 20
    for name in COMMANDS:
        parts = name.split()[1:]
        assert parts[0] in lines, f"{parts[0]!r} missing from deep500lite --help"
        if len(parts) > 1:
            assert re.search(rf"\b{parts[1]}\b", lines[parts[0]]), f"{name!r} not named on {parts[0]!r}'s help line"


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_prints_its_help(name):
    from deep500lite.cli import build_parser

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*name.split()[1:], "--help"])
    assert exited.value.code == 0 and out.getvalue().startswith(f"usage: {name}"), err.getvalue()[-2000:]
    assert err.getvalue() == ""
