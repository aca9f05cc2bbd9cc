"""Fenced code blocks of the user docs, read with markdown-it-py, and what a docs test does with each.

A block's info string says what it is: ``bash``/``sh``/``shell`` (run by bash), ``python`` (run by
Python), anything else (``text`` output, ``cpp``, ``yaml``, ...) is shown, not run. A block with no info
string is an error: the reader cannot tell a command from its output. An HTML comment on the line right
before a block's opening fence changes what happens to it:

- ``<!-- not run: REASON -->``: not run (a GPU, a cluster, hours); the reason is required.
- ``<!-- quick: OLD => NEW -->``: run with OLD replaced by NEW (a shorter ``--max-time``); repeatable.
- ``<!-- exit: N -->``: the block is expected to end with exit status N (a documented error).

The blocks of one page run in order in one working folder, so a later block sees what an earlier one
wrote; the Python blocks of a page share one namespace, as cells of a notebook do.
"""

from __future__ import annotations

import dataclasses
import os
import re

from markdown_it import MarkdownIt

__all__ = ["Block", "doc_pages", "read_blocks", "SHELL", "PYTHON"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHELL = ("bash", "sh", "shell", "console")
PYTHON = ("python", "py", "python3")
_MARK = re.compile(r"^<!--\s*(not run|quick|exit)\s*:\s*(.*?)\s*-->\s*$")


@dataclasses.dataclass
class Block:
    """One fenced block: its page, line (1-based, the opening fence), language, text and markers."""

    page: str
    line: int
    lang: str
    text: str
    not_run: str | None = None
    quick: list = dataclasses.field(default_factory=list)
    exit_status: int = 0

    @property
    def kind(self) -> str:
        """``shell``, ``python`` or ``shown``."""
        return "shell" if self.lang in SHELL else "python" if self.lang in PYTHON else "shown"

    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def runnable_text(self) -> str:
        """The text with the ``quick`` substitutions applied (each must occur)."""
        text = self.text
        for old, new in self.quick:
            if old not in text:
                raise AssertionError(f"{self.where()}: quick substitution {old!r} does not occur in the block")
            text = text.replace(old, new)
        return text


def doc_pages() -> list[str]:
    """README.md and every docs/*.md page (not docs/results/, which holds raw measurement records)."""
    docs = os.path.join(ROOT, "docs")
    return ["README.md"] + sorted(f"docs/{n}" for n in os.listdir(docs) if n.endswith(".md"))


def read_blocks(page: str) -> list[Block]:
    """The fenced blocks of ``page`` (a path relative to the repository), with their markers.

    Raises:
        AssertionError: a marker that cannot be read, or a block without an info string.
    """
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        source = f.read()
    lines = source.splitlines()
    blocks = []
    for token in MarkdownIt("commonmark").parse(source):
        if token.type != "fence":
            continue
        start = token.map[0]
        lang = token.info.split()[0].lower() if token.info.strip() else ""
        block = Block(page, start + 1, lang, token.content)
        at = start - 1
        while at >= 0 and lines[at].strip().startswith("<!--"):
            m = _MARK.match(lines[at].strip())
            if not m:
                break
            key, value = m.groups()
            if key == "not run":
                if not value:
                    raise AssertionError(f"{page}:{at + 1}: '<!-- not run: REASON -->' needs a reason")
                block.not_run = value
            elif key == "quick":
                if "=>" not in value:
                    raise AssertionError(f"{page}:{at + 1}: '<!-- quick: OLD => NEW -->' needs '=>'. Received: {value}")
                old, new = (part.strip() for part in value.split("=>", 1))
                block.quick.insert(0, (old, new))
            else:
                block.exit_status = int(value)
            at -= 1
        blocks.append(block)
    return blocks
