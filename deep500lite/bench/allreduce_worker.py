"""The MPI job of ``deep500lite bench allreduce``: what every rank runs.

:func:`deep500lite.bench.allreduce.run_allreduce_benchmark` starts ``mpiexec -n N python -m mpi4py -m
deep500lite.bench.allreduce_worker CONFIG``; :func:`worker_main` measures the ping-pong model,
calibrates (or loads) the fitted cost model, times every cell (between barriers, a call's time the
slowest rank's), checks each result and has rank 0 write the raw samples as JSON. Setting up the
job, reading its file back and the tables are in :mod:`deep500lite.bench.allreduce`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time

import numpy as np

from deep500lite.bench.allreduce import (_ITEMSIZE, COLD_CALLS, RELEASED_MEMORY, _format_bytes,
                                         keep_freed_memory)
from deep500lite.lv3.allreduce import P2P_ALGORITHMS, allreduce_cost

__all__ = ["worker_main"]

_PATTERN = 7  # element i of rank r is (i % 7) + r, so every sum is exact in float32

def _pattern(n: int, rank: int) -> np.ndarray:
    base = np.arange(_PATTERN, dtype=np.float32)
    return np.resize(base, n) + np.float32(rank)


def _count_wrong(result: np.ndarray, p: int) -> int:
    expected = _pattern(result.size, 0) * p + np.float32(p * (p - 1) // 2)
    return int(np.count_nonzero(result != expected))


def _warm_up(comm, x: np.ndarray, algorithm: str, budget: float, min_reps: int) -> tuple[int, int, int, float]:
    """One checked warm-up call and two pilot calls (collective).

    Returns:
        ``(wrong elements in the warm-up's result, bytes this rank sent in it, calls that fill
        about budget seconds, this rank's faster pilot call in seconds)``: the count is rank 0's,
        at least ``min_reps`` and at most 1000.
    """
    comm.reset_counters()
    out = comm.allreduce(x, algorithm=algorithm)
    sent, wrong = comm.bytes_sent, _count_wrong(out, comm.size)
    pilot = []
    for _ in range(2):
        comm.comm.Barrier()
        t0 = time.perf_counter()
        comm.allreduce(x, algorithm=algorithm)
        pilot.append(time.perf_counter() - t0)
    reps = np.array([max(min_reps, min(1000, int(budget / max(min(pilot), 1e-7))))], np.int64)
    comm.comm.Bcast(reps, root=0)
    return wrong, sent, int(reps[0]), min(pilot)


def _slowest(world, mine: np.ndarray, mpi) -> np.ndarray:
    """Elementwise, the largest of every rank's ``mine`` (collective): each call's slowest rank."""
    out = np.empty_like(mine)
    world.Allreduce(mine, out, op=mpi.MAX)
    return out


def _measure(comm, nbytes: int, algorithm: str, max_time: float, mpi, pingpong, calibrated) -> dict:
    world = comm.comm
    x = _pattern(nbytes // _ITEMSIZE, comm.rank)
    wrong, bytes_sent, reps, _ = _warm_up(comm, x, algorithm, max_time, 3)
    samples = np.empty(reps, np.float64)
    for i in range(samples.size):
        world.Barrier()
        t0 = time.perf_counter()
        out = comm.allreduce(x, algorithm=algorithm)
        samples[i] = time.perf_counter() - t0
    wrong += _count_wrong(out, comm.size)
    slowest = _slowest(world, samples, mpi)
    total_wrong = world.allreduce(wrong)
    chosen = comm.choose_algorithm(nbytes) if algorithm == "auto" else algorithm
    predicted = cal = None
    if chosen in P2P_ALGORITHMS:
        predicted = allreduce_cost(chosen, nbytes, comm.size, pingpong)
        cal = None if calibrated is None else calibrated.cost(chosen, nbytes, comm.size)
    return {"bytes": nbytes, "algorithm": algorithm, "chosen": chosen, "samples": slowest.tolist(),
            "predicted": predicted, "calibrated": cal, "wrong": total_wrong, "bytes_sent": bytes_sent}


def _plan_cells(comm, cells, arrays: dict, budget: float, rounds: int) -> list[dict]:
    """Warm up every ``(algorithm, bytes)`` of ``cells`` and size its calls per round (collective, :func:`_warm_up`).

    A cell whose one call takes longer than ``budget`` (its share of a round) is timed once every
    ``every`` rounds instead, at most ``rounds // 3`` apart so that each third of the rounds still
    has a call; its time then stays near ``budget * rounds``. ``every`` is rank 0's.
    """
    plan = []
    for algorithm, nbytes in cells:
        x = arrays.setdefault(nbytes, _pattern(nbytes // _ITEMSIZE, comm.rank))
        wrong, sent, reps, pilot = _warm_up(comm, x, algorithm, budget, 1)
        every = np.array([min(max(1, math.ceil(pilot / budget)), max(1, rounds // 3))], np.int64)
        comm.comm.Bcast(every, root=0)
        plan.append({"cell": (algorithm, nbytes), "reps": reps, "every": int(every[0]), "wrong": wrong,
                     "bytes_sent": sent, "pilot": pilot, "samples": [], "round": []})
    return plan


def _time_rounds(comm, plan: list[dict], arrays: dict, rounds: int, mpi, progress: bool,
                 evict: np.ndarray | None = None) -> list[dict]:
    """Time every planned cell once per round, in a new shuffled order each round (collective).

    A round visits the cells in a permutation that every rank draws alike from the round's
    number; a cell with ``every`` > 1 (see :func:`_plan_cells`) is timed in every ``every``-th
    round only, first in round ``i % every`` (``i``: its place in the plan). A cell marked
    ``cold`` also gets one cold call after its warm ones on every ``cold_every``-th visit: every
    rank reads ``evict`` first (:func:`_cold_call`). Returns, per cell: ``samples`` (each
    call's slowest rank), ``cold`` (the same for its cold calls, maybe empty), ``thirds`` (the
    medians of the first, second and last third of the rounds), ``wrong`` (elements off the exact
    sum, in the warm-up and the last call, over all ranks) and ``bytes_sent`` (this rank's, per call).
    """
    world = comm.comm
    for r in range(rounds):
        if comm.rank == 0 and progress:
            print(f"... round {r + 1}/{rounds}: {len(plan)} cells in a shuffled order", file=sys.stderr, flush=True)
        for i in np.random.default_rng(r).permutation(len(plan)):
            cell = plan[i]
            if (r - i) % cell["every"]:
                continue
            algorithm, nbytes = cell["cell"]
            for _ in range(cell["reps"]):
                world.Barrier()
                t0 = time.perf_counter()
                out = comm.allreduce(arrays[nbytes], algorithm=algorithm)
                cell["samples"].append(time.perf_counter() - t0)
            cell["round"] += [r] * cell["reps"]
            if r + cell["every"] >= rounds:  # the cell's last round
                cell["wrong"] += _count_wrong(out, comm.size)
            if "cold" in cell:
                if cell["visits"] % cell["cold_every"] == 0:
                    cell["cold"].append(_cold_call(comm, arrays[nbytes], algorithm, evict))
                cell["visits"] += 1
    results = []
    for cell in plan:
        slowest = _slowest(world, np.asarray(cell["samples"] + cell.get("cold", []), np.float64), mpi)
        slowest, cold = slowest[:len(cell["samples"])], slowest[len(cell["samples"]):]
        third = np.asarray(cell["round"]) * 3 // rounds
        results.append({"samples": slowest.tolist(), "cold": cold.tolist(), "wrong": world.allreduce(cell["wrong"]),
                        "thirds": [float(np.median(slowest[third == k])) for k in range(3)],
                        "bytes_sent": cell["bytes_sent"]})
    return results


def _cold_call(comm, x: np.ndarray, algorithm: str, evict: np.ndarray) -> float:
    """This rank's seconds of one cold call (collective): every rank reads ``evict`` first (summing it
    pulls it through the caches and pushes out what the allreduce had there), then meets the others
    at a barrier."""
    evict.sum()
    comm.comm.Barrier()
    t0 = time.perf_counter()
    comm.allreduce(x, algorithm=algorithm)
    return time.perf_counter() - t0


def _cold_rows(comm, cells, evict: np.ndarray, mpi) -> list:
    """``[(algorithm, bytes, ranks, median seconds)]`` of :data:`COLD_CALLS` cold calls per cell (collective,
    :func:`_cold_call`); a call's time is the slowest rank's, as for the warm calls."""
    world, out = comm.comm, []
    for algorithm, nbytes in cells:
        x = _pattern(nbytes // _ITEMSIZE, comm.rank)
        comm.allreduce(x, algorithm=algorithm)  # its buffers exist, as in a training loop's second step
        mine = np.array([_cold_call(comm, x, algorithm, evict) for _ in range(COLD_CALLS)], np.float64)
        slowest = _slowest(world, mine, mpi)
        out.append((algorithm, nbytes, comm.size, float(np.median(slowest))))
    return out


def _eviction_buffer(config) -> np.ndarray | None:
    """The buffer each rank reads before a cold call (None: no cold calls)."""
    n = int(config.get("evict_bytes") or 0) // _ITEMSIZE
    return np.ones(n, np.float32) if n else None


def _interleaved_rows(config, comm, mpi, pingpong, calibrated, calibrating: bool):
    """``(rows, the model fitted to the calibration cells, the first fit auto chose by or None)`` of an
    interleaved run (see ``interleave``).

    ``auto`` is timed in the rounds too. While calibrating, it chooses by a first fit to the
    calibration cells' pilot calls (the slowest rank's faster pilot), made before the rounds; each
    row records what it ran.
    """
    from deep500lite.perfmodel.allreduce import model_from_rows

    rounds, budget = int(config["rounds"]), config["max_time"] / int(config["rounds"])
    cal = [(a, n) for n in config["calibration_sizes"] for a in P2P_ALGORITHMS] if calibrating else []
    row_cells = [(a, n) for n in config["sizes"] for a in config["algorithms"]]
    evict = _eviction_buffer(config) if cal else None
    if comm.rank == 0 and config["progress"]:
        sizes = ", ".join(map(_format_bytes, config["calibration_sizes"]))
        cold = f", each with {COLD_CALLS} cold calls" if evict is not None else ""
        what = f"{len(cal)} calibration cells ({sizes}{cold}) and " if cal else ""
        print(f"... interleaving {what}{len(row_cells)} rows over {rounds} rounds", file=sys.stderr, flush=True)
    arrays: dict = {}
    plan, first = _plan_cells(comm, cal, arrays, budget, rounds), None
    if evict is not None:  # cold calls in the same rounds as the warm ones, so that both see the same machine
        for cell in plan:
            cell.update(cold=[], visits=0, cold_every=max(1, rounds // cell["every"] // COLD_CALLS))
    if cal and "auto" in config["algorithms"]:
        pilots = _slowest(comm.comm, np.array([c["pilot"] for c in plan], np.float64), mpi)
        first = model_from_rows(comm, [[(a, n, comm.size, float(t)) for (a, n), t in zip(cal, pilots)]],
                                environment=False)
        comm.cost_model = first
    plan += _plan_cells(comm, row_cells, arrays, budget, rounds)
    chosen = {n: comm.choose_algorithm(n) for a, n in row_cells if a == "auto"}  # what auto runs in the rounds
    timed = _time_rounds(comm, plan, arrays, rounds, mpi, config["progress"], evict)
    if calibrating:
        calibrated = model_from_rows(comm, [[(a, n, comm.size, float(np.median(t["samples"])))
                                             for (a, n), t in zip(cal, timed)]])
        if evict is not None:
            calibrated = calibrated.with_cold(comm.size, [(a, n, comm.size, float(np.median(t["cold"])))
                                                          for (a, n), t in zip(cal, timed)], evict.nbytes)
        comm.cost_model = calibrated
    rows = []
    for (algorithm, nbytes), t in zip(row_cells, timed[len(cal):]):
        ran = chosen[nbytes] if algorithm == "auto" else algorithm
        p2p = ran in P2P_ALGORITHMS
        rows.append({"bytes": nbytes, "algorithm": algorithm, "chosen": ran, "samples": t["samples"],
                     "predicted": allreduce_cost(ran, nbytes, comm.size, pingpong) if p2p else None,
                     "calibrated": calibrated.cost(ran, nbytes, comm.size) if p2p and calibrated is not None else None,
                     "wrong": t["wrong"], "bytes_sent": t["bytes_sent"], "pass_medians": t["thirds"]})
    return rows, calibrated, first


def _pass_rows(config, comm, mpi, pingpong, calibrated, calibrating: bool):
    """``(rows, the model fitted to every calibration pass)`` of a run in passes (see ``passes``).

    Each pass calibrates (when ``calibrating``) and then times every row in one stretch; ``auto``
    chooses by the first pass's fit in every pass.
    """
    from deep500lite.perfmodel.allreduce import calibration_rows, model_from_rows, pooled_rows

    passes = int(config.get("passes", 1))
    cal_runs, cold_runs, rows = [], [], []
    evict = _eviction_buffer(config) if calibrating else None
    for k in range(passes):
        label = f"pass {k + 1}/{passes}: " if passes > 1 else ""
        if calibrating:
            if comm.rank == 0 and config["progress"]:
                print(f"... {label}calibrating the cost model at "
                      f"{', '.join(map(_format_bytes, config['calibration_sizes']))}", file=sys.stderr, flush=True)
            cal_runs.append(calibration_rows(comm, sizes=config["calibration_sizes"]))
            if evict is not None:
                cold_runs.append(_cold_rows(comm, [(a, n) for n in config["calibration_sizes"]
                                                   for a in P2P_ALGORITHMS], evict, mpi))
            if k == 0:
                calibrated = model_from_rows(comm, cal_runs, environment=False)
                comm.cost_model = calibrated
        i = 0
        for nbytes in config["sizes"]:
            if comm.rank == 0 and config["progress"]:
                print(f"... {label}{_format_bytes(nbytes)}", file=sys.stderr, flush=True)
            for algorithm in config["algorithms"]:
                row = _measure(comm, nbytes, algorithm, config["max_time"], mpi, pingpong, calibrated)
                row["pass_medians"] = [float(np.median(row["samples"]))]
                if k == 0:
                    rows.append(row)
                else:
                    rows[i]["samples"] += row["samples"]
                    rows[i]["pass_medians"] += row["pass_medians"]
                    rows[i]["wrong"] += row["wrong"]
                i += 1
    if calibrating:
        # the fit to every pass's calibration predicts every row (auto: the algorithm it ran)
        calibrated = model_from_rows(comm, cal_runs)
        if evict is not None:
            calibrated = calibrated.with_cold(comm.size, pooled_rows(cold_runs), evict.nbytes)
        for row in rows:
            if row["chosen"] in P2P_ALGORITHMS:
                row["calibrated"] = calibrated.cost(row["chosen"], row["bytes"], comm.size)
    return rows, calibrated


def worker_main(config_path: str) -> int:
    """Body of the MPI job: every rank runs it (``python -m mpi4py -m deep500lite.bench.allreduce_worker CONFIG``)."""
    from mpi4py import MPI

    from deep500lite.lv3.mpi import MPICommunicator

    with open(config_path) as f:
        config = json.load(f)
    allocator = keep_freed_memory() if config.get("keep_memory", True) else RELEASED_MEMORY
    from deep500lite.perfmodel.allreduce import CalibratedModel

    comm = MPICommunicator(timeout=config["timeout"])
    model = comm.calibrate(use_file=False)
    calibrated = None
    calibrating = not config.get("model_file") and config.get("calibrate", True)
    if config.get("model_file"):
        calibrated = CalibratedModel.load(config["model_file"])
        comm.cost_model = calibrated
    auto_model = None
    if config.get("rounds"):
        rows, calibrated, auto_model = _interleaved_rows(config, comm, MPI, model, calibrated, calibrating)
    else:
        rows, calibrated = _pass_rows(config, comm, MPI, model, calibrated, calibrating)
    if calibrating and comm.rank == 0:
        calibrated.environment["allocator"] = allocator
        if config.get("save_model"):
            calibrated.save(config["save_model"])
    if comm.rank == 0:
        result = {"ranks": comm.size, "model": dataclasses.asdict(model), "rows": rows,
                  "calibration": None if calibrated is None else calibrated.to_dict(),
                  "auto_model": None if auto_model is None else auto_model.to_dict(),
                  "mpi_library": MPI.Get_library_version().splitlines()[0].strip(), "allocator": allocator}
        with open(config["output"] + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(config["output"] + ".tmp", config["output"])
    comm.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1]))
