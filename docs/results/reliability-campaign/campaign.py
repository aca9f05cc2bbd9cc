"""A campaign of bad inputs, tried as a new user would: the CLI in a fresh process, the Python API in a child.

Each case is judged on its outcome alone:

- CLI: exit status 2, exactly one line on stderr starting with ``deep500lite``, no traceback, no
  "internal error", no control character on stdout or stderr, done within the time limit, and
  no process left in the case's session afterwards;
- API: a :class:`deep500lite.errors.Deep500Error` whose message is one line of at most 2,000
  characters without control characters; a value error's message says ``Received:``.

Usage (from the repository root, with the project's virtual environment first on PATH)::

    python docs/results/reliability-campaign/campaign.py [--jobs 2] [--only PREFIX]

It writes outcomes.csv beside itself and prints the counts.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
TIMEOUT = 120


def _scratch() -> dict:
    """Files the cases point at: special files, broken models, broken recipes and results."""
    import numpy as np
    import onnx

    from deep500lite import networks

    d = Path(tempfile.mkdtemp(prefix="d5campaign-"))
    f = {"dir": str(d)}
    os.mkfifo(d / "fifo")
    f["fifo"] = str(d / "fifo")
    (d / "x.py").mkdir()
    f["dirpy"] = str(d / "x.py")
    (d / "sub").mkdir()
    f["empty"] = str(d / "empty")
    open(f["empty"], "w").close()
    rng = np.random.default_rng(7)
    f["random"] = str(d / "random.onnx")
    (d / "random.onnx").write_bytes(rng.bytes(4096))
    f["text"] = str(d / "text.onnx")
    (d / "text.onnx").write_text("this is not a model\n")
    net, _, _ = networks.create_model("mlp", 2, classes=3, shape=(5,), seed=0)
    model = net.to_onnx()
    good = d / "good.onnx"
    onnx.save(model, str(good))
    f["good"] = str(good)
    raw = good.read_bytes()
    f["truncated"] = str(d / "truncated.onnx")
    (d / "truncated.onnx").write_bytes(raw[: len(raw) // 2])
    m = onnx.load(str(good))
    m.graph.node[0].name = "relu\x1b[2J\x1b[31mred\nnext"
    m.graph.node[0].op_type = "NoSuchOp"
    f["hostile_node"] = str(d / "hostile_node.onnx")
    onnx.save(m, f["hostile_node"])
    m = onnx.load(str(good))
    m.opset_import.append(onnx.helper.make_opsetid("", 13))
    f["two_opsets"] = str(d / "two_opsets.onnx")
    onnx.save(m, f["two_opsets"])
    m = onnx.load(str(good))
    ext = m.graph.initializer[0]
    ext.data_location = onnx.TensorProto.EXTERNAL
    ext.ClearField("raw_data")
    ext.ClearField("float_data")
    for key, value in (("location", "weights.bin"), ("offset", "abc")):
        e = ext.external_data.add()
        e.key, e.value = key, value
    f["ext_offset"] = str(d / "ext_offset.onnx")
    onnx.save(m, f["ext_offset"])
    ext.external_data[0].value = "../../../../etc/passwd"
    ext.external_data[1].value = "0"
    f["ext_escape"] = str(d / "ext_escape.onnx")
    onnx.save(m, f["ext_escape"])
    ext.external_data[0].value = "/dev/zero"
    f["ext_dev"] = str(d / "ext_dev.onnx")
    onnx.save(m, f["ext_dev"])
    ext.external_data[0].value = "fifo"
    f["ext_fifo"] = str(d / "ext_fifo.onnx")
    onnx.save(m, f["ext_fifo"])

    def recipe(name, body):
        path = d / f"{name}.py"
        path.write_text(body)
        f["recipe_" + name] = str(path)

    base = ("import deep500lite as d5\nfrom deep500lite.frameworks import reference as d5ref\n"
            "FIXED = {'dataset': 'digits', 'model': 'mlp', 'epochs': 1}\n"
            "MUTABLE = {'batch_size': 32, 'executor': 'reference', 'optimizer': d5ref.GradientDescent}\n"
            "METRICS = [(d5.TestAccuracy(), 10)]\n")
    recipe("syntax", "FIXED = {\n")
    recipe("raises", "raise RuntimeError('boom at import')\n")
    recipe("exit0", "import os\nos._exit(0)\n")
    recipe("exit3", "import sys\nsys.exit(3)\n")
    recipe("fixed_list", "FIXED = [1, 2]\nMUTABLE = {}\nMETRICS = []\n")
    recipe("no_metrics", base.replace("METRICS = [(d5.TestAccuracy(), 10)]\n", ""))
    recipe("bad_key", base + "FIXED['epochz'] = 1\n")
    recipe("ctrl_key", base + "FIXED['epochs\\n'] = 1\n")
    recipe("epochs_neg", base + "FIXED['epochs'] = -1\n")
    recipe("epochs_float", base + "FIXED['epochs'] = 2.5\n")
    recipe("epochs_huge", base + "FIXED['epochs'] = 10**30\n")
    recipe("batch_zero", base + "MUTABLE['batch_size'] = 0\n")
    recipe("batch_str", base + "MUTABLE['batch_size'] = '32'\n")
    recipe("opt_getcwd", base + "MUTABLE['optimizer'] = 'os.getcwd'\n")
    recipe("opt_rmtree", base + "MUTABLE['optimizer'] = 'shutil:rmtree'\n")
    recipe("opt_momentum5", base + "MUTABLE['optimizer'] = d5ref.MomentumOptimizer\n"
                                   "MUTABLE['optimizer_kwargs'] = {'momentum': 5}\n")
    recipe("opt_lr_nan", base + "MUTABLE['optimizer_kwargs'] = {'learning_rate': float('nan')}\n")
    recipe("opt_lr_neg", base + "MUTABLE['optimizer_kwargs'] = {'learning_rate': -0.1}\n")
    recipe("opt_unknown_kw", base + "MUTABLE['optimizer_kwargs'] = {'learnig_rate': 0.1}\n")
    recipe("model_hidden_neg", base + "FIXED['model_kwargs'] = {'hidden': -1}\n")
    recipe("model_hidden_str", base + "FIXED['model_kwargs'] = {'hidden': 'wide'}\n")
    recipe("model_unknown_kw", base + "FIXED['model_kwargs'] = {'depth': 3}\n")
    recipe("model_unknown", base + "FIXED['model'] = 'nosuchnet'\n")
    recipe("model_ctrl", base + "FIXED['model'] = 'mlp\\x1b[2J'\n")
    recipe("dataset_unknown", base + "FIXED['dataset'] = 'nosuchdata'\n")
    recipe("dataset_kwargs_badkey", base + "FIXED['dataset_kwargs'] = {'a b': 1}\n")
    recipe("executor_unknown", base + "MUTABLE['executor'] = 'caffe'\n")
    recipe("executor_gpu99", base + "MUTABLE['executor'] = 'torch'\nMUTABLE['executor_kwargs'] = {'device': 'gpu:99'}\n")
    recipe("executor_args_str", base + "MUTABLE['executor_args'] = 'cpu'\n")
    recipe("sampler_getcwd", base + "FIXED['train_sampler'] = 'os.getcwd'\n")
    recipe("events_int", base + "FIXED['events'] = 5\n")
    recipe("microbatches_zero", base + "FIXED['microbatches'] = 0\n")
    recipe("metrics_str", base.replace("METRICS = [(d5.TestAccuracy(), 10)]", "METRICS = 'accuracy'"))
    recipe("distributed_getcwd", base + "FIXED['distributed'] = 'os:getcwd'\n")
    f["good_recipe"] = str(ROOT / "recipes" / "digits_lenet.py")

    results = json.loads((ROOT / "tests" / "data" / "scaling_check" / "run1.json").read_text())

    def results_file(name, change=None, text=None):
        folder = d / f"res_{name}"
        folder.mkdir()
        path = folder / "results.json"
        if text is not None:
            path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
        else:
            data = json.loads(json.dumps(results))
            change(data)
            path.write_text(json.dumps(data))
        f["res_" + name] = str(path)

    results_file("not_json", text="{not json")
    results_file("binary", text=rng.bytes(512))
    results_file("array", text="[1, 2, 3]")
    results_file("empty", text="")
    results_file("deep", text="[" * 100000 + "]" * 100000)
    results_file("bigint", text=json.dumps(results).replace('"version": ', '"version": ' + "9" * 5000 + ", \"v2\": "))
    results_file("nan", text=json.dumps(results).replace('"wall_time": ', '"wall_time": NaN, "w2": '))
    results_file("no_format", lambda r: r.pop("format"))
    results_file("wrong_format", lambda r: r.update(format="something-else"))
    results_file("framework_empty", lambda r: r.update(framework=""))
    results_file("framework_int", lambda r: r.update(framework=5))
    results_file("seeds_neg", lambda r: r.update(seeds={k: -1 for k in (r.get("seeds") or {"x": 1})}))
    results_file("summaries_str", lambda r: r.update(summaries="fast"))
    results_file("metrics_list", lambda r: r.update(metrics=[1, 2]))
    results_file("variant_ansi", lambda r: r.update(executor_variant="v\x1b[2J\x1b]0;title\x07"))
    results_file("variant_newline", lambda r: r.update(executor_variant="a\nb|c"))

    results_file("neg_step", lambda r: r["summaries"]["step_time"].update(median=-1.0))
    results_file("neg_sample_step", lambda r: r["samples"]["steps"][0].update(step_time=-0.5))
    results_file("huge_step", lambda r: r["summaries"]["step_time"].update(median=1e308, max=1e308))
    results_file("step_str", lambda r: r["summaries"]["step_time"].update(median="fast"))
    results_file("accuracy_200", lambda r: r["summaries"].update(final_test_accuracy=200.0))
    f["json_array"] = f["res_array"]
    (d / "hosts_bad").write_text("node1:abc\n")
    f["hosts_bad"] = str(d / "hosts_bad")
    (d / "hosts_ctrl").write_text("node\x1b[2J:2\n")
    f["hosts_ctrl"] = str(d / "hosts_ctrl")
    (d / "custom_op_syntax.py").write_text("def make(:\n")
    f["custom_op_syntax"] = str(d / "custom_op_syntax.py")
    (d / "custom_op_plain.py").write_text("def make():\n    return 1\n")
    f["custom_op_plain"] = str(d / "custom_op_plain.py")
    (d / "feeds.npz").write_bytes(rng.bytes(100))
    f["feeds_bad"] = str(d / "feeds.npz")
    np.savez(d / "feeds_wrong.npz", nothere=np.zeros(3))
    f["feeds_wrong"] = str(d / "feeds_wrong.npz")
    np.savez(d / "feeds_big_endian.npz", input=np.zeros((2, 5), dtype=">f4"))
    f["feeds_be"] = str(d / "feeds_big_endian.npz")
    return f


HOSTILE = ["\x1b[31mred\x1b[0m", "two\nlines", "=cmd|' /C calc'!A0", "<script>alert(1)</script>", "a|b"]


def cli_cases(f: dict) -> list:
    """(name, argv) of every CLI case."""
    c = []
    add = lambda name, *argv: c.append((name, [str(a) for a in argv]))  # noqa: E731
    # infer: the model file
    for key in ("fifo", "dir", "dirpy", "empty", "random", "text", "truncated", "hostile_node", "two_opsets",
                "ext_offset", "ext_escape", "ext_dev", "ext_fifo"):
        add(f"infer model {key}", "infer", f[key])
    add("infer model /dev/zero", "infer", "/dev/zero")
    add("infer model /dev/stdin", "infer", "/dev/stdin")
    add("infer model missing", "infer", f["dir"] + "/missing.onnx")
    add("infer model nul-free ctrl name", "infer", f["dir"] + "/\x1b[2J.onnx")
    for key in ("fifo", "dir", "feeds_bad", "feeds_wrong", "feeds_be", "text", "empty"):
        add(f"infer --inputs {key}", "infer", f["good"], "--framework", "reference", "--inputs", f[key])
    for opt, vals in (("--batch-size", ["0", "-3", "1.5", "2**40", "x"]), ("--seed", ["-1", str(2**64), "1e3"]),
                      ("--max-time", ["0", "-1", "nan", "inf", "1e400"]),
                      ("--framework", ["caffe", "", "torch\x1b[2J"]), ("--frameworks", ["torch,torch", ",", "x,y"]),
                      ("--device", ["gpu:99", "tpu", "cpu:-1", "cpu\n"])):
        for v in vals:
            add(f"infer {opt} {v!r}", "infer", f["good"], "--framework", "reference", f"{opt}={v}")
    # run: recipes
    for key in sorted(k for k in f if k.startswith("recipe_")):
        add(f"run {key[7:]}", "run", f[key], "--out", f["dir"] + f"/out_{key}")
    for key in ("fifo", "dir", "empty", "text"):
        add(f"run recipe {key}", "run", f[key])
    add("run recipe /dev/zero", "run", "/dev/zero")
    add("run recipe unknown name", "run", "no_such_recipe")
    for s in ("epochs=-1", "batch_size=0", "batch_size=2.5", "optimizer=os.getcwd", "executor=caffe",
              "optimizer_kwargs.momentum=5", "optimizer_kwargs.learning_rate=nan", "nosuchkey=1",
              "batch_size\n=1", "=1", "batch_size", "model_kwargs.hidden=-1", "epochs=10**9",
              "executor_kwargs.device='gpu:99'", "batch_size=[1,", "epochs=1e999"):
        add(f"run --set {s!r}", "run", f["good_recipe"], "--set", s, "--out", f["dir"] + "/out_set")
    for opt, v in (("--out", ""), ("--out", f["empty"]), ("--out", "/dev/zero"), ("--seed", str(2**64)),
                   ("--seed", "-5"), ("-n", "0"), ("-n", "100000"), ("--timeout", "-1"), ("--timeout", "nan"),
                   ("--startup-timeout", "0"), ("--comm-timeout", "inf"), ("--hostfile", f["fifo"]),
                   ("--hostfile", f["hosts_bad"]), ("--hostfile", f["hosts_ctrl"]), ("--hosts", "node1:abc"),
                   ("--hosts", "a:0"), ("--mpiexec", f["dir"]), ("--mpiexec", "/dev/zero"), ("--label", "x\x1b[2J"),
                   ("--db", "\n"), ("--mlperf", "nokey"), ("--progress", "fancy")):
        extra = ["-n", "2"] if opt in ("--hostfile", "--hosts", "--mpiexec", "--timeout", "--startup-timeout",
                                       "--comm-timeout") else []
        add(f"run {opt} {v!r}", "run", f["good_recipe"], *extra, f"{opt}={v}")
    # compare
    for opt, v in (("--frameworks", "caffe"), ("--frameworks", ""), ("--repeats", "0"), ("--runs", "-1"),
                   ("--format", "html"), ("--out", f["empty"]), ("--set", "epochs=-1"), ("--seed", "x")):
        add(f"compare {opt} {v!r}", "compare", f["good_recipe"], f"{opt}={v}")
    add("compare recipe fifo", "compare", f["fifo"])
    add("compare recipe raises", "compare", f["recipe_raises"], "--frameworks", "reference")
    # report
    for key in sorted(k for k in f if k.startswith("res_")):
        add(f"report {key[4:]}", "report", f[key])
    for key in ("fifo", "empty", "random"):
        add(f"report {key}", "report", f[key])
    add("report /dev/zero", "report", "/dev/zero")
    add("report empty folder", "report", f["dir"] + "/sub")
    add("report --group-by bogus", "report", f["res_no_format"], "--group-by", "bogus")
    add("report --plots file", "report", f["res_no_format"], "--plots", f["empty"])
    # bench
    for opt, v in (("--max-bytes", "1TiB"), ("--max-bytes", "-4"), ("--max-bytes", "lots"), ("--min-bytes", "3"),
                   ("--factor", "1"), ("--factor", "1.5"), ("-n", "0"), ("--algorithms", "nope"),
                   ("--passes", "0"), ("--max-time", "nan"), ("--model", f["fifo"]), ("--model", f["text"]),
                   ("--model", f["res_array"]), ("--json", f["dir"]), ("--evict", "lots"),
                   ("--calibration-factor", "0"), ("--interleave", "-1")):
        add(f"bench allreduce {opt} {v!r}", "bench", "allreduce", f"{opt}={v}")
    add("bench allreduce min > max", "bench", "allreduce", "--min-bytes=1MiB", "--max-bytes=4KiB")
    for opt, v in (("--suite", "nope"), ("--size", "huge"), ("--size", "-1"), ("--custom-op", "os:getcwd"),
                   ("--custom-op", "shutil:rmtree"), ("--custom-op", f["custom_op_syntax"] + ":make"),
                   ("--custom-op", f["custom_op_plain"] + ":make"), ("--custom-op", f["dirpy"] + ":make"),
                   ("--custom-op", "nosuchmodule:make"), ("--custom-op", "no colon"),
                   ("--frameworks", "caffe"), ("--threads", "0"), ("--format", "xml"), ("--plot", f["empty"])):
        add(f"bench op {opt} {v!r}", "bench", "op", f"{opt}={v}")
    for opt, v in (("--op", "os:getcwd"), ("--op", f["custom_op_plain"] + ":make"), ("--op-kinds", "rust"),
                   ("--framework", "caffe"), ("--models", "nosuchnet"), ("--elements", "0"), ("--threads", "-1"),
                   ("--batch-size", "0"), ("--device", "gpu:99")):
        add(f"bench overhead {opt} {v!r}", "bench", "overhead", f"{opt}={v}")
    for opt, v in (("--dataset", "nosuch"), ("--shape", "2.5,3"), ("--shape", "-1"), ("--samples", "0"),
                   ("--samples", str(10**12)), ("--root", f["empty"]), ("--dir", f["fifo"]), ("--format", "png"),
                   ("--framework", "caffe"), ("--seed", str(2**40))):
        add(f"bench dataset {opt} {v!r}", "bench", "dataset", f"{opt}={v}")
    for opt, v in (("--models", "nosuchnet"), ("--exporters", "nope"), ("--slice", "9/2"), ("--frameworks", "x")):
        add(f"bench zoo {opt} {v!r}", "bench", "zoo", f"{opt}={v}")
    for opt, v in (("-n", "0"), ("-n", "3,x"), ("--batch", "0"), ("--size", "-1"), ("--modes", "nope"),
                   ("--grid", "2x"), ("--grid", "0x0"), ("--layers", "0"), ("--framework", "caffe")):
        add(f"bench spatial {opt} {v!r}", "bench", "spatial", f"{opt}={v}")
    # pack
    add("pack unknown source", "pack", "nosuchdataset", f["dir"] + "/packed")
    add("pack out is a file", "pack", "digits", f["empty"])
    add("pack source fifo", "pack", f["fifo"], f["dir"] + "/packed2")
    for opt, v in (("--limit", "-1"), ("--limit", "0"), ("--image-size", "abc"), ("--image-size", "0x0"),
                   ("--split", "valid"), ("--dtype", "int7"), ("--option", "novalue"), ("--batch-size", "0"),
                   ("--root", f["fifo"])):
        add(f"pack {opt} {v!r}", "pack", "digits", f["dir"] + "/packed3", f"{opt}={v}")
    # launch / emulate
    add("launch -n 0", "launch", "-n", "0", f["good_recipe"])
    add("launch missing program", "launch", "-n", "1", f["dir"] + "/missing.py")
    add("launch program fifo", "launch", "-n", "1", f["fifo"])
    add("launch --timeout nan", "launch", "-n", "1", "--timeout", "nan", f["good_recipe"])
    add("launch --hostfile fifo", "launch", "-n", "1", "--hostfile", f["fifo"], f["good_recipe"])
    for opt, v in (("--hosts", "0"), ("--bandwidth", "lots"), ("--latency", "-5ms"), ("--burst", "0"),
                   ("--slots", "0"), ("--grace", "nan")):
        extra = {"--hosts": [], "--bandwidth": ["--hosts", "2"]}.get(opt, ["--hosts", "2", "--bandwidth", "1gbit"])
        add(f"emulate {opt} {v!r}", "emulate", *extra, f"{opt}={v}", "true")
    # model
    for opt, v in (("--nodes", "3..5"), ("--nodes", f"1..{2**70}"), ("--nodes", "0"), ("--nodes", "8..2"),
                   ("--network", "-1,1e9"), ("--network", "nope"), ("--network", "1,0"),
                   ("--fs-bandwidth", "0"), ("--fs-bandwidth", "-1"), ("--batch", "-1"), ("--batch", "nan"),
                   ("--check", "/dev/zero"), ("--check", f["fifo"]), ("--check", f["text"]),
                   ("--check", f["res_array"]), ("--io-from", f["fifo"]), ("--step-from", f["text"]),
                   ("--gemm-from", f["res_array"]), ("--compute-from", f["dir"]), ("--tolerance", "-1"),
                   ("--jitter", "inf"), ("--per-node", "0"), ("--host-cores", "0"), ("--min-efficiency", "2"),
                   ("--micro-batches", "0"), ("--halo-bytes", "lots"), ("--fusion-mb", "-1"),
                   ("--scheme", "magic"), ("--json", f["dir"])):
        add(f"model scaling {opt} {v!r}", "model", "scaling", "alexnet", f"{opt}={v}")
    for key in ("random", "text", "truncated", "fifo", "hostile_node", "recipe_raises", "recipe_syntax"):
        add(f"model scaling target {key}", "model", "scaling", f[key])
    add("model scaling target unknown", "model", "scaling", "nosuchnet")
    for opt, v in (("--nodes", "0"), ("--gamma", "nan"), ("--gamma", "-1"), ("--network", "x"),
                   ("--check", f["text"]), ("--check", f["res_array"]), ("--check", f["fifo"]),
                   ("--allreduce-model", f["empty"]), ("--min-bytes", "lots"), ("--tolerance", "nan")):
        add(f"model allreduce {opt} {v!r}", "model", "allreduce", f"{opt}={v}")
    for key in ("random", "text", "truncated", "fifo", "hostile_node"):
        add(f"model layers target {key}", "model", "layers", f[key])
    for opt, v in (("--batches", "0"), ("--batches", "a,b"), ("--framework", "caffe"), ("--max-time", "0"),
                   ("--optimizer", "lbfgs")):
        add(f"model layers {opt} {v!r}", "model", "layers", "mlp", f"{opt}={v}")
    # results database
    db = f["dir"] + "/campaign.sqlite"
    for key in ("res_not_json", "res_array", "res_binary", "res_framework_empty", "res_neg_step", "fifo", "empty"):
        add(f"db import {key}", "db", "import", f[key], "--db", db)
    add("db import /dev/zero", "db", "import", "/dev/zero", "--db", db)
    add("db export --out file", "db", "export", "--out", f["empty"], "--db", db)
    add("db list --db fifo", "db", "list", "--db", f["fifo"])
    add("db list --db text file", "db", "list", "--db", f["text"])
    add("db info --db folder", "db", "info", "--db", f["dir"])
    add("history --metric ctrl", "history", "--metric", "x\x1b[2J", "--db", db)
    add("history --by bogus", "history", "--by", "bogus", "--db", db)
    add("regress missing baseline", "regress", "nosuchrun", "nosuchrun2", "--db", db)
    add("regress --alpha 2", "regress", "a", "b", "--alpha", "2", "--db", db)
    add("dashboard --out /dev/zero", "dashboard", "--out", "/dev/zero", "--db", db)
    add("dashboard --out file", "dashboard", "--out", f["empty"], "--db", db)
    add("dashboard --min-effect -1", "dashboard", "--out", f["dir"] + "/site", "--min-effect", "-1", "--db", db)
    add("list bogus", "list", "bogus")
    # hostile strings in text options that name things
    for i, h in enumerate(HOSTILE):
        add(f"hostile {i} infer --framework", "infer", f["good"], "--framework", h)
        add(f"hostile {i} run --set executor", "run", f["good_recipe"], "--set", f"executor={h}")
        add(f"hostile {i} bench op --suite", "bench", "op", "--suite", h)
        add(f"hostile {i} model scaling target", "model", "scaling", h)
        add(f"hostile {i} db list --framework", "db", "list", "--framework", h, "--db", db, "--format", "csv")
    return c


def _children_of_session(sid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    out.append(int(entry))
            except OSError:
                pass
    return out


# Cases whose right outcome is the input shown, escaped (a string field is data, not an error).
ESCAPED = ("report variant_", "hostile 2 db list", "hostile 3 db list", "hostile 4 db list")


def run_cli(case) -> dict:
    name, argv = case
    escaped = name.startswith(ESCAPED)
    start = time.monotonic()
    proc = subprocess.Popen(["deep500lite", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, cwd=tempfile.gettempdir())
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
        hang = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        hang = True
    seconds = time.monotonic() - start
    time.sleep(0.2)
    left = _children_of_session(proc.pid)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    out_t, err_t = out.decode("utf-8", "surrogateescape"), err.decode("utf-8", "surrogateescape")
    lines = err_t.splitlines()
    faults = []
    if hang:
        faults.append("hang")
    if left:
        faults.append("orphan")
    if escaped:  # shown: exit 0 or 2, never a raw control character (checked below)
        if proc.returncode not in (0, 2) and not hang:
            faults.append(f"exit {proc.returncode}")
    else:
        if proc.returncode != 2 and not hang:
            faults.append(f"exit {proc.returncode}")
        if len(lines) != 1:
            faults.append(f"{len(lines)} lines")
    if "Traceback" in err_t or "internal error" in err_t:
        faults.append("traceback")
    if CONTROL.search(out_t) or CONTROL.search(err_t.rstrip("\n")):
        faults.append("unescaped")
    if lines and not lines[0].startswith("deep500lite") and not escaped:
        faults.append("foreign line")
    return {"kind": "cli", "case": name, "command": " ".join(["deep500lite", *argv])[:300],
            "outcome": ("escaped" if escaped else "clean") if not faults else "FAIL: " + ", ".join(faults),
            "exit": proc.returncode,
            "seconds": round(seconds, 1), "message": (lines[-1] if lines else "")[:300]}


API_CHILD = r'''
import json, math, os, signal, sys
import numpy as np
import deep500lite as d5
from deep500lite import datasets, networks
from deep500lite.errors import Deep500Error, UserError
f = json.loads(sys.argv[1])
EXEMPT = ("CorruptFileError", "ExampleParseError", "MissingDatasetError", "CheckpointError",
          "FrameworkNotAvailableError", "CompilationError", "ExecutionError")

def alarm(*_):
    raise TimeoutError("hang")

signal.signal(signal.SIGALRM, alarm)
cases = []
def case(name):
    def deco(fn):
        cases.append((name, fn))
        return fn
    return deco

special = {"int": 123, "float": 1.5, "none": None, "list": [1], "fifo": f["fifo"], "dir": f["dir"],
           "devzero": "/dev/zero", "empty": f["empty"], "nul": "a\x00b", "emptystr": "", "random": f["random"]}
readers = {
    "read_idx": lambda p: datasets.read_idx(p),
    "read_cifar_batch": lambda p: datasets.read_cifar_batch(p, 1, (10,)),
    "read_tfrecord": lambda p: list(datasets.read_tfrecord(p)),
    "read_shard_header": lambda p: datasets.read_shard_header(p),
    "verify_shard": lambda p: datasets.verify_shard(p),
    "ShardDataset": lambda p: datasets.ShardDataset(p, "input", "label"),
    "load_model": lambda p: d5.load_model(p),
    "load_recipe": lambda p: d5.load_recipe(p),
    "load_checkpoint": lambda p: d5.load_checkpoint(p, trainer()),
}
for rname, reader in readers.items():
    for sname, value in special.items():
        if rname == "read_tfrecord" and sname == "empty":
            continue  # an empty file is a TFRecord file of no records
        case(f"{rname}({sname})")(lambda reader=reader, value=value: reader(value))

case("read_tfrecord check_crc='no'")(lambda: list(datasets.read_tfrecord(f["empty"], check_crc="no")))
case("read_tfrecord random bytes")(lambda: list(datasets.read_tfrecord(f["random"])))
case("write_tfrecord str records")(lambda: datasets.write_tfrecord(f["dir"] + "/w.tfrecord", ["a", "b"]))
case("write_tfrecord int path")(lambda: datasets.write_tfrecord(5, [b"a"]))
case("write_tfrecord into a folder")(lambda: datasets.write_tfrecord(f["dir"], [b"a"]))
case("serialize_example ragged")(lambda: datasets.serialize_example({"x": [[1, 2], [3]]}))
case("serialize_example key int")(lambda: datasets.serialize_example({1: [1.0]}))
case("serialize_example value str obj")(lambda: datasets.serialize_example({"x": object()}))
case("serialize_example not a dict")(lambda: datasets.serialize_example([1, 2]))
case("parse_example random bytes")(lambda: datasets.parse_example(os.urandom(64)))
case("parse_example str")(lambda: datasets.parse_example("text"))
case("write_shards dataset int")(lambda: datasets.write_shards(5, f["dir"] + "/s1.d5shard"))
case("write_shards path int")(lambda: datasets.write_shards(digits(), 5))
case("write_shards batch_size 0")(lambda: datasets.write_shards(digits(), f["dir"] + "/s2.d5shard", batch_size=0))


def digits():
    return datasets.load_dataset("digits", "input", "label")[0]

def shard():
    import tempfile
    out = tempfile.mkdtemp()
    datasets.write_shards(digits(), out + "/s.d5shard", limit=10)
    return datasets.ShardDataset(out + "/s.d5shard", "input", "label")

for idx in ("1.5", "10**12", "-10**12", "'a'", "None", "[1, 2.5]", "np.float64(1)", "slice(0, 'x')"):
    case(f"ShardDataset[{idx}]")(lambda idx=idx: shard()[eval(idx)])

for kw in ("{'classes': 10**9}", "{'classes': 0}", "{'vocab_size': -1}", "{'seq_len': 2.5}", "{'samples': 10**15}"):
    case(f"synthetic_tokens {kw}")(lambda kw=kw: datasets.load_dataset("synthetic_tokens", "input", "label", **eval(kw)))
for kw in ("{'shape': (2.5, 3)}", "{'shape': (-1,)}", "{'samples': -5}", "{'classes': 'ten'}"):
    case(f"synthetic {kw}")(lambda kw=kw: datasets.load_dataset("synthetic", "input", "label", **eval(kw)))
case("load_dataset unknown")(lambda: datasets.load_dataset("nosuchdata", "input", "label"))
case("load_dataset name int")(lambda: datasets.load_dataset(5, "input", "label"))

for model, kw in (("mlp", {"hidden": -1}), ("mlp", {"hidden": "wide"}), ("mlp", {"hidden": [1.5]}),
                  ("alexnet", {"width": -1.0}), ("alexnet", {"dropout": 1.5}), ("alexnet", {"hidden": 0}),
                  ("vgg", {"depth": 7}), ("vgg", {"batch_norm": "yes"}), ("lenet", {"nosuchoption": 1}),
                  ("resnet", {"depth": -20}), ("bert", {"heads": 0}), ("bert", {"layers": 2.5}),
                  ("mlp", {"hidden": [10**12]}), ("nosuchnet", {})):
    case(f"create_model {model} {kw}")(lambda model=model, kw=kw: networks.create_model(model, 2, **kw))
for args in ((0,), (-1,), (2.5,), ("2",), (2**40,)):
    case(f"create_model mlp batch {args}")(lambda args=args: networks.create_model("mlp", *args))
case("create_model shape 2.5")(lambda: networks.create_model("mlp", 2, shape=(2.5,)))
case("create_model classes 0")(lambda: networks.create_model("mlp", 2, classes=0))
case("create_model seed 2**64")(lambda: networks.create_model("mlp", 2, seed=2**64))

def ex():
    net, _, out = networks.create_model("mlp", 2, classes=3, shape=(5,), seed=0)
    net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
    return d5.executor(net, "reference")

import deep500lite.frameworks.reference as ref
for cls, kw in (("MomentumOptimizer", {"momentum": 5}), ("MomentumOptimizer", {"momentum": 1.0}),
                ("MomentumOptimizer", {"momentum": -0.1}), ("GradientDescent", {"learning_rate": 0}),
                ("GradientDescent", {"learning_rate": float("inf")}), ("GradientDescent", {"learning_rate": "0.1"}),
                ("AdamOptimizer", {"beta1": 1.0}), ("AdamOptimizer", {"beta2": True}),
                ("AdamOptimizer", {"epsilon": -1e-8}), ("RMSPropOptimizer", {"beta": 2}),
                ("AdaGradOptimizer", {"epsilon_placement": "middle"}), ("AcceleGradOptimizer", {"diameter": 0}),
                ("GradientDescent", {"learning_rate": 10**400})):
    case(f"reference.{cls} {kw}")(lambda cls=cls, kw=kw: getattr(ref, cls)(ex(), **kw))
case("executor device gpu:99")(lambda: d5.executor(networks.create_model("mlp", 2)[0], "reference", device="gpu:99"))
case("executor unknown framework")(lambda: d5.executor(networks.create_model("mlp", 2)[0], "caffe"))
case("executor not a network")(lambda: d5.executor("model.onnx", "reference"))
case("inference feeds wrong dtype")(lambda: ex().inference({"input": np.zeros((2, 5), ">f4"), "label": np.zeros(2, np.int64)}))
case("inference feeds missing")(lambda: ex().inference({}))
case("inference feeds str")(lambda: ex().inference("input"))
case("inference wrong shape")(lambda: ex().inference({"input": np.zeros((3, 7), np.float32)}))
case("run_recipe FIXED list")(lambda: d5.run_recipe([1], {}, []))
case("run_recipe key newline")(lambda: d5.run_recipe({"epochs\n": 1}, {}, []))
case("run_recipe optimizer os.getcwd")(lambda: d5.run_recipe({"dataset": "digits", "model": "mlp", "epochs": 1,
    "batch_size": 8, "executor": "reference", "optimizer": "os.getcwd"}, {}, []))
case("run_recipe sampler builtin")(lambda: d5.run_recipe({"dataset": "digits", "model": "mlp", "epochs": 1,
    "batch_size": 8, "executor": "reference", "optimizer": "GradientDescent", "train_sampler": "builtins.print"}, {}, []))
case("run_recipe model_kwargs hidden -1")(lambda: d5.run_recipe({"dataset": "digits", "model": "mlp", "epochs": 1,
    "batch_size": 8, "executor": "reference", "optimizer": "GradientDescent", "model_kwargs": {"hidden": -1}}, {}, []))
case("run_recipe executor_kwargs gpu:99")(lambda: d5.run_recipe({"dataset": "digits", "model": "mlp", "epochs": 1,
    "batch_size": 8, "executor": "torch", "optimizer": "GradientDescent", "executor_kwargs": {"device": "gpu:99"}}, {}, []))
case("factory of a builtin")(lambda: d5.factory(len))
def trainer():
    e = ex()
    ds = digits()
    return d5.Trainer(d5.ShuffleSampler(ds, 8), d5.ShuffleSampler(ds, 8), e, ref.GradientDescent(e))

case("save_checkpoint path with NUL")(lambda: d5.save_checkpoint("a\x00b", trainer()))
case("save_checkpoint path empty")(lambda: d5.save_checkpoint("", trainer()))
case("save_checkpoint path int")(lambda: d5.save_checkpoint(5, trainer()))

results = []
only = os.environ.get("CAMPAIGN_ONLY", "")
for name, fn in cases:
    if only and not name.startswith(only):
        continue
    signal.alarm(60)
    try:
        fn()
        outcome = "FAIL: accepted"
        message = ""
    except TimeoutError:
        outcome, message = "FAIL: hang", ""
    except BaseException as exc:
        signal.alarm(0)
        message = str(exc)
        kind = type(exc).__name__
        faults = []
        if not isinstance(exc, Deep500Error):
            faults.append(f"{kind} (not a deep500lite error)")
        if "\n" in message or len(message) > 2000:
            faults.append("not one line")
        if any(ord(ch) < 32 or 0x7f <= ord(ch) <= 0x9f for ch in message):
            faults.append("unescaped")
        if isinstance(exc, Deep500Error) and kind not in EXEMPT and "Received" not in message:
            faults.append("no Received")
        outcome = "clean" if not faults else "FAIL: " + ", ".join(faults)
        message = kind + ": " + message
    finally:
        signal.alarm(0)
    results.append({"kind": "api", "case": name, "command": name, "outcome": outcome, "exit": "",
                    "seconds": "", "message": message[:300].encode("unicode_escape").decode()})
print("@@RESULTS@@" + json.dumps(results))
'''


def run_api(files: dict, only: str) -> list:
    env = dict(os.environ, CAMPAIGN_ONLY=only)
    proc = subprocess.run([sys.executable, "-c", API_CHILD, json.dumps(files)], capture_output=True, text=True,
                          timeout=3000, env=env, cwd=files["dir"])
    marker = proc.stdout.rfind("@@RESULTS@@")
    if marker < 0:
        return [{"kind": "api", "case": "API child", "command": "", "outcome": "FAIL: the child died",
                 "exit": proc.returncode, "seconds": "", "message": proc.stderr[-300:]}]
    return json.loads(proc.stdout[marker + len("@@RESULTS@@"):])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="run only the cases whose name starts with this")
    ap.add_argument("--no-api", action="store_true")
    ap.add_argument("--no-cli", action="store_true")
    ap.add_argument("--out", default=str(HERE / "outcomes.csv"))
    args = ap.parse_args()
    files = _scratch()
    rows = []
    if not args.no_api:
        rows += run_api(files, args.only)
        print(f"api: {len(rows)} cases", flush=True)
    if not args.no_cli:
        cases = [c for c in cli_cases(files) if c[0].startswith(args.only)]
        with futures.ThreadPoolExecutor(args.jobs) as pool:
            for i, row in enumerate(pool.map(run_cli, cases)):
                rows.append(row)
                if row["outcome"] not in ("clean", "escaped"):
                    print(f"{row['case']}: {row['outcome']}: {row['message'][:200]}", flush=True)
    with open(args.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, ["kind", "case", "outcome", "exit", "seconds", "command", "message"])
        w.writeheader()
        for row in rows:
            w.writerow({k: (str(v).encode("unicode_escape").decode() if k in ("command", "message", "case") else v)
                        for k, v in row.items()})
    counts = {}
    for row in rows:
        key = row["outcome"].split(":")[0]
        counts[key] = counts.get(key, 0) + 1
    print(f"{len(rows)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for row in rows:
        if row["outcome"] not in ("clean", "escaped"):
            print(f"  {row['kind']} {row['case']!r}: {row['outcome']}: {row['message'][:160]!r}")
    return 0 if all(r["outcome"] in ("clean", "escaped") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
