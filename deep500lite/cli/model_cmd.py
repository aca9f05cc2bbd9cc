"""``deep500lite model``: performance models. ``model scaling`` predicts data-parallel training from 1 to thousands
of nodes (``--scheme pipeline|spatial|tensor``: those schemes' step split instead, from
:mod:`deep500lite.perfmodel.scaling_parallel`); ``model allreduce`` predicts each allreduce algorithm over
message sizes and their crossover; ``model layers`` measures each layer's forward and backward time through an
executor (:mod:`deep500lite.perfmodel.layers`), the input of ``model scaling --compute-from``.

The work is in :mod:`deep500lite.perfmodel.scaling` (the model) and
:mod:`deep500lite.perfmodel.scaling_networks` (built-in networks, interconnects and accelerators).
This module only parses arguments, turns a recipe or an ONNX file into a model description,
and prints, writes and plots the result. See docs/scaling.md.
"""

from __future__ import annotations

import dataclasses
import math
import sys

from deep500lite.cli.args import (Integer, Number, Parsed, Path, Size, Text, fraction, positive_seconds)
from deep500lite.errors import UserError, format_choices
from deep500lite.lv3.allreduce import P2P_ALGORITHMS, AlphaBeta
from deep500lite.metrics.tables import TABLE_FORMATS, format_seconds, format_table
from deep500lite.perfmodel.checks import (_check_files, _read_json, _step_from, compare_runs, measured_from_run,
                                          oversubscribed_note, repeatability)
from deep500lite.utils import atomic_write_text, finite_json

__all__ = ["add_parser", "run", "run_allreduce", "run_layers", "parse_interconnect", "parse_accelerator"]


#: A message size: a multiple of 4 bytes (float32), at most 1 TiB (a prediction allocates nothing).
_MESSAGE = Size(minimum=4, maximum=2**40, multiple_of=4)
#: A relative error that counts as a match (0.2: 20%).
_TOLERANCE = Number(minimum=0, min_open=True, maximum=100, wording="a fraction > 0 (0.2 means 20%)")
#: The most nodes a sweep may reach: 2**20 (a million nodes).
MAX_NODES = 2**20


def _nodes(text: str):
    from deep500lite.perfmodel import scaling

    return scaling.parse_nodes(text)


_NODES = Parsed(_nodes, f"LOW..HIGH (powers of two), a comma-separated list or one count, from 1 to {MAX_NODES:,}",
                keep_text=True)


def _interconnect_type(flag: str):
    return Parsed(lambda text: parse_interconnect(text, flag), "an interconnect name or ALPHA_S,BANDWIDTH_B_PER_S",
                  keep_text=True)


def _io_patterns():
    from deep500lite.perfmodel.scaling import IO_PATTERNS

    return IO_PATTERNS


def _model_schemes():
    from deep500lite.perfmodel.scaling_parallel import MODEL_SCHEMES

    return MODEL_SCHEMES


def _layer_optimizers():
    from deep500lite.perfmodel.layers import OPTIMIZERS

    return OPTIMIZERS


