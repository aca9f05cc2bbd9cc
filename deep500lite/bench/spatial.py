"""``deep500lite bench spatial``: sample (data) parallelism against spatial parallelism.

The network is the seed's mesh-tangling segmentation shape scaled down (:func:`mesh_network`: 18
input channels, a few 3x3 convolutions with ReLU, a 1x1 convolution to two classes and a
per-pixel cross-entropy). For a fixed global mini-batch of N samples on P ranks:

- ``sample``: each rank trains on N/P whole samples (the full network, one executor call) and the
  parameter gradients are summed with one allreduce;
- ``spatial``: every rank trains on all N samples, its rows of each (:class:`SpatialParallelNetwork`),
  with and without overlapping the interior rows with the halo exchange.

:func:`run_spatial_benchmark` launches ``mpiexec -n P python -m mpi4py -m deep500lite.bench.spatial
CONFIG`` (this module's :func:`worker_main`) per rank count. Each timed step runs between
barriers and its time is the slowest rank's. Per rank it records the time split
(:data:`~deep500lite.lv3.spatial.TIME_KEYS`) and the bytes of activations kept for the backward pass.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from deep500lite.errors import UserError
from deep500lite.lv3.hosts import launcher_args
from deep500lite.lv3.launch import find_mpiexec, run_job

__all__ = ["mesh_network", "SpatialBenchmark", "run_spatial_benchmark", "worker_main", "MODES"]

MODES = ("sample", "spatial", "spatial-no-overlap")


def mesh_network(channels: int = 18, size: int = 256, width: int = 16, layers: int = 4, classes: int = 2,
                 seed: int = 0, batchnorm: bool = False):
    """A segmentation-like ONNX model: ``layers - 1`` 3x3 Conv+Relu, a 1x1 Conv, per-pixel cross-entropy.

    Inputs ``x`` (N, channels, size, size) float32 and ``label`` (N, size, size) int64; scalar
    output ``loss``. The batch dimension is symbolic. ``batchnorm`` puts a BatchNormalization
    (scale 1, bias 0, running mean 0 and variance 1) between each 3x3 Conv and its Relu.
    """
    if layers < 2:
        raise UserError(f"The mesh network needs at least 2 layers (3x3 convolutions, then a 1x1). Received: {layers}")
    rng = np.random.default_rng(seed)
    nodes, inits, prev, cin = [], [], "x", channels
    for i in range(layers - 1):
        w = (rng.standard_normal((width, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"conv{i}.weight"),
                  numpy_helper.from_array(np.zeros(width, np.float32), f"conv{i}.bias")]
        nodes.append(helper.make_node("Conv", [prev, f"conv{i}.weight", f"conv{i}.bias"], [f"c{i}"],
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        act = f"c{i}"
        if batchnorm:
            stats = [f"bn{i}.{k}" for k in ("scale", "bias", "mean", "var")]
            inits += [numpy_helper.from_array(np.full(width, v, np.float32), k) for k, v in zip(stats, (1, 0, 0, 1))]
            nodes.append(helper.make_node("BatchNormalization", [act] + stats, [f"n{i}"]))
            act = f"n{i}"
        nodes.append(helper.make_node("Relu", [act], [f"r{i}"]))
        prev, cin = f"r{i}", width
    w = (rng.standard_normal((classes, cin, 1, 1)) * np.sqrt(1.0 / cin)).astype(np.float32)
    inits += [numpy_helper.from_array(w, "head.weight"), numpy_helper.from_array(np.zeros(classes, np.float32),
                                                                                  "head.bias")]
    nodes += [helper.make_node("Conv", [prev, "head.weight", "head.bias"], ["logits"], kernel_shape=[1, 1]),
              helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "label"], ["loss"])]
    graph = helper.make_graph(
        nodes, "mesh", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, size, size]),
                        helper.make_tensor_value_info("label", TensorProto.INT64, ["N", size, size])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@dataclasses.dataclass
class SpatialBenchmark:
    """Results: one row per (ranks, mode).

    Each row: ``ranks``, ``mode``, ``batch``, ``step_s`` (median slowest-rank step), ``per_sample_s``,
    ``steps`` (every step time), ``split`` (mean seconds per step per :data:`TIME_KEYS` over ranks),
    ``activation_bytes`` (largest over ranks: the activations a rank keeps for the backward pass,
    halo copies and gathered tensors included), ``loss`` (the mini-batch loss of the last step: the
    same in every mode, except ``sample`` with BatchNormalization, whose statistics are per rank).
    """

    rows: list
    config: dict

    def table(self) -> str:
        """A plain-text table of the rows."""
        head = ("P", "mode", "N", "step s", "s/sample", "compute", "halo", "allreduce", "gather", "idle",
                "act MiB/rank")
        lines = ["  ".join(f"{h:>12}" for h in head)]
        for r in self.rows:
            s = r["split"]
            cells = (r["ranks"], r["mode"], r["batch"], f"{r['step_s']:.3f}", f"{r['per_sample_s']:.3f}",
                     f"{s['compute']:.3f}", f"{s['halo']:.3f}", f"{s['allreduce']:.3f}", f"{s['gather']:.3f}",
                     f"{s['idle']:.3f}", f"{r['activation_bytes'] / 2**20:.1f}")
            lines.append("  ".join(f"{c:>12}" for c in cells))
        return "\n".join(lines)


def run_spatial_benchmark(ranks=(2, 4), batch: int | None = None, size: int = 256, channels: int = 18,
                          width: int = 16, layers: int = 4, steps: int = 3, framework: str = "torch",
                          modes=MODES, threads: int | None = None, mpiexec: str | None = None, grid=None,
                          job_timeout: float | None = 1800, batchnorm: str | None = None,
                          hosts=None) -> SpatialBenchmark:
    """Launch one MPI job per rank count and return the rows of every mode.

    Args:
        ranks: rank counts (each at least 2).
        batch: global mini-batch (default: the rank count, one sample per rank in ``sample`` mode).
            A multiple of the rank count when ``sample`` is among the modes.
        size, channels, width, layers: the :func:`mesh_network`.
        steps: timed training steps per mode (after one warm-up step).
        framework: the executor of the local computations.
        modes: a subset of :data:`MODES`.
        threads: intra-op threads per rank (``OMP_NUM_THREADS``; default: CPU count // ranks, at least 1).
        mpiexec: the MPI launcher.
        grid: ``(rows, columns)`` of ranks for the spatial modes (height and width split); needs a
            single rank count equal to ``rows * columns``. Default: the height split only.
        job_timeout: seconds after which a job is killed.
        batchnorm: ``None`` (no BatchNormalization), or ``"batch"`` / ``"running"``: the
            :func:`mesh_network` with BatchNormalization, trained by the spatial modes with batch
            statistics (allreduced over the ranks) or running statistics. ``sample`` mode's
            executors normalize with each rank's own batch statistics.
        hosts: the :class:`~deep500lite.lv3.hosts.Hosts` to start the ranks on (None: this
            machine); each job's configuration and rows then go through a temporary folder in
            the working directory, which every host must see. ``threads`` defaults to this
            machine's CPU count // ranks all the same.
    """
    if batchnorm not in (None, "batch", "running"):
        raise UserError(f"batchnorm must be None, 'batch' or 'running'. Received: {batchnorm!r}")
    ranks = [int(r) for r in ranks]
    if not ranks or any(r < 2 for r in ranks):
        raise UserError(f"bench spatial needs rank counts of at least 2. Received: {ranks}")
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UserError(f"Modes must be among {', '.join(MODES)}. Received: {list(modes)}")
    if steps < 1:
        raise UserError(f"--steps must be at least 1. Received: {steps}")
    for r in ranks:
        n = batch or r
        if n % r and "sample" in modes:
            raise UserError(f"The global batch must be a multiple of every rank count (sample parallelism gives each "
                            f"rank N/P samples). Received: batch {n} with {r} ranks")
        if size < 2 * r:
            raise UserError(f"The input size must give every rank at least 2 rows. Received: size {size}, {r} ranks")
    if grid is not None:
        grid = [int(g) for g in grid]
        if len(grid) != 2 or min(grid) < 1 or ranks != [grid[0] * grid[1]]:
            raise UserError(f"A grid of ranks needs one rank count equal to rows x columns. "
                            f"Received: grid {grid} with ranks {ranks}")
    launcher = find_mpiexec(mpiexec, "bench spatial")
    if hosts is not None:
        from deep500lite.lv3.launch import check_ranks

        for r in ranks:
            check_ranks(r, "-n", hosts=hosts)
    rows = []
    config = {"size": size, "channels": channels, "width": width, "layers": layers, "steps": steps,
              "framework": framework, "modes": list(modes), "grid": grid, "batchnorm": batchnorm}
    with tempfile.TemporaryDirectory(prefix="d5-spatial-", dir=None if hosts is None else os.getcwd()) as tmp:
        for r in ranks:
            job = dict(config, batch=batch or r, output=os.path.join(tmp, f"result{r}.json"))
            path = os.path.join(tmp, f"config{r}.json")
            with open(path, "w") as f:
                json.dump(job, f)
            env = dict(os.environ)
            env["OMP_NUM_THREADS"] = str(threads or max(1, (os.cpu_count() or 1) // r))
            cmd = [launcher, *launcher_args(hosts), "-n", str(r), sys.executable, "-m", "mpi4py", "-m",
                   "deep500lite.bench.spatial", path]
            rc = run_job(cmd, timeout=job_timeout, env=env, hosts=hosts)
            if rc != 0 or not os.path.exists(job["output"]):
                raise UserError("The spatial benchmark job failed; its ranks' errors are printed above. "
                                f"Received: exit status {rc} from {' '.join(cmd)}")
            with open(job["output"]) as f:
                rows.extend(json.load(f))
    config["threads"] = threads
    return SpatialBenchmark(rows, config)


# ---------------------------------------------------------------- the MPI job
def _feeds(batch, channels, size, seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, channels, size, size)).astype(np.float32),
            "label": rng.integers(0, 2, (batch, size, size)).astype(np.int64)}


def _sample_step(comm, executor, feeds):
    """One data-parallel step: local forward/backward on this rank's samples, then one allreduce."""
    from deep500lite.lv3.spatial import TIME_KEYS

    t = dict.fromkeys(TIME_KEYS, 0.0)
    start = time.perf_counter()
    loss = float(executor.inference_and_backprop(feeds, "loss")["loss"])
    net = executor.network
    names = [g for _, g in net.gradient("loss")]
    grads = net.fetch_tensors(names)
    t["compute"] = time.perf_counter() - start
    mark = time.perf_counter()
    comm.barrier()
    t["idle"] = time.perf_counter() - mark
    mark = time.perf_counter()
    comm.allreduce(np.concatenate([g.reshape(-1) for g in grads]), "sum")
    t["allreduce"] = time.perf_counter() - mark
    t["total"] = time.perf_counter() - start
    t["other"] = t["total"] - t["compute"] - t["idle"] - t["allreduce"]
    return t, float(comm.allreduce(np.array([loss]), "mean")[0])


def _activation_shapes(network, x_shape):
    from deep500lite.lv3.spatial_graph import plan_spatial

    plan = plan_spatial(network.to_onnx(), "x", x_shape, 1)
    return [plan.shapes["x"]] + [plan.shapes[n.output[0]] for n in plan.nodes]


def worker_main(config_path: str) -> int:
    """Body of the MPI job (``python -m mpi4py -m deep500lite.bench.spatial CONFIG``) on every rank."""
    from deep500lite.lv1.network import load_model
    from deep500lite.lv3.mpi import MPICommunicator
    from deep500lite.registry import executor
    from deep500lite.lv3.spatial import TIME_KEYS, SpatialParallelNetwork

    with open(config_path) as f:
        cfg = json.load(f)
    comm = MPICommunicator()
    p, n = comm.size, cfg["batch"]
    bn = cfg.get("batchnorm")
    model = mesh_network(cfg["channels"], cfg["size"], cfg["width"], cfg["layers"], batchnorm=bn is not None)
    feeds = _feeds(n, cfg["channels"], cfg["size"], seed=1)
    rows = []
    for mode in cfg["modes"]:
        if mode == "sample":
            local = {k: v[comm.rank * n // p:(comm.rank + 1) * n // p] for k, v in feeds.items()}
            ex = executor(load_model(model), cfg["framework"])
            acts = sum(int(np.prod(s)) * 4 for s in _activation_shapes(ex.network, local["x"].shape))

            def step(ex=ex, local=local, acts=acts):
                return (*_sample_step(comm, ex, local), acts)
        else:
            spn = SpatialParallelNetwork(comm, model, "x", cfg["framework"], overlap=mode == "spatial",
                                         grid=cfg.get("grid"), batchnorm=bn or "batch")

            def step(spn=spn):
                res = spn.forward_backward(feeds, "loss")
                return res.times, float(res.outputs["loss"]), res.activation_bytes
        step()  # warm-up: builds the executors
        times, splits = [], []
        for _ in range(cfg["steps"]):
            comm.barrier()
            start = time.perf_counter()
            split, loss, acts = step()
            elapsed = np.array([time.perf_counter() - start])
            times.append(float(comm.allreduce(elapsed, "max")[0]))
            splits.append(split)
        mean = {k: float(np.mean([s[k] for s in splits])) for k in TIME_KEYS}
        mean = {k: float(comm.allreduce(np.array([v]), "mean")[0]) for k, v in mean.items()}
        acts = int(comm.allreduce(np.array([acts], np.int64), "max")[0])
        med = float(np.median(times))
        rows.append({"ranks": p, "mode": mode, "batch": n, "step_s": med, "per_sample_s": med / n, "steps": times,
                     "split": mean, "activation_bytes": acts, "loss": loss})
    if comm.rank == 0:
        with open(cfg["output"], "w") as f:
            json.dump(rows, f)
    return 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1]))
