"""Every fenced shell or Python block of the user docs runs, or says why it does not (tests/docs/blocks.py).

Each page's runnable blocks run in order in a fresh working folder that links to the repository's files
(so ``recipes/...`` and ``.venv/bin/activate`` resolve), with the results database in that folder.
``DEEP500LITE_DOCS_BLOCK_TIMEOUT`` (seconds, default 300) bounds each block.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import pytest
from blocks import ROOT, doc_pages, read_blocks

BLOCK_TIMEOUT = float(os.environ.get("DEEP500LITE_DOCS_BLOCK_TIMEOUT", "300"))
_NOT_LINKED = {".git", "d5-results", "__pycache__", ".pytest_cache"}
PAGES = doc_pages()
RUNNABLE = [p for p in PAGES if any(b.kind != "shown" and not b.not_run for b in read_blocks(p))]


def test_every_block_says_what_it_is():
    untagged = [b.where() for p in PAGES for b in read_blocks(p) if not b.lang]
    assert not untagged, ("fenced blocks without an info string (bash, python, text for output, ...): "
                          + ", ".join(untagged))


def test_every_page_is_read():
    assert "README.md" in PAGES and "docs/cli.md" in PAGES and len(PAGES) > 15


def _workdir(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for name in os.listdir(ROOT):
        if name not in _NOT_LINKED:
            os.symlink(os.path.join(ROOT, name), work / name)
    return work


def _env():
    env = dict(os.environ)
    env.pop("DEEP500LITE_DB", None)  # the page's blocks share the default database in their folder
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["DEEP500LITE_DOCS_TEST"] = "1"
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class _Notebook:
    """The page's Python process (tests/docs/notebook.py), started at its first Python block."""

    def __init__(self, cwd, env, log):
        read_fd, write_fd = os.pipe()
        self.log = log
        self.proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "notebook.py"),
                                      str(write_fd)], cwd=cwd, env=env, stdin=subprocess.PIPE, text=True,
                                     stdout=log, stderr=subprocess.STDOUT, pass_fds=(write_fd,))
        os.close(write_fd)
        self.replies = os.fdopen(read_fd)

    def run(self, code: str, timeout: float) -> dict:
        self.proc.stdin.write(json.dumps(code) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.replies], [], [], timeout)
        if not ready:
            self.proc.kill()
            return {"ok": False, "error": f"no end after {timeout:g} s"}
        line = self.replies.readline()
        return json.loads(line) if line else {"ok": False, "error": f"the process ended ({self.proc.wait()})"}

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.replies.close()


def _tail(path, n=3000):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()[-n:]


@pytest.mark.parametrize("page", RUNNABLE)
def test_page_blocks_run(page, tmp_path):
    work, env = _workdir(tmp_path), _env()
    log_path = tmp_path / "python-blocks.log"
    notebook = None
    timings = []
    try:
        for block in read_blocks(page):
            if block.kind == "shown" or block.not_run:
                continue
            text, start = block.runnable_text(), time.monotonic()
            if block.kind == "shell":
                try:
                    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], cwd=work, env=env,
                                          capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
                except subprocess.TimeoutExpired:
                    pytest.fail(f"{block.where()}: no end after {BLOCK_TIMEOUT:g} s:\n{text}")
                assert proc.returncode == block.exit_status, (
                    f"{block.where()}: exit status {proc.returncode}, expected {block.exit_status}:\n{text}\n"
                    f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}")
            else:
                if notebook is None:
                    notebook = _Notebook(work, env, open(log_path, "w"))
                answer = notebook.run(text, BLOCK_TIMEOUT)
                assert answer["ok"], f"{block.where()}:\n{text}\n--- error ---\n{answer.get('error')}\n" \
                                     f"--- output ---\n{_tail(log_path)}"
            timings.append((block.line, round(time.monotonic() - start, 1)))
    finally:
        if notebook is not None:
            notebook.close()
            notebook.log.close()
    print(f"{page}: block seconds by line {timings}")