def add_parser(sub):
    """Add ``model`` (with its ``scaling`` subcommand) to the CLI's subparsers ``sub``."""
    p = sub.add_parser("model", help="performance models",
                       description="Performance models. 'model scaling' predicts synchronous data-parallel training "
                                   "on 1 to thousands of nodes. See docs/scaling.md.")
    msub = p.add_subparsers(dest="model_command", metavar="MODEL_COMMAND", parser_class=type(p))
    s = msub.add_parser(
        "scaling", help="predicted step time, speedup and efficiency over node counts, and where scaling stops",
        description=("Predict the step time of synchronous data-parallel training, split into compute (a roofline per "
                     "layer with a batch-dependent GEMM efficiency), communication (allreduce per algorithm, with "
                     "tensor fusion and overlap with the backward pass) and I/O, for each node count; the speedup "
                     "and efficiency of strong scaling (fixed global batch) or weak scaling (fixed per-accelerator "
                     "batch); and the node count where scaling stops, with the reason. With --scheme pipeline, "
                     "spatial or tensor: the predicted step of that model-parallel scheme on P ranks (P from --nodes, "
                     "one rank per node, the global batch split: strong scaling), split into compute, communication "
                     "and idle (the pipeline bubble, (P-1)/(M+P-1) of the step)."))
    s.add_argument("target", type=Path("input-or-name"), metavar="MODEL_OR_RECIPE",
                   help="a built-in network (alexnet, googlenet, resnet50, resnet101, vgg16), an .onnx file, or a "
                        "recipe (file or bundled name) whose model is a zoo name or an .onnx file")
    s.add_argument("--nodes", type=_NODES, default="1..4096", help="LOW..HIGH (powers of two), a list 1,2,4 or one count "
                                                      "(default 1..4096)")
    s.add_argument("--network", type=_interconnect_type("--network"), default="edr-ib",
                   help="fdr-ib, edr-ib, 25gbe, 100gbe, nvlink, pcie3, none (free communication) or "
                        "ALPHA_S,BANDWIDTH_B_PER_S (default edr-ib)")
    s.add_argument("--accelerator", type=Text(max_length=256), default="v100",
                   help="k80, p100, v100, a100, h100, xeon-e5-2680v3, this (measured here) or "
                        "PEAK_FLOPS,BANDWIDTH_B_PER_S (default v100)")
    s.add_argument("--batch", type=Number(minimum=1, wording="a finite number >= 1 (samples)"), default=None,
                   help="strong: the global batch; weak: the batch per accelerator (default: the recipe's batch, "
                        "else 256 for alexnet and vgg16, 32 for googlenet, 64 for resnets)")
    mode = s.add_mutually_exclusive_group()
    mode.add_argument("--strong", dest="mode", action="store_const", const="strong",
                      help="fixed global batch (the default)")
    mode.add_argument("--weak", dest="mode", action="store_const", const="weak", help="fixed batch per accelerator")
    s.add_argument("--per-node", type=Integer(minimum=1, maximum=1024), default=1, help="accelerators per node (default 1)")
    s.add_argument("--intra", type=_interconnect_type("--intra"), default="pcie3", help="link between the accelerators of a node (default pcie3)")
    s.add_argument("--algorithm", choices=("auto", *P2P_ALGORITHMS), default="auto",
                   help="auto, ring, recursive_doubling, rabenseifner or tree (default auto)")
    s.add_argument("--fusion-mb", type=Number(minimum=0, maximum=2**20), default=25.0, help="tensor-fusion bucket in MiB; 0: per layer "
                                                                 "(default 25, PyTorch DDP's; Horovod's is 64)")
    s.add_argument("--no-overlap", action="store_true", help="allreduce only after the backward pass")
    s.add_argument("--io", choices=tuple(_io_patterns()), default="packed", help="packed (shards) or small-files (one file per sample)")
    s.add_argument("--sample-bytes", type=Number(minimum=0, maximum=2**40), default=None, help="bytes per sample on disk (default 110000 for "
                                                                    "the ImageNet networks)")
    s.add_argument("--file-latency", type=Number(minimum=0, maximum=3600, unit="seconds"), default=None,
                   metavar="SECONDS",
                   help="per-file cost of small-files (default 1e-3)")
    s.add_argument("--fs-bandwidth", type=Number(minimum=0, min_open=True, maximum=1e9, unit="GB/s"), default=None,
                   metavar="GB_PER_S",
                   help="aggregate file-system bandwidth shared by all accelerators (default unlimited)")
    s.add_argument("--io-from", type=Path("input"), default=None, metavar="FILE",
                   help="the JSON of 'deep500lite bench dataset --json': per-file latency and read bandwidth "
                        "measured here instead of the defaults")
    s.add_argument("--allreduce-model", type=Path("input"), default=None, metavar="FILE",
                   help="a calibration file from 'bench allreduce --save-model': allreduces cost what it predicts "
                        "(for node counts it was calibrated for: ranks on this machine) instead of --network's")
    s.add_argument("--measured-step", type=positive_seconds, default=None, metavar="SECONDS",
                   help="a measured 1-accelerator step at the per-accelerator batch (e.g. from 'deep500lite run'): "
                        "scales the roofline compute model to match it")
    s.add_argument("--step-from", type=Path("input"), default=None, metavar="FILE",
                   help="the results.json of a 'deep500lite run' (its --out folder): the median of its 1-rank steps is "
                        "--measured-step and their spread is --jitter (given flags win); a run on P > 1 ranks gives "
                        "the 1-rank baseline it timed right after its ranks finished")
    s.add_argument("--check", type=Text(), action="append", default=None, metavar="FILE[,FILE...]",
                   help="results.json files of 'deep500lite run -n P' (their --out folders), any rank counts in the "
                        "sweep: each run's measured step (the slowest rank's) beside the prediction for P ranks, "
                        "with the error; exit status 1 when one is off by more than --tolerance")
    s.add_argument("--tolerance", type=_TOLERANCE, default=0.2, metavar="FRACTION",
                   help="with --check: the largest relative error that counts as a match (default 0.2: 20%%)")
    s.add_argument("--jitter", type=Number(minimum=0, maximum=10), default=None, metavar="CV",
                   help="coefficient of variation of one accelerator's compute per step (0.05: 5%%); a synchronous "
                        "step waits for the slowest of P accelerators, jitter * compute * E[max of P normals] "
                        "(default 0, or from --step-from)")
    s.add_argument("--gemm-from", type=Path("input"), default=None, metavar="FILE",
                   help="the JSON of 'deep500lite bench op --suite skinny --json': the GEMM efficiency and m_half "
                        "fitted to those measured rates against that file's peak (with --accelerator this: the "
                        "file's peak and bandwidth, nothing measured now) instead of the numpy sweep")
    s.add_argument("--compute-from", type=Path("input"), default=None, metavar="FILE",
                   help="the JSON of 'deep500lite model layers --json': each layer's forward and backward time "
                        "measured here (interpolated log-log between the measured batches, the roofline's shape "
                        "outside them) and the executor's per-call cost instead of the roofline; each pass's layers "
                        "scaled per batch to add up to the whole network measured in the file (see --layer-sum)")
    s.add_argument("--layer-sum", action="store_true",
                   help="with --compute-from: sum the layers as measured instead of scaling them to the whole network "
                        "(on a GPU the sum of one-layer calls overestimates the network, whose launches overlap)")
    s.add_argument("--host-cores", type=Integer(minimum=1, maximum=2**20), default=None, metavar="N",
                   help="all ranks run on one host with N cores (predicting 'run -n P' here): ranks beyond N "
                        "time-share the cores, slowing each rank's compute")
    s.add_argument("--min-efficiency", type=fraction, default=0.5,
                   help="scaling has stopped where the efficiency falls below this (default 0.5; 0: never)")
    s.add_argument("--min-gain", type=Number(minimum=0, maximum=1e6), default=1.05,
                   help="...or where the next node count multiplies the speedup by less than this (default 1.05)")
    s.add_argument("--scheme", choices=("data", *_model_schemes()), default="data",
                   help="data (the default: data parallelism, everything above), pipeline (one stage per rank, "
                        "--micro-batches), spatial (every sample split by rows, --halo-bytes) or tensor (Megatron "
                        "pairs of the fully connected layers); with these, --measured-step is the one-process step at the "
                        "global --batch")
    s.add_argument("--micro-batches", type=Integer(minimum=1, maximum=2**20), default=None, metavar="M",
                   help="pipeline: micro-batches per step (default 4)")
    s.add_argument("--activation-bytes", type=Number(minimum=0, maximum=2**50), default=None, metavar="BYTES",
                   help="pipeline: bytes per sample of the activation sent between stages (default: the mean "
                        "output of the layers the stages are cut after, cut by compute time, float32)")
    s.add_argument("--halo-bytes", type=Parsed(_halo_list, "comma-separated finite numbers >= 0", keep_text=True),
                   default=None, metavar="B1,B2,...",
                   help="spatial (required): per convolution or pool, the bytes of the halo rows one neighbour "
                        "sends per sample")
    s.add_argument("--gathered-bytes", type=Number(minimum=0, maximum=2**50), default=None, metavar="BYTES",
                   help="spatial: bytes per sample of the last split activation, gathered on every rank (default: "
                        "the output of the last layer before the first fully connected one, float32)")
    s.add_argument("--format", choices=TABLE_FORMATS, default="table", help="table, markdown or csv (default table)")
    s.add_argument("--json", type=Path("output"), default=None, metavar="FILE", help="write the prediction as JSON")
    s.add_argument("--plot", type=Path("output"), default=None, metavar="FILE",
                   help="write a PNG: speedup and efficiency, and the step time and its parts (needs matplotlib)")
    s.set_defaults(func=run, mode=None)
    a = msub.add_parser(
        "allreduce", help="predicted time of each allreduce algorithm over message sizes, and the crossover",
        description=("Predict each allreduce algorithm's time over message sizes on a network (alpha-beta) or with a "
                     "calibration file of this machine, and show where the fastest algorithm changes from the "
                     "latency-optimal to the bandwidth-optimal one."))
    a.add_argument("--nodes", type=Integer(minimum=2, maximum=2**20), default=None, help="ranks (default 64; with --check, the file's)")
    a.add_argument("--network", type=_interconnect_type("--network"), default="edr-ib", help="as for 'model scaling' (default edr-ib)")
    a.add_argument("--gamma", type=Number(minimum=0, maximum=1), default=0.0, metavar="S_PER_BYTE",
                   help="seconds per byte reduced (default 0)")
    a.add_argument("--allreduce-model", type=Path("input"), default=None, metavar="FILE",
                   help="a calibration file from 'bench allreduce --save-model' instead of --network")
    a.add_argument("--min-bytes", type=_MESSAGE, default="4", help="smallest message (default 4)")
    a.add_argument("--max-bytes", type=_MESSAGE, default="256MiB", help="largest message (default 256MiB)")
    a.add_argument("--format", choices=TABLE_FORMATS, default="table", help="table, markdown or csv (default table)")
    a.add_argument("--check", type=Path("input"), default=None, metavar="FILE",
                   help="the JSON of 'bench allreduce --json': each measured row beside the prediction (native and "
                        "auto as the fastest algorithm), judged between --min-bytes and --max-bytes; exit status 1 "
                        "when one is off by more than --tolerance; and the measured crossover beside the model's")
    a.add_argument("--tolerance", type=_TOLERANCE, default=0.2, metavar="FRACTION",
                   help="with --check: the largest relative error that counts as a match (default 0.2: 20%%)")
    a.set_defaults(func=run_allreduce)
    _add_layers_parser(msub)
    p.set_defaults(func=lambda args: _no_subcommand(p))
    return p


