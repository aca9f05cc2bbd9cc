"""``deep500lite verify``: a model on every executor against the reference executor in float64.

Parsing and printing only; the work is :func:`deep500lite.lv1.verify.verify_model` (and, for a
zoo model, :func:`deep500lite.bench.zoo.verify_input`).
"""

from __future__ import annotations

import sys

from deep500lite.cli.args import Path, Text, nonnegative_int

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    p = subparsers.add_parser(
        "verify", help="check a model on every executor against the reference executor in float64",
        description=("Run MODEL.onnx on every installed executor and variant (torch:compile, tensorflow:xla, "
                     "onnxruntime:O0, ...; installed plugin frameworks too) and compare each with the reference "
                     "executor in float64 (the ground truth): the largest error relative to scale of every output "
                     "and, with --train, of every parameter gradient of a loss, beside the model's float32 noise "
                     "floor (the reference executor's own float32 error) and a verdict: within max(1e-4, 10 x "
                     "floor) for outputs, max(1e-3, 10 x floor) for gradients. For a failing executor, names the "
                     "first node whose output (or backward pass) diverges. MODEL may also be zoo:NAME[/EXPORTER], "
                     "a model of 'deep500lite bench zoo --list' (a graph case such as zoo:loop too, with its own "
                     "loss). Exit 0 when every executor passes, 1 when one fails, 2 for bad input. See "
                     "docs/verify.md."))
    p.add_argument("model", type=Path("input-or-name"), metavar="MODEL.onnx", help="the ONNX model file, or zoo:NAME[/EXPORTER]")
    p.add_argument("--frameworks", type=Text(), default=None, metavar="A,B,...",
                   help="executors to check, comma-separated, variants included (default: every installed "
                        "executor and variant)")
    p.add_argument("--train", action="store_true",
                   help="also add a loss and compare every parameter gradient")
    p.add_argument("--loss", type=Text(max_length=256), default=None,
                   help="cross_entropy or mse, optionally :OUTPUT (default: cross_entropy for an output of two or "
                        "more axes, else mse, on the first float output), or the name of a scalar tensor of the "
                        "model; implies --train")
    p.add_argument("--inputs", type=Path("input"), default=None, metavar="FILE.npz",
                   help="feeds as an .npz file with one array per model input (default: seeded random feeds)")
    p.add_argument("--seed", type=nonnegative_int, default=0,
                   help="seed of the random feeds and of the loss's labels or target (default 0)")
    p.add_argument("--device", type=Text(max_length=256), default=None, help="cpu or gpu:N for the executors (the reference stays on the CPU)")
    p.add_argument("--no-localize", action="store_true", help="do not look for the diverging node of a failing executor")
    p.add_argument("--json", type=Path("output"), default=None, metavar="FILE", help="write every error, floor and verdict here")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Run ``deep500lite verify`` from parsed arguments; 0 when every executor passes, else 1."""
    from deep500lite.errors import UserError
    from deep500lite.lv1.verify import format_report, verify_model
    from deep500lite.registry import canonical_executor_spelling
    from deep500lite.utils import atomic_write_text, finite_json

    frameworks = None
    if args.frameworks is not None:
        frameworks = [canonical_executor_spelling(f) for f in args.frameworks.split(",") if f.strip()]
        if not frameworks:
            raise UserError(f"--frameworks names no executor. Received: {args.frameworks!r}")
    if args.device is not None:
        from deep500lite.lv1.device import as_device

        as_device(args.device)
    model, feeds, loss = args.model, None, args.loss
    if args.model.startswith("zoo:"):
        from deep500lite.bench.zoo import verify_input

        model, feeds, zoo_loss = verify_input(args.model[4:], training=bool(args.train or args.loss))
        loss = loss or zoo_loss
    if args.inputs:
        from deep500lite.cli.infer_cmd import load_feeds

        feeds = load_feeds(args.inputs)
    result = verify_model(model, frameworks=frameworks, feeds=feeds, train=bool(args.train or args.loss),
                          loss=loss, seed=args.seed, device=args.device, localize_failures=not args.no_localize,
                          progress=lambda line: print(f"... {line}", file=sys.stderr, flush=True))
    if args.model.startswith("zoo:"):
        result.model = args.model
    print(format_report(result))
    if args.json:
        atomic_write_text(args.json, finite_json(result.to_dict(), indent=1))
        print(f"results: {args.json}")
    return 0 if result.passed else 1
