"""``deep500lite infer``: run an ONNX model on one or more frameworks and time it."""

from __future__ import annotations

import os
import zipfile

import numpy as np

from deep500lite.cli.args import nonnegative_int, positive_int, positive_seconds
from deep500lite.errors import Deep500Error, FeedError, UserError
from deep500lite.metrics.accuracy import output_errors
from deep500lite.metrics.tables import format_ci, format_table
from deep500lite.metrics.timing import time_function
from deep500lite.registry import baseline, canonical_executor_spelling

__all__ = ["add_parser", "load_feeds", "run"]

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK"


def add_parser(subparsers):
    p = subparsers.add_parser(
        "infer", help="run an ONNX model's inference on one or more frameworks and time it",
        description=("Run MODEL.onnx on a framework (random inputs unless --inputs is given), print "
                     "its outputs' names and shapes and the median latency with its 95% CI. With "
                     "several frameworks, print one table with each one's largest absolute error "
                     "against the reference executor."))
    p.add_argument("model", metavar="MODEL.onnx", help="the ONNX model file")
    p.add_argument("--framework", "-f", default=None,
                   help="one framework: reference, torch, tensorflow, onnxruntime or jax, or a variant such as "
                        "torch:compile, tensorflow:xla, onnxruntime:O0 (default: reference)")
    p.add_argument("--frameworks", default=None, metavar="A,B,...",
                   help="several frameworks, comma-separated, compared in one table")
    p.add_argument("--inputs", default=None, metavar="FILE.npz",
                   help="feeds as an .npz file with one array per model input")
    p.add_argument("--batch-size", type=positive_int, default=1,
                   help="size of an open batch dimension for random inputs (default 1)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--device", default="cpu", help="cpu or gpu:N (default cpu)")
    p.add_argument("--max-time", type=positive_seconds, default=2.0,
                   help="seconds of timed runs per framework (default 2; at least 10 runs)")
    p.set_defaults(func=run)
    return p


def load_feeds(path: str) -> dict[str, np.ndarray]:
    """Read feeds from an .npz file (one array per input name); pickled (object) arrays are refused.

    Raises:
        FeedError: the file is missing, not an .npz file, damaged, or holds an object array.
    """
    if not os.path.isfile(path):
        what = ("is a folder" if os.path.isdir(path) else "is not a regular file (a pipe, socket or device)"
                if os.path.exists(path) else "does not exist")
        raise FeedError(f"Inputs file {path!r} {what}; --inputs takes an .npz file with one array per "
                        f"model input. Received: --inputs {path}")
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError as exc:
        raise FeedError(f"Inputs file {path!r} cannot be read ({exc.strerror or exc}); --inputs takes a readable "
                        f".npz file. Received: --inputs {path}") from None
    if head.startswith(_NPY_MAGIC):
        raise FeedError(f"Inputs file {path!r} is a single .npy array; expected an .npz file with one array per "
                        "model input (np.savez(path, input_name=array, ...)). Received: an .npy file")
    if not head.startswith(_ZIP_MAGIC):
        raise FeedError(f"Inputs file {path!r} is not a readable .npz file: it is not a zip archive (an .npz file is "
                        f"made by np.savez, with one array per model input). Received: a file starting {head!r}")
    feeds = {}
    try:
        with np.load(path, allow_pickle=False) as data:
            for key in data.files:
                try:
                    feeds[key] = data[key]
                except ValueError as exc:
                    if "allow_pickle" not in str(exc):
                        raise
                    raise FeedError(f"Inputs file {path!r}: array {key!r} holds Python objects, which would have "
                                    "to be unpickled; deep500lite loads no pickles, so save numeric arrays. "
                                    f"Received: an object array {key!r}") from None
    except FeedError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        cause = " ".join(str(exc).split()) or type(exc).__name__
        raise FeedError(f"Inputs file {path!r} is not a readable .npz file (damaged); --inputs takes an .npz file with one array "
                        f"per model input (np.savez). Received: {cause}") from None
    return feeds


def _frameworks(args) -> list[str]:
    if args.framework and args.frameworks:
        raise UserError("Give either --framework or --frameworks, not both. "
                        f"Received: --framework {args.framework} --frameworks {args.frameworks}")
    names = args.frameworks.split(",") if args.frameworks else [args.framework or baseline().name]
    keys = [canonical_executor_spelling(n) for n in names if n.strip()]
    if not keys:
        raise UserError(f"--frameworks names no framework. Received: {args.frameworks!r}")
    return list(dict.fromkeys(keys))