def _no_subcommand(parser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _check_pair(flag: str, pair, names: tuple[str, str], example: str, first_may_be_zero: bool) -> None:
    """Both numbers of a ``FIRST,SECOND`` option finite and positive (the first may be 0 where allowed)."""

    (a, b), (name_a, name_b) = pair, names
    bound = ">= 0" if first_may_be_zero else "> 0"
    for name, x, ok in ((name_a, a, math.isfinite(a) and (a >= 0 if first_may_be_zero else a > 0)),
                        (name_b, b, math.isfinite(b) and b > 0)):
        if not ok:
            raise UserError(f"{flag} given as numbers needs a finite {name_a} {bound} and a finite {name_b} > 0 "
                            f"(e.g. {example}). Received: {name} {x!r}")


def parse_interconnect(text: str, flag: str):
    """An interconnect from ``--network``/``--intra`` (a name or ``ALPHA,BANDWIDTH``), its numbers checked.

    Raises:
        UserError: an unknown name (the names are listed), a malformed pair, or numbers that are
            not finite (``nan``, ``inf``) or not positive.
    """
    from deep500lite.perfmodel import scaling_networks as sn

    try:
        net = sn.interconnect(text)
    except UserError:
        raise UserError(f"{flag} must be a name or ALPHA_SECONDS,BANDWIDTH_BYTES_PER_S (e.g. 2e-6,12.5e9). Allowed "
                        f"values are {format_choices(sn.INTERCONNECTS)}. Received: {text!r}") from None
    if str(text).lower() not in sn.INTERCONNECTS:
        _check_pair(flag, (net.alpha, net.bandwidth), ("alpha (seconds)", "bandwidth (bytes/s)"), "2e-6,12.5e9", True)
    return net


def parse_accelerator(text: str):
    """An accelerator from ``--accelerator`` (a name, ``this`` or ``FLOPS,BANDWIDTH``), its numbers checked.

    Raises:
        UserError: an unknown name, a malformed pair, or numbers that are not finite and positive.
    """
    from deep500lite.perfmodel import scaling_networks as sn

    acc = sn.accelerator(text)
    if str(text).lower() not in sn.ACCELERATORS and str(text).lower() != "this":
        _check_pair("--accelerator", (acc.flops, acc.bandwidth), ("peak FLOP/s", "bandwidth (bytes/s)"),
                    "9.3e12,732e9", False)
    return acc


def _print_checks(checks: list[dict], groups: list[dict], tolerance: float, fmt: str, text,
                  host_cores: int | None = None) -> None:
    """The ``--check`` table, its verdict line, a line per group of :func:`repeatability` and the notes."""

    def verdict(c):
        if c["verdict"] == "calibration point":
            return c["verdict"]
        return f"within {tolerance * 100:g}%" if c["verdict"] == "within" else f"off by more than {tolerance * 100:g}%"

    # round(...) + 0.0 turns a rounded -0.0 into 0.0 (the calibration point prints "+0.0%")
    rows = [[c["ranks"], c["file"],
             f"{format_seconds(c['median'])} [{format_seconds(c['ci_low'])}, {format_seconds(c['ci_high'])}]",
             format_seconds(c["predicted"]), f"{round(c['error'] * 100, 1) + 0.0:+.1f}%", verdict(c)]
            for c in checks]
    print("measured (--check) against predicted", file=text)
    print(format_table(["ranks", "run", "measured step [95% CI]", "predicted", "error", "verdict"], rows, fmt),
          file=text, flush=True)
    judged = [c for c in checks if c["verdict"] != "calibration point"]
    if judged:
        good = sum(c["verdict"] == "within" for c in judged)
        print(f"predicted within {tolerance * 100:g}% of the measured step in {good} of {len(judged)} runs"
              + ("" if good == len(judged) else ": the check fails"), file=text)
    for g in groups:
        line = (f"{g['runs']} runs on {g['ranks']} rank{'s' if g['ranks'] > 1 else ''}: "
                f"{format_seconds(g['fastest'])} to {format_seconds(g['slowest'])}, the slowest {g['ratio']:.2f} "
                f"times the fastest; the prediction is {round(g['error'] * 100, 1) + 0.0:+.1f}% from their median "
                f"{format_seconds(g['median'])}")
        if not g["repeats"]:
            line += (f"; one prediction can be within {tolerance * 100:g}% of runs at most {g['band']:.2f} times "
                     f"apart, so these runs cannot all pass: the machine did not repeat the job")
        print(line, file=text)
    same: dict[tuple, list[str]] = {}  # one note for every run of the same ranks on the same cores
    for c in judged:
        same.setdefault((c["ranks"], c["usable_cores"]), []).append(str(c["file"]))
    for (ranks, cores), files in same.items():
        note = oversubscribed_note({"file": ", ".join(files), "ranks": ranks, "usable_cores": cores}, host_cores)
        if note:
            print(note, file=text)


def _describe_cold(model) -> str:
    """``; the first call ... is cold: +X us (P ranks), ...`` for a calibrated allreduce model that measured it."""
    parts = [f"+{model.params(p).cold_overhead * 1e6:.1f} us + {model.params(p).cold_per_byte * 1e9:.3f} ns/B "
             f"({p} ranks)" for p in model.ranks if str(p) in model.cold]
    return "; the first allreduce after compute is cold: " + ", ".join(parts) if parts else ""


def _table(result, fmt: str) -> str:
    headers = ["nodes", "accel.", "batch/accel.", "step", "compute", "allreduce", "exposed comm", "exposed I/O",
               "algorithm", "speedup", "efficiency"]
    jitter = result.setup.jitter > 0
    if jitter:
        headers.insert(7, "wait for slowest")
    rows = []
    for r in result.rows:
        cells = [r.nodes, r.accelerators, f"{r.batch:g}", format_seconds(r.step), format_seconds(r.compute),
                 format_seconds(r.comm) if r.comm else "-", format_seconds(r.comm_exposed) if r.comm else "-",
                 format_seconds(r.io_exposed) if r.io else "-", ",".join(r.algorithms) or "-",
                 f"{result.speedup(r):.2f}", f"{result.efficiency(r) * 100:.1f}%"]
        if jitter:
            cells.insert(7, format_seconds(r.straggler) if r.straggler else "-")
        rows.append(cells)
    return format_table(headers, rows, fmt)


def run(args) -> int:
    """Run ``deep500lite model scaling`` from parsed arguments; returns the exit status."""
    from deep500lite.perfmodel import scaling

    for name in ("fusion_mb", "min_efficiency", "file_latency", "sample_bytes", "fs_bandwidth", "min_gain"):
        value = getattr(args, name)
        if value is not None and not (value >= 0 and math.isfinite(value)):
            raise UserError(f"--{name.replace('_', '-')} must be a finite number >= 0. Received: {value!r}")
    if args.min_efficiency > 1:
        raise UserError(f"--min-efficiency is a fraction between 0 and 1 (0.5 means 50%). Received: "
                        f"{args.min_efficiency!r}")
    if args.batch is not None and not (args.batch >= 1 and math.isfinite(args.batch)):
        raise UserError(f"--batch must be a finite number, at least 1 sample. Received: {args.batch!r}")
    if args.host_cores is not None and args.host_cores < 1:
        raise UserError(f"--host-cores must be at least 1. Received: {args.host_cores!r}")
    if args.per_node < 1:
        raise UserError(f"--per-node must be at least 1. Received: {args.per_node!r}")
    step_source = None
    if args.jitter is not None and args.scheme != "data":
        raise UserError(f"--jitter adds the wait for the slowest rank to data-parallel training; it cannot be "
                        f"combined with another --scheme. Received: --scheme {args.scheme} --jitter {args.jitter:g}")
    if args.step_from:
        if args.measured_step is not None:
            raise UserError(f"--step-from gives the measured step; do not give --measured-step too. Received: "
                            f"--step-from {args.step_from!r} --measured-step {args.measured_step:g}")
        median, cv, step_ranks = _step_from(args.step_from)
        args.measured_step = median
        what = "median step" if step_ranks == 1 else f"the 1-rank baseline timed after its {step_ranks} ranks, median"
        step_source = f"{args.step_from}: {what} {median * 1e6:.4g} us, spread {cv * 100:.3g}%"
        if args.jitter is None and args.scheme == "data":
            args.jitter = cv
    if args.check and args.scheme != "data":
        raise UserError(f"--check compares data-parallel predictions with 'deep500lite run -n P'; it cannot be "
                        f"combined with another --scheme. Received: --scheme {args.scheme} --check")
    if not (args.tolerance > 0 and math.isfinite(args.tolerance)):
        raise UserError(f"--tolerance must be a positive fraction (0.2 means 20%). Received: {args.tolerance!r}")
    checks = [measured_from_run(path) for path in _check_files(args.check)]
    if args.compute_from and (args.scheme != "data" or args.measured_step is not None):
        raise UserError(f"--compute-from gives the compute model of data-parallel training; it cannot be combined "
                        f"with --measured-step or another --scheme. Received: --scheme {args.scheme}"
                        + (f" --measured-step {args.measured_step:g}" if args.measured_step is not None else ""))
    if args.layer_sum and not args.compute_from:
        raise UserError("--layer-sum chooses how the layers of --compute-from are summed; give it with "
                        "--compute-from FILE. Received: --layer-sum without --compute-from")
    if _check_scheme(args) != "data":
        return _run_scheme(args)
    nodes = scaling.parse_nodes(args.nodes)
    counts = sorted({n * args.per_node for n in nodes})
    for c in checks:
        if c["ranks"] not in counts:
            raise UserError(f"--check {c['file']!r} is a run on {c['ranks']} ranks, which this sweep does not predict "
                            f"(accelerators in the sweep: {', '.join(map(str, counts))}); add it to --nodes. "
                            f"Received: --nodes {args.nodes}")
    network, acc, intra = parse_interconnect(args.network, "--network"), None, parse_interconnect(args.intra, "--intra")
    from deep500lite.recipe.model_targets import describe_target

    model, default_batch = describe_target(args.target)
    acc = _accelerator(args)
    batch = args.batch if args.batch is not None else float(default_batch or 32)
    fs_bw = float("inf") if args.fs_bandwidth is None else args.fs_bandwidth * 1e9
    if args.io_from:
        bench_io = _read_json(args.io_from, "--io-from", "the JSON file of 'bench dataset --json'")
        if not isinstance(bench_io, dict):
            raise UserError(f"--io-from must name the JSON file of 'bench dataset --json' (an object at the top); "
                            f"{args.io_from!r} holds a {type(bench_io).__name__}. Received: --io-from {args.io_from!r}")
        try:
            io = scaling.IOModel.from_dataset_bench(bench_io, args.io, args.sample_bytes, fs_bw)
        except UserError as exc:
            raise UserError(f"--io-from {args.io_from!r}: {exc}") from None
        if args.file_latency is not None:
            io = dataclasses.replace(io, file_latency=args.file_latency)
    else:
        io = scaling.IOModel(sample_bytes=args.sample_bytes if args.sample_bytes is not None else model.sample_bytes,
                             pattern=args.io, file_latency=args.file_latency, fs_bandwidth=fs_bw)
    allreduce_model = None
    if args.allreduce_model:
        from deep500lite.cli.bench_allreduce import load_calibration_file

        allreduce_model = load_calibration_file(args.allreduce_model, "--allreduce-model")
        for n in nodes:
            if n > 1:
                allreduce_model.params(n)
        if args.per_node != 1:
            raise UserError(f"--allreduce-model describes ranks of one machine; use it with --per-node 1. "
                            f"Received: --per-node {args.per_node}")
    setup = scaling.ScalingSetup(model, network, acc, per_node=args.per_node, intra=intra, algorithm=args.algorithm,
                                 fusion_bytes=int(args.fusion_mb * (1 << 20)), overlap=not args.no_overlap, io=io,
                                 allreduce_model=allreduce_model, host_cores=args.host_cores,
                                 jitter=args.jitter or 0.0,
                                 measured=(_load_compute(args.compute_from, model.name, args.layer_sum)
                                           if args.compute_from else None))
    if args.measured_step is not None:
        if not (args.measured_step > 0 and math.isfinite(args.measured_step)):
            raise UserError(f"--measured-step must be a positive number of seconds. Received: {args.measured_step!r}")
        per_acc = batch if (args.mode or "strong") == "weak" else batch / (nodes[0] * args.per_node)
        fwd, bwd, update = scaling.compute_times(model, per_acc, acc)
        setup = dataclasses.replace(setup, compute_scale=args.measured_step / (sum(fwd) + sum(bwd) + update))
    result = scaling.scaling_sweep(setup, nodes, batch, args.mode or "strong", min_efficiency=args.min_efficiency,
                                   min_gain=args.min_gain)
    text = sys.stderr if args.format == "csv" else sys.stdout
    print(f"{model.name}: {model.params / 1e6:.2f}M parameters ({model.gradient_bytes / 1e6:.1f} MB of float32 "
          f"gradients), {model.macs / 1e9:.3g} GMAC forward per sample", file=text)
    print(f"network {network.name}: alpha {network.alpha * 1e6:.3g} us, {network.bandwidth / 1e9:.3g} GB/s; "
          f"accelerator {acc.name}: {acc.flops / 1e12:.3g} TFLOP/s, {acc.bandwidth / 1e9:.4g} GB/s"
          + (f"; {args.per_node} per node over {intra.name}" if args.per_node > 1 else ""), file=text)
    label = "global batch" if result.mode == "strong" else "batch per accelerator"
    if allreduce_model is not None:
        print(f"allreduce costs from the calibrated model {args.allreduce_model} (ranks "
              f"{', '.join(map(str, allreduce_model.ranks))}){_describe_cold(allreduce_model)}", file=text)
    if args.gemm_from:
        print(f"accelerator {acc.name}: {acc.source}", file=text)
    if setup.measured is not None:
        m = setup.measured
        print(f"compute from {args.compute_from}: {m.matched(model)} of {len(model.layers)} layers measured on "
              f"{m.framework} ({m.device}) at batches {', '.join(map(str, m.batches))} (the rest: roofline); "
              f"per-call overhead {m.overhead_forward * 1e6:.3g} + {m.overhead_backward * 1e6:.3g} us; update "
              f"{'measured' if m.update is not None else 'roofline'}", file=text)
        _print_factors(setup, text)
        if not m.matched(model):
            print(f"warning: no layer name of {model.name} is in {args.compute_from}: a built-in description such "
                  f"as alexnet has its own layer names; measure an ONNX file or recipe with 'model layers'", file=text)
    if step_source:
        print(f"step from {step_source}", file=text)
    if setup.compute_scale != 1.0:
        print(f"compute scaled by {setup.compute_scale:.3g} to match the measured step of "
              f"{args.measured_step:g} s", file=text)
    if setup.jitter:
        print(f"jitter {setup.jitter * 100:.3g}% of the compute per step: each step waits for the slowest "
              f"accelerator (normal tails)", file=text)
    print(f"{result.mode} scaling, {label} {batch:g}; fusion {args.fusion_mb:g} MiB, "
          f"{'no overlap' if args.no_overlap else 'overlap with backward'}, I/O {args.io}", file=text)
    print(_table(result, args.format), flush=True)
    if result.infeasible:
        print(f"left out (under one sample per accelerator): {', '.join(map(str, result.infeasible))} nodes",
              file=text)
    if result.stop is None:
        print(f"scaling does not stop within {nodes[0]}..{nodes[-1]} nodes ({result.reason})", file=text)
    else:
        print(f"scaling stops at {result.stop} nodes: {result.reason}", file=text)
    missing = [c for c in checks if c["ranks"] not in {r.accelerators for r in result.rows}]
    if missing:
        print(f"not checked (left out of the sweep): {', '.join(c['file'] for c in missing)}", file=text)
    checks = compare_runs(result, [c for c in checks if c not in missing], args.tolerance, args.step_from)
    if checks:
        groups = repeatability(checks, args.tolerance)
        _print_checks(checks, groups, args.tolerance, args.format, text, args.host_cores)
    if args.json:
        data = result.to_dict()
        if checks:
            data["checks"] = {"tolerance": args.tolerance, "runs": checks, "repeatability": groups}
        atomic_write_text(args.json, finite_json(data, indent=1, default=str))
        print(f"wrote {args.json}", file=text)
    if args.plot:
        from deep500lite.perfmodel.plots import plot_scaling

        print(f"wrote {plot_scaling(result, args.plot)}", file=text)
    return 1 if any(c["verdict"] == "outside" for c in checks) or missing else 0


_SCHEME_FLAGS = {"micro_batches": ("pipeline",), "activation_bytes": ("pipeline",), "halo_bytes": ("spatial",),
                 "gathered_bytes": ("spatial",)}


def _check_scheme(args) -> str:
    """``--scheme``, after checking it and that every scheme option given belongs to it."""
    from deep500lite.perfmodel.scaling_parallel import MODEL_SCHEMES

    scheme = args.scheme
    if scheme not in ("data", *MODEL_SCHEMES):
        raise UserError(f"--scheme must be one of {format_choices(('data', *MODEL_SCHEMES))}. Received: {scheme!r}")
    for name, schemes in _SCHEME_FLAGS.items():
        if getattr(args, name) is not None and scheme not in schemes:
            raise UserError(f"--{name.replace('_', '-')} belongs to --scheme {' or '.join(schemes)}. "
                            f"Received: --scheme {scheme}")
    if scheme == "data":
        return scheme
    if args.mode == "weak":
        raise UserError(f"--scheme {scheme} splits one global batch over the ranks (strong scaling); --weak is "
                        f"for data parallelism. Received: --weak --scheme {scheme}")
    if args.per_node != 1:
        raise UserError(f"--scheme {scheme} predicts one rank per node over --network; use --per-node 1. "
                        f"Received: --per-node {args.per_node}")
    if args.micro_batches is not None and args.micro_batches < 1:
        raise UserError(f"--micro-batches must be an integer >= 1. Received: {args.micro_batches!r}")
    for name in ("activation_bytes", "gathered_bytes"):
        value = getattr(args, name)
        if value is not None and not (value >= 0 and math.isfinite(value)):
            raise UserError(f"--{name.replace('_', '-')} must be a finite number >= 0. Received: {value!r}")
    if scheme == "spatial" and args.halo_bytes is None:
        raise UserError("--scheme spatial needs --halo-bytes B1,B2,...: per convolution or pool, the bytes of the "
                        "halo rows one neighbour sends per sample. Received: no --halo-bytes")
    return scheme


def _halo_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in str(text).split(",")]
    except ValueError:
        values = None
    if not values or not all(v >= 0 and math.isfinite(v) for v in values):
        raise UserError(f"--halo-bytes must be comma-separated finite numbers >= 0 (bytes per sample, one per "
                        f"convolution or pool). Received: {text!r}")
    return values


