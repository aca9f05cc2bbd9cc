"""``deep500lite bench dataset``: random-access reads of many small files vs one packed shard."""

from __future__ import annotations

import os
import sys

from deep500lite.cli.args import Integer, ListOf, Parsed, Path, Text, positive_int, positive_seconds, seed
from deep500lite.errors import UserError
from deep500lite.metrics.tables import format_seconds, format_table
from deep500lite.registry import canonical_framework
from deep500lite.utils import atomic_write_text, finite_json

__all__ = ["add_subparser", "run"]


def _shape(text):
    try:
        shape = tuple(ListOf(Integer(minimum=1, maximum=65536), min_items=3, max_items=3).parse(text.replace("x", ",")))
    except UserError:
        raise UserError(f"expected C,H,W with integers from 1 to 65,536 (e.g. 3,32,32). Received: {text!r}") from None
    return shape


def add_subparser(sub):
    """Add ``dataset`` to the subparsers of ``deep500lite bench``."""
    p = sub.add_parser(
        "dataset", help="many small files vs the packed shard format, and data loading vs compute",
        description=("Write N samples as N small files and as one packed shard, measure random-access read "
                     "throughput (samples/s) of both, cold-ish and warm, print the ratio shard/files with its "
                     "95% CI (target >= 10x) and an epoch's data-loading time against LeNet forward+backward "
                     "compute time."))
    p.add_argument("--samples", type=Integer(minimum=1, maximum=10_000_000), default=4096, metavar="N", help="samples (files) to write "
                   "(default 4096)")
    p.add_argument("--batch-size", type=positive_int, default=64, help="samples per read and per compute step "
                   "(default 64)")
    p.add_argument("--framework", "-f", type=Text(max_length=256), default=None,
                   help="executor for the compute side (default torch when installed, else reference)")
    p.add_argument("--max-time", type=positive_seconds, default=10.0,
                   help="seconds of timed work: half for reads, half for compute (default 10)")
    p.add_argument("--dataset", type=Text(max_length=256), default="synthetic",
                   help="where the samples come from: synthetic (1x28x28, default) or a dataset name")
    p.add_argument("--shape", type=Parsed(_shape, "C,H,W, integers from 1 to 65,536"), default=None, metavar="C,H,W",
                   help="sample shape of --dataset synthetic (default 1,28,28)")
    p.add_argument("--root", type=Path("folder"), default=None, metavar="DIR", help="the folder of a --dataset read from files")
    p.add_argument("--format", dest="file_format", choices=("npy", "png"), default="npy",
                   help="small-file format: npy (default) or png (images in [0, 1], e.g. --dataset digits)")
    p.add_argument("--dir", type=Path("folder"), default=None, metavar="DIR",
                   help="write the files and the shard here and keep them (default: a temporary folder, removed)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the samples and the read order (default 0)")
    p.add_argument("--json", type=Path("output"), default=None, metavar="FILE", help="write results, raw samples and environment here")
    p.set_defaults(func=run)
    return p


def _rate(x: float) -> str:
    return f"{x:,.0f}"


def run(args) -> int:
    from deep500lite.bench.dataset import TARGET_RATIO, run_dataset_bench
    from deep500lite.environment import collect_environment


    if args.dir is not None and os.path.exists(args.dir) and not os.path.isdir(args.dir):
        raise UserError(f"--dir must be a folder to write the files and the shard in; '{args.dir}' is a file. "
                        f"Received: --dir {args.dir}")
    if args.json is not None and os.path.isdir(args.json):
        raise UserError(f"--json must be a file to write the results to; '{args.json}' is a folder. "
                        f"Received: --json {args.json}")
    framework = canonical_framework(args.framework) if args.framework else None
    r = run_dataset_bench(args.dataset, args.samples, args.batch_size, framework, args.max_time, args.dir,
                          args.file_format, args.root, args.seed, args.shape,
                          progress=lambda msg: print(f"... {msg}", file=sys.stderr, flush=True))
    shape = "x".join(str(s) for s in r.sample_shape)
    print(f"random-access reads: {r.samples} samples of {r.sample_dtype}[{shape}] from {r.dataset}, "
          f"random batches of {r.batch_size}")
    rows = []
    for key, label in (("files", f"small files (.{r.file_format})"), ("shard", "packed shard")):
        med, lo, hi = r.throughput(key)
        size = r.bytes_files if key == "files" else r.bytes_shard
        rows.append([label, f"{size / 2**20:.1f} MiB", format_seconds(r.write_seconds[key]),
                     _rate(r.cold_throughput(key)), f"{_rate(med)} [{_rate(lo)}, {_rate(hi)}]"])
    print(format_table(["reader", "on disk", "write", "cold-ish samples/s", "warm samples/s [95% CI]"], rows))
    q = r.ratio
    print(f"ratio shard/files (warm): {q.median:.1f}x [{q.ci_low:.1f}, {q.ci_high:.1f}] (95% CI, {q.n} pairs); "
          f"cold-ish: {r.cold_throughput('shard') / r.cold_throughput('files'):.1f}x; "
          f"target >= {TARGET_RATIO:g}x: {r.verdict}")
    print(f"note: {r.cache_note}")
    e = r.epoch_seconds()
    print(f"one epoch ({r.samples} samples, {r.batches_per_epoch} batches of {r.batch_size}):")
    print(format_table(["work", "time", "vs compute"], [
        ["loading from small files (warm)", format_seconds(e["files_warm"]), f"{e['files_warm'] / e['compute']:.2f}x"],
        ["loading from small files (cold-ish)", format_seconds(e["files_cold"]),
         f"{e['files_cold'] / e['compute']:.2f}x"],
        ["loading from the shard (warm)", format_seconds(e["shard_warm"]), f"{e['shard_warm'] / e['compute']:.2f}x"],
        ["loading from the shard (cold-ish)", format_seconds(e["shard_cold"]),
         f"{e['shard_cold'] / e['compute']:.2f}x"],
        [f"compute: lenet forward+backward ({r.framework})", format_seconds(e["compute"]), "1.00x"],
    ]))
    for m in (r.paired.a, r.paired.b, r.compute):
        warning = m.warning()
        if warning:
            print(f"warning: {warning}")
    if args.json:
        payload = {"benchmark": "dataset", "environment": collect_environment(), "result": r.to_dict()}
        atomic_write_text(args.json, finite_json(payload, indent=1))
        print(f"results: {args.json}")
    return 0