def _time(executor, feeds, max_time):
    return time_function(lambda: executor.inference(feeds), label=executor.framework,
                         sync=executor.synchronize, warmup=2, min_runs=10, max_time=max_time)


def run(args) -> int:
    import deep500lite as d5

    frameworks = _frameworks(args)
    network = d5.load_model(args.model)
    feeds = load_feeds(args.inputs) if args.inputs else network.random_feeds(args.batch_size, args.seed)
    network.check_feeds(feeds)
    source = args.inputs or f"random, seed {args.seed}"
    shapes = ", ".join(f"{k} {np.asarray(v).dtype.name}{list(np.shape(v))}" for k, v in feeds.items())
    print(f"model: {args.model} ({len(network.graph.node)} nodes, opset {network.opset})")
    print(f"inputs ({source}): {shapes}")

    if len(frameworks) == 1:
        ex = d5.executor(network, frameworks[0], device=args.device)
        outputs = ex.inference(feeds)
        for name, value in outputs.items():
            print(f"output {name}: {value.dtype.name}{list(value.shape)}")
        m = _time(ex, feeds, args.max_time)
        s = m.summary
        compiled = f", compile time {ex.compile_seconds:.2f} s apart" if ex.compile_seconds else ""
        print(f"{frameworks[0]} on {ex.devname}: median latency {format_ci(s.median, s.ci_low, s.ci_high)} "
              f"(95% CI, {s.n} runs{compiled})")
        if m.warning():
            print(f"warning: {m.warning()}")
        return 0

    results = _run_all(d5, network, frameworks, feeds, args.device)
    print(_comparison(results, frameworks, feeds, args))
    return 2 if any(results[fw][2] is not None for fw in frameworks) else 0


def _one_line(exc: BaseException) -> str:
    """An error on one line, whole (an :class:`ExecutionError` names the node and the cause)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, Deep500Error) else f"{type(exc).__name__}: {text}"


def _run_all(d5, network, frameworks, feeds, device) -> dict:
    """framework -> ``(executor, outputs, error)``: the reference runs first (on the CPU), listed or not.

    ``outputs`` is None where the framework failed; ``error`` (one line) is set where its row is an error.
    """
    ref = baseline().name
    results = {}
    for fw in [ref] + [f for f in frameworks if f != ref]:
        try:
            # The reference is the baseline on the CPU; a listed one on another device is that device's row.
            ex = d5.executor(network, fw, device="cpu" if fw == ref else device)
            results[fw] = (ex, ex.inference(feeds), None)
            if fw == ref and fw in frameworks and device != "cpu":
                d5.executor(network, fw, device=device)  # the DeviceError of its row, if any
        except Exception as exc:  # noqa: BLE001 - one framework failing must not lose the others' rows
            results[fw] = (None, None, _one_line(exc)) if fw not in results else results[fw][:2] + (_one_line(exc),)
    return results


def _comparison(results, frameworks, feeds, args) -> str:
    """The table: each framework's largest error against the baseline and its latency, or its error.

    The baseline is the reference executor, or, when it failed, the first framework that ran
    (a note under the table says so). An error row holds the whole one-line message.
    """

    ref = baseline().name
    ran = [fw for fw in [ref] + frameworks if results[fw][1] is not None]
    base = ran[0] if ran else ref
    rows, errors = [], {}
    for i, fw in enumerate(frameworks):
        ex, outputs, error = results[fw]
        if error is None:
            try:
                errs = output_errors(outputs, results[base][1]).values()
                err = max((e["max_abs"] for e in errs), default=0.0)
                s = _time(ex, feeds, args.max_time).summary
                rows.append([fw, str(ex.devname), f"{err:.3g}", format_ci(s.median, s.ci_low, s.ci_high), s.n])
                continue
            except Exception as exc:  # noqa: BLE001 - as in _run_all
                error = _one_line(exc)
                results[fw] = (ex, outputs, error)
        rows.append([fw, args.device, "error", "", ""])
        errors[i] = error
    lines = format_table(["framework", "device", f"max |err| vs {base}", "median latency [95% CI]", "runs"],
                         rows).splitlines()
    for i, error in errors.items():
        lines[2 + i] += f": {error}"  # the whole message on the row's line; the other columns stay narrow
    reference_error = results[ref][2]
    if results[ref][1] is None:
        listed = ref in frameworks
        if base != ref:
            lines.append(f"note: the reference executor failed, so max |err| is measured against {base}, the "
                         "first framework that ran" + ("." if listed else f". Reference: {reference_error}"))
        elif not listed:
            lines.append(f"note: the reference executor failed and no framework ran. Reference: {reference_error}")
    return "\n".join(lines)