def _run_scheme(args) -> int:
    """``model scaling --scheme pipeline|spatial|tensor``: the predicted step split per rank count."""
    from deep500lite.perfmodel import scaling
    from deep500lite.perfmodel.scaling_parallel import sweep

    ranks = scaling.parse_nodes(args.nodes)
    net = parse_interconnect(args.network, "--network")
    link = AlphaBeta(net.alpha, 1.0 / net.bandwidth if net.bandwidth > 0 else 0.0)
    from deep500lite.recipe.model_targets import describe_target

    model, default_batch = describe_target(args.target)
    acc = _accelerator(args)
    batch = args.batch if args.batch is not None else float(default_batch or 32)
    scale = 1.0
    if args.measured_step is not None:
        if not (args.measured_step > 0 and math.isfinite(args.measured_step)):
            raise UserError(f"--measured-step must be a positive number of seconds. Received: {args.measured_step!r}")
        fwd, bwd, update = scaling.compute_times(model, batch, acc)
        scale = args.measured_step / (sum(fwd) + sum(bwd) + update)
    options = {}
    if args.scheme == "pipeline":
        options = {"micro_batches": args.micro_batches or 4, "activation_bytes": args.activation_bytes}
    elif args.scheme == "spatial":
        options = {"halo_bytes": _halo_list(args.halo_bytes), "gathered_bytes": args.gathered_bytes}
    kwargs = dict(options, compute_scale=scale)
    base = sweep(model, args.scheme, [1], batch, acc, link, **kwargs)[0][1]
    rows = sweep(model, args.scheme, ranks, batch, acc, link, **kwargs)
    if not rows:
        raise UserError(f"A pipeline of {model.name} has at most {len(model.layers)} stages (one per layer). "
                        f"Received: --nodes {args.nodes}")
    text = sys.stderr if args.format == "csv" else sys.stdout
    print(f"{model.name}: {args.scheme} parallelism, global batch {batch:g} split over the ranks (strong scaling); "
          f"network {net.name}: alpha {net.alpha * 1e6:.3g} us, {net.bandwidth / 1e9:.3g} GB/s; accelerator "
          f"{acc.name}" + (f"; compute scaled by {scale:.3g} to the measured step" if scale != 1.0 else "")
          + (f"; M = {options['micro_batches']} micro-batches" if args.scheme == "pipeline" else ""), file=text)
    headers = ["ranks", "step", "compute", "communication", "idle", "idle %", "sent/rank", "speedup"]
    table = []
    for p, r in rows:
        table.append([p, format_seconds(r.step), format_seconds(r.compute), format_seconds(r.communication),
                      format_seconds(r.idle) if r.idle else "-", f"{100 * r.idle_fraction:.1f}%",
                      f"{r.bytes_per_rank:.4g} B", f"{base.step / r.step:.3g}"])
    print(format_table(headers, table, args.format), flush=True)
    if args.scheme == "pipeline":
        print("idle is the bubble: (P-1)/(M+P-1) of the step", file=text)
        dropped = [p for p in ranks if p > len(model.layers)]
        if dropped:
            print(f"left out (more stages than the {len(model.layers)} layers): {', '.join(map(str, dropped))} ranks",
                  file=text)
    if args.json:
        data = {"scheme": args.scheme, "model": model.name, "batch": batch, "network": net.name,
                "alpha": link.alpha, "beta": link.beta, "compute_scale": scale,
                "options": {k: v for k, v in options.items() if v is not None},
                "rows": [{"ranks": p, "step": r.step, "compute": r.compute, "communication": r.communication,
                          "idle": r.idle, "idle_fraction": r.idle_fraction, "bytes_per_rank": r.bytes_per_rank,
                          "speedup": base.step / r.step} for p, r in rows]}
        atomic_write_text(args.json, finite_json(data, indent=1))
        print(f"wrote {args.json}", file=text)
    return 0


