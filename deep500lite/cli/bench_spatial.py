"""``deep500lite bench spatial``: sample (data) against spatial (halo) parallelism on a segmentation network.

Wired into ``deep500lite bench`` by :func:`add_subparser`; the work is in :mod:`deep500lite.bench.spatial`.
"""

from __future__ import annotations

import sys

from deep500lite.cli.args import Choice, Integer, ListOf, Path, Text, add_host_options, hosts_from_args
from deep500lite.errors import UserError
from deep500lite.escaping import terminal
from deep500lite.utils import atomic_write_text, finite_json

__all__ = ["add_subparser", "run"]


def add_subparser(sub):
    """Add ``spatial`` to the ``bench`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser(
        "spatial", help="sample vs spatial (halo) parallelism on a large-input segmentation network, over MPI",
        description=("For each rank count, launch an MPI job that trains the mesh-tangling-like network (18 input "
                     "channels, 3x3 convolutions, per-pixel cross-entropy) on one global mini-batch three ways: "
                     "sample parallelism (N/P whole samples per rank, gradients allreduced) and spatial "
                     "parallelism (every sample's rows split over the ranks, halo exchange) with and without "
                     "overlapping the interior rows with the halo. Print the slowest rank's median step time, "
                     "time per sample, the time split (compute, halo, allreduce, gather, idle) and the "
                     "activation memory per rank. See docs/parallelism.md."))
    p.add_argument("-n", "--ranks", type=ListOf(Integer(minimum=1, maximum=4096)), default="2,4", help="comma-separated rank counts (default 2,4)")
    p.add_argument("--batch", type=Integer(minimum=1, maximum=2**20), default=None,
                   help="global mini-batch, a multiple of every rank count (default: the rank count)")
    p.add_argument("--size", type=Integer(minimum=1, maximum=65536), default=256, help="input height and width (default 256; the seed used 1024)")
    p.add_argument("--channels", type=Integer(minimum=1, maximum=4096), default=18, help="input channels (default 18)")
    p.add_argument("--width", type=Integer(minimum=1, maximum=4096), default=16, help="channels of the hidden convolutions (default 16)")
    p.add_argument("--layers", type=Integer(minimum=1, maximum=1024), default=4, help="convolutions, the last a 1x1 (default 4)")
    p.add_argument("--steps", type=Integer(minimum=1, maximum=100_000), default=3, help="timed training steps per mode, after a warm-up (default 3)")
    p.add_argument("--framework", "-f", type=Text(max_length=256), default="torch", help="executor of the local computations (default torch)")
    p.add_argument("--modes", type=ListOf(Choice(("sample", "spatial", "spatial-no-overlap")), unique=True),
                   default="sample,spatial,spatial-no-overlap",
                   help="comma-separated: sample, spatial, spatial-no-overlap (default all)")
    p.add_argument("--grid", type=Text(max_length=64), default=None, metavar="RxC",
                   help="split height and width over R x C ranks in the spatial modes, e.g. 2x2 with -n 4 "
                        "(default: height only)")
    p.add_argument("--batchnorm", choices=("batch", "running"), default=None,
                   help="add a BatchNormalization after each 3x3 convolution, trained with batch statistics "
                        "(allreduced over the ranks) or running statistics in the spatial modes (default: none)")
    p.add_argument("--threads", type=Integer(minimum=1, maximum=4096), default=None,
                   help="intra-op threads per rank (default: CPU count // ranks)")
    p.add_argument("--mpiexec", type=Path("program"), default=None, help="the MPI launcher (default: the one beside this Python, else PATH)")
    add_host_options(p)
    p.add_argument("--json", type=Path("output"), default=None, metavar="FILE", help="write every row and step time here")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Run ``deep500lite bench spatial`` from parsed arguments; returns the exit status."""
    from deep500lite.bench import spatial as bench

    ranks, modes = list(args.ranks), list(args.modes)
    grid = None
    if args.grid:
        try:
            grid = [Integer(minimum=1, maximum=4096).parse(v) for v in args.grid.lower().split("x")]
        except UserError:
            raise UserError(f"--grid must be ROWSxCOLUMNS such as 2x2. Received: {args.grid!r}") from None
    hosts = hosts_from_args(args)
    if hosts is not None:
        print(f"bench spatial: ranks on {hosts.describe()}", file=sys.stderr, flush=True)
    result = bench.run_spatial_benchmark(ranks, batch=args.batch, size=args.size, channels=args.channels,
                                         width=args.width, layers=args.layers, steps=args.steps,
                                         framework=args.framework, modes=modes, threads=args.threads,
                                         mpiexec=args.mpiexec, grid=grid, batchnorm=args.batchnorm, hosts=hosts)
    print(terminal(result.table()))
    if args.json:
        atomic_write_text(args.json, finite_json({"rows": result.rows, "config": result.config}, indent=1))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0
