"""``deep500lite bench zoo``: real architectures from public model libraries on every executor.

Wired into ``deep500lite bench`` by :func:`add_subparser`; the work is in :mod:`deep500lite.bench.zoo`.
"""

from __future__ import annotations

import sys

from deep500lite.cli.args import ListOf, Path, Text
from deep500lite.errors import UserError
from deep500lite.metrics.tables import TABLE_FORMATS, format_table
from deep500lite.utils import atomic_write_text, finite_json

__all__ = ["add_subparser", "run"]


def add_subparser(sub):
    """Add ``zoo`` to the ``bench`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser(
        "zoo", help="real models (transformers, keras.applications, torch.nn) on every executor",
        description=("Build real architectures with random weights (transformers configs and torch.nn layers "
                     "exported by torch's TorchScript and dynamo exporters; keras.applications through tf2onnx), "
                     "run each on every executor and compare with the producer's float64 answers: inference "
                     "within 1e-4 of the output's scale, every parameter gradient within 1e-3 of its scale. "
                     "Prints the matrix with each failing cell's reason; exit 1 if a cell fails. See "
                     "docs/models.md."))
    p.add_argument("--models", type=Text(max_length=4096), default=None, metavar="A,B,...", help="models to run (default all; see --list)")
    p.add_argument("--exporters", type=Text(max_length=1024), default=None, metavar="A,B,...",
                   help="torchscript, dynamo, tf2onnx (default all)")
    p.add_argument("--frameworks", "--executors", dest="executors", type=ListOf(Text(max_length=256)),
                   default="reference,torch,tensorflow,onnxruntime",
                   help="executors to check, comma-separated (default all four)")
    p.add_argument("--slice", dest="subset", default=None, choices=("ci",),
                   help="ci: the representative slice CI runs")
    p.add_argument("--no-training", action="store_true", help="check inference only")
    p.add_argument("--device", type=Text(max_length=64), default=None, help="cpu or gpu:N for torch, tensorflow and onnxruntime "
                   "(the reference stays on the CPU; default cpu)")
    p.add_argument("--list", action="store_true", help="list the models and exporters and exit")
    p.add_argument("--format", choices=TABLE_FORMATS, default="table", help="table, markdown or csv (default table)")
    p.add_argument("--json", type=Path("output"), default=None, metavar="FILE", help="write every cell, the timings and the environment here")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Run ``deep500lite bench zoo`` from parsed arguments; returns the exit status (1 if a cell fails)."""
    from deep500lite.bench.zoo import format_matrix, list_cases, run_zoo
    from deep500lite.environment import collect_environment

    if args.device is not None:
        from deep500lite.lv1.device import as_device

        try:
            as_device(args.device)
        except UserError as exc:
            raise UserError(f"--device: {exc}") from None
    cases = list_cases(args.models, args.exporters, args.subset)
    if args.list:
        print(format_table(["model", "source", "exporter", "producer"],
                           [[c.name, c.source, c.exporter, c.producer] for c in cases], args.format))
        return 0
    if not cases:
        raise UserError("No zoo model is available: the zoo needs torch (with transformers) or tensorflow with "
                        "tf2onnx (pip install 'deep500lite[zoo]'). Received: no producer installed")
    executors = list(args.executors)
    result = run_zoo(cases, executors, training=not args.no_training, device=args.device,
                     progress=lambda msg: print(f"... {msg}", file=sys.stderr, flush=True))
    print(format_matrix(result, args.format))
    cells = len(result.cells)
    failed = result.failures
    print(f"\n{len(cases)} cases x {len(result.executors)} executors: {cells - len(failed)} of {cells} cells pass "
          f"or are known")
    if args.json:
        payload = {"benchmark": "zoo", "environment": collect_environment(), "result": result.to_dict()}
        atomic_write_text(args.json, finite_json(payload, indent=1))
        print(f"results: {args.json}")
    return 1 if failed else 0