def run_allreduce(args) -> int:
    """Run ``deep500lite model allreduce`` from parsed arguments; returns the exit status."""
    from deep500lite.perfmodel import scaling
    from deep500lite.bench.allreduce import message_sizes

    if args.nodes is not None and args.nodes < 2:
        raise UserError(f"--nodes must be at least 2 ranks (an allreduce needs two). Received: --nodes {args.nodes}")
    if not (args.tolerance > 0 and math.isfinite(args.tolerance)):
        raise UserError(f"--tolerance must be a positive fraction (0.2 means 20%). Received: {args.tolerance!r}")
    if not (args.gamma >= 0 and math.isfinite(args.gamma)):
        raise UserError(f"--gamma must be a finite number of seconds per byte >= 0. Received: --gamma {args.gamma}")
    if args.min_bytes > args.max_bytes:
        raise UserError(f"--min-bytes must not be larger than --max-bytes. Received: --min-bytes {args.min_bytes} "
                        f"--max-bytes {args.max_bytes}")
    sizes = message_sizes(args.min_bytes, args.max_bytes)
    if args.allreduce_model:
        from deep500lite.cli.bench_allreduce import load_calibration_file

        model = load_calibration_file(args.allreduce_model, "--allreduce-model")
        what = f"calibrated model {args.allreduce_model}"
    else:
        net = parse_interconnect(args.network, "--network")
        model = AlphaBeta(net.alpha, net.beta, args.gamma)
        what = f"{net.name}: alpha {net.alpha * 1e6:.3g} us, {net.bandwidth / 1e9:.3g} GB/s"
    if args.check:
        from deep500lite.cli.model_allreduce_check import run_check

        return run_check(args.check, model, what, args.min_bytes, args.max_bytes,
                         args.tolerance, args.format, args.nodes)
    args.nodes = 64 if args.nodes is None else args.nodes
    if args.allreduce_model:
        model.params(args.nodes)
    rows, cross = scaling.allreduce_table(model, args.nodes, sizes)
    text = sys.stderr if args.format == "csv" else sys.stdout
    print(f"predicted allreduce on {args.nodes} ranks, {what}", file=text)
    table = [[f"{n:,}"] + [format_seconds(c[a]) for a in P2P_ALGORITHMS] + [best] for n, c, best in rows]
    print(format_table(["bytes", *P2P_ALGORITHMS, "fastest"], table, args.format), flush=True)
    for lo, hi, a, b in cross:
        print(f"crossover: {a} is fastest up to {lo:,} bytes, {b} from {hi:,} bytes", file=text)
    return 0


