"""One input path: every file a user gives is read through deep500lite.input_files.

The first test walks the source (deep500lite/, frameworks/, metrics/) for every call that reads a
file (``open`` without a write mode, ``np.load``, ``onnx.load``, ``json.load``, ``read_bytes``,
``read_text``, ``ZipFile``) and fails on one that is not in :data:`ALLOWED`, each listed with the
reason it needs no check: the file is deep500lite's own (written by this process or its workers in
a folder it made), ``/proc``, or a file of an installed package. A new reader of a user's file must
go through ``open_input`` / ``read_input_*`` instead. The other tests check what the opener refuses.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from deep500lite.errors import UserError, UserTypeError
from deep500lite.input_files import open_input, read_input_bytes, read_input_json, read_input_text

ROOT = Path(__file__).resolve().parents[2]
OWN = "a file deep500lite wrote itself"
ALLOWED = {
    ("deep500lite/bench/allreduce.py", "last_level_cache_bytes", "open"): "/sys cache sizes",
    ("deep500lite/bench/allreduce.py", "run_allreduce_benchmark", "json.load"): OWN + " (a worker's output)",
    ("deep500lite/bench/allreduce.py", "run_allreduce_benchmark", "open"): OWN + " (a worker's output)",
    ("deep500lite/bench/allreduce_worker.py", "worker_main", "json.load"): OWN + " (the job's configuration)",
    ("deep500lite/bench/allreduce_worker.py", "worker_main", "open"): OWN + " (the job's configuration)",
    ("deep500lite/bench/dataset.py", "__getitem__", "np.load"): OWN + " (the .npy files bench dataset made)",
    ("deep500lite/bench/spatial.py", "run_spatial_benchmark", "json.load"): OWN + " (a worker's output)",
    ("deep500lite/bench/spatial.py", "run_spatial_benchmark", "open"): OWN + " (a worker's output)",
    ("deep500lite/bench/spatial.py", "worker_main", "json.load"): OWN + " (the job's configuration)",
    ("deep500lite/bench/spatial.py", "worker_main", "open"): OWN + " (the job's configuration)",
    ("deep500lite/environment.py", "cpu_features", "open"): "/proc/cpuinfo",
    ("deep500lite/environment.py", "cpu_model", "open"): "/proc/cpuinfo",
    ("deep500lite/lv0/cppop/build.py", "_source_line", "open"): "a source line for a compiler message: the "
                                                                "source was read through the opener before",
    ("deep500lite/lv0/cppop/build.py", "_supports_openmp", "open"): OWN + " (a cache marker)",
    ("deep500lite/lv1/onnx_test_parser.py", "_load", "onnx.load_model"): "the onnx package's backend test data",
    ("deep500lite/bench/distributed.py", "run_distributed_benchmark", "json.load"): OWN + " (a worker's output)",
    ("deep500lite/bench/distributed.py", "run_distributed_benchmark", "open"): OWN + " (a worker's output)",
    ("deep500lite/bench/distributed_ddp.py", "worker_main", "json.load"): OWN + " (the job's configuration)",
    ("deep500lite/bench/distributed_ddp.py", "worker_main", "open"): OWN + " (the job's configuration)",
    ("deep500lite/processes.py", "_children_table", "open"): "/proc/PID/stat",
    ("deep500lite/processes.py", "_running", "open"): "/proc/PID/stat",
    ("deep500lite/processes.py", "_started", "open"): "/proc/PID/stat",
    ("deep500lite/recipe/compare.py", "_run_child", "open"): OWN + " (a worker's log)",
    ("deep500lite/recipe/parallel_training.py", "describe_lines", "json.load"): OWN + " (a rank's results)",
    ("deep500lite/recipe/parallel_training.py", "describe_lines", "open"): OWN + " (a rank's results)",
    ("deep500lite/results/figures.py", "plotly_js", "open"): "plotly's bundled JavaScript",
    ("deep500lite/utils.py", "_umask", "open"): "/proc/self/status",
    ("deep500lite/utils.py", "available_memory_bytes", "open"): "/proc/meminfo",
    ("frameworks/onnxruntime/grad_rewrite.py", "nchwc_block_size", "onnx.load"): OWN + " (ONNX Runtime's "
                                                                                  "optimized model)",
    ("frameworks/torch/zoo.py", "_export", "onnx.load"): OWN + " (torch.onnx.export's output)",
    ("frameworks/torch/zoo_graphs.py", "_export", "onnx.load"): OWN + " (torch.onnx.export's output)",
}
_OWNERS = {"open": ("", "gzip", "io", "tarfile", "bz2", "lzma"), "load": ("np", "numpy", "onnx", "json", "torch"),
           "load_model": ("onnx",)}


def _reads(tree: ast.AST):
    """(enclosing function, call) of each call in ``tree`` that reads a file by name."""
    def visit(node, func):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.Call):
                fn = child.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
                owner = fn.value.id if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) else ""
                reads = (name in _OWNERS and owner in _OWNERS[name]) or name in ("read_bytes", "read_text", "ZipFile")
                mode = ""
                if name == "open" and len(child.args) > 1 and isinstance(child.args[1], ast.Constant):
                    mode = str(child.args[1].value)
                mode += "".join(str(k.value.value) for k in child.keywords
                                if k.arg == "mode" and isinstance(k.value, ast.Constant))
                in_memory = (child.args and isinstance(child.args[0], ast.Call)
                             and getattr(child.args[0].func, "attr", "") == "BytesIO")
                if reads and not any(c in mode for c in "wax") and not in_memory:
                    yield inner or "<module>", f"{owner + '.' if owner else ''}{name}"
            yield from visit(child, inner)
    yield from visit(tree, None)


def test_every_file_read_goes_through_the_opener_or_is_listed():
    found = set()
    for base in ("deep500lite", "frameworks", "metrics"):
        for path in sorted((ROOT / base).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel != "deep500lite/input_files.py":
                found |= {(rel, *site) for site in _reads(ast.parse(path.read_text(encoding="utf-8")))}
    assert len(found) > 10, "the walk found too few reads: is it still looking in the right places?"
    new = sorted(found - set(ALLOWED))
    assert not new, ("files read without deep500lite.input_files (use open_input / read_input_bytes / "
                     f"read_input_text / read_input_json, or list the site here with why it needs no check): {new}")
    gone = sorted(set(ALLOWED) - found)
    assert not gone, f"listed reads that no longer exist (remove them from ALLOWED): {gone}"


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize("reader", [open_input, read_input_bytes, read_input_text, read_input_json])
def test_the_opener_refuses_what_is_not_a_regular_file(reader, tmp_path, fifo):
    for bad, words in ((fifo, "FIFO"), ("/dev/zero", "character device"), (str(tmp_path), "folder"),
                       (str(tmp_path / "missing"), "does not exist"), ("", "non-empty"), ("a\x00b", "NUL")):
        with pytest.raises(UserError, match=words) as info:
            reader(bad, "the test file")
        assert "Received:" in str(info.value) and "\n" not in str(info.value)
    for bad in (123, None, 1.5, ["a"], True):
        with pytest.raises(UserTypeError, match="must be a path"):
            reader(bad, "the test file")


def test_reads_are_bounded_and_json_faults_are_one_line(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 1000)
    with pytest.raises(UserError, match="more than the 100 bytes"):
        read_input_bytes(big, "the test file", limit=100)
    for text, words in (('{"a": NaN}', "literal NaN"), ("[" * 50000 + "]" * 50000, "nested too deeply"),
                        ('{"a": ' + "9" * 5000 + "}", "5,000 digits"), ("{", "line 1, column 2"),
                        (b"\xff\xfe{}", "not UTF-8")):
        path = tmp_path / "f.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(UserError, match=words) as info:
            read_input_json(path, "the test file")
        assert "\n" not in str(info.value) and "Received:" in str(info.value)
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({"a": [1, 2.5, None]}))
    assert read_input_json(path, "the test file") == {"a": [1, 2.5, None]}
