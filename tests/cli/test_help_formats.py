"""Every command's ``--help`` renders: argparse expands ``%`` in help texts, so a stray one breaks it."""
import argparse

import pytest

from deep500lite.cli import build_parser


def _commands(parser, prefix):
    sub = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    yield prefix, parser
    for action in sub:
        for name, p in action.choices.items():
            yield from _commands(p, f"{prefix} {name}")


@pytest.mark.parametrize("name,parser", list(_commands(build_parser(), "deep500lite")),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_help_renders(name, parser):
    text = parser.format_help()
    assert text.startswith("usage: ") and name.split()[-1] in text