def _add_layers_parser(msub) -> None:
    """``model layers``: per-layer forward/backward times measured through an executor."""
    p = msub.add_parser(
        "layers", help="each layer's forward and backward time measured here through an executor, per batch",
        description=("Measure each layer (ONNX node) of a network alone, as a one-node network at each per-node batch, "
                     "through an executor: forward (inference) and backward (inference_and_backprop minus forward), "
                     "minus a loss-only network of the layer's output shape; the executor's per-call cost; and the "
                     "whole network's forward and training step for comparison. The JSON feeds 'model scaling "
                     "--compute-from'. See docs/scaling.md."))
    p.add_argument("target", type=Path("input-or-name"), metavar="MODEL_OR_RECIPE",
                   help="an .onnx file (batch as first input dimension), a zoo model name or a recipe whose model is "
                        "a zoo name or an .onnx file")
    p.add_argument("--framework", type=Text(max_length=256), default="torch",
                   help="the executor: torch, tensorflow, onnxruntime, jax, reference or a variant such as "
                        "torch:compile (default torch)")
    p.add_argument("--device", type=Text(max_length=64), default="cpu", help="cpu or gpu:N (default cpu)")
    p.add_argument("--batches", type=Parsed(_batch_list, "comma-separated integers from 1 to 1,048,576", keep_text=True),
                   default="1,4,16,64", help="comma-separated per-node batches (default 1,4,16,64)")
    p.add_argument("--max-time", type=positive_seconds, default=0.3, metavar="SECONDS",
                   help="seconds of timed runs per measurement, at least 5 runs (default 0.3)")
    p.add_argument("--optimizer", choices=tuple(_layer_optimizers()), default="momentum",
                   help="momentum (default), sgd, adam or none: also time the whole network's training step with this "
                        "numpy reference optimizer, as the bundled recipes use; its update feeds --compute-from")
    p.add_argument("--format", choices=TABLE_FORMATS, default="table", help="table, markdown or csv (default table)")
    p.add_argument("--json", type=Path("output"), default=None, metavar="FILE", help="write every sample, the medians and the environment")
    p.set_defaults(func=run_layers)


def _batch_list(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in str(text).split(",") if v.strip()})
    except ValueError:
        values = []
    if not values or values[0] < 1 or values[-1] > 2**20 or len(values) > 64:
        raise UserError(f"--batches must be comma-separated integers from 1 to 1,048,576 (e.g. 1,4,16,64), at most "
                        f"64 of them. Received: {text!r}")
    return values


def run_layers(args) -> int:
    """Run ``deep500lite model layers`` from parsed arguments; returns the exit status."""
    from deep500lite.perfmodel import layers as layer_times

    if not (args.max_time > 0 and math.isfinite(args.max_time)):
        raise UserError(f"--max-time must be a finite number of seconds > 0. Received: {args.max_time!r}")
    batches = _batch_list(args.batches)
    if args.optimizer not in layer_times.OPTIMIZERS:
        raise UserError(f"--optimizer must be one of {format_choices(layer_times.OPTIMIZERS)}. Received: "
                        f"{args.optimizer!r}")
    from deep500lite.recipe.model_targets import target_onnx

    model, name = target_onnx(args.target)
    text = sys.stderr if args.format == "csv" else sys.stdout
    print(f"{name}: {len(model.graph.node)} layers on {args.framework} ({args.device}), batches "
          f"{', '.join(map(str, batches))}", file=text, flush=True)
    data = layer_times.measure_layers(model, batches, args.framework, args.device, args.max_time, name,
                                      progress=lambda line: print(line, file=sys.stderr, flush=True),
                                      optimizer=args.optimizer)
    print(format_table(*layer_times.summary_rows(data), args.format), flush=True)
    over = data["overhead"]
    print(f"per-call overhead of the executor (loss = ReduceSum of one element): forward "
          f"{over['forward'] * 1e6:.3g} us, backward {over['backward'] * 1e6:.3g} us", file=text)
    skipped = [la["name"] for la in data["layers"] if la["status"] == "skipped"]
    if skipped:
        print(f"not measured alone (the roofline stands in for them): {', '.join(skipped)}", file=text)
    if args.json:
        atomic_write_text(args.json, finite_json(data, indent=1, default=str))
        print(f"wrote {args.json}", file=text)
    return 0


def _print_factors(setup, text) -> None:
    """One line: whether the measured layers are scaled to the whole network, and the factors per batch."""
    from deep500lite.perfmodel import scaling

    m = setup.measured
    k = scaling.network_factors(setup.model, setup.accelerator, m)
    if k is None:
        why = "no layer of it is measured" if m.network_forward is not None else "the file holds no whole network"
        print(f"layer times as measured: nothing scaled to the whole network ({why})", file=text)
        return
    cells = ", ".join(f"{b}: {'-' if f is None else f'{f:.3g}'} / {'-' if g is None else f'{g:.3g}'}"
                      for b, f, g in zip(m.batches, *k))
    if m.mode == "network":
        print(f"layer times scaled to the whole network measured (factor forward / backward per batch: {cells}; "
              f"--layer-sum: as measured)", file=text)
    else:
        print(f"layer times summed as measured (--layer-sum); scaling them to the whole network would take "
              f"forward / backward per batch: {cells}", file=text)


def _load_compute(path: str, model_name: str, layer_sum: bool = False):
    """The :class:`~deep500lite.perfmodel.scaling.MeasuredCompute` of ``--compute-from FILE`` for ``model_name``."""
    from deep500lite.perfmodel import layers as layer_times, scaling

    data = _read_json(path, "--compute-from", "the JSON file of 'model layers --json'")
    layer_times.check_layer_times(data, f"--compute-from {path!r}")
    if data["model"] != model_name:
        raise UserError(f"--compute-from {path!r} holds the layers of another network ({data['model']!r}); measure "
                        f"this one with 'deep500lite model layers' on the same target. Received: MODEL_OR_RECIPE "
                        f"{model_name!r}")
    return scaling.MeasuredCompute.from_layer_times(data, source=path, layer_sum=layer_sum)


def _accelerator(args):
    """``--accelerator``, its GEMM efficiency refitted from ``--gemm-from`` when given."""
    from deep500lite.perfmodel import scaling_networks as sn

    if not args.gemm_from:
        return parse_accelerator(args.accelerator)
    data = _read_json(args.gemm_from, "--gemm-from", "the JSON file of 'bench op --json'")
    what = f"--gemm-from {args.gemm_from!r}"
    if str(args.accelerator).strip().lower() == "this":
        return sn.accelerator_from_gemm_bench(data, None, what)
    return sn.accelerator_from_gemm_bench(data, parse_accelerator(args.accelerator), what)
