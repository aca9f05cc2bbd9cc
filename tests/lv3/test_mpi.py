"""Level 3 communicators and allreduce algorithms, checked in real mpiexec jobs.

Each MPI test starts ``mpiexec -n P python -m mpi4py SCRIPT`` in its own process group with a
timeout, so no test can hang; the scripts beside this file do the checks on every rank.
"""

from __future__ import annotations

import json
import math
import os
import platform
import signal
import subprocess
import sys

import numpy as np
import pytest

from deep500lite.errors import UserError
from deep500lite.lv3 import allreduce as ar
from support import REPO, mpirun, requires_mpi

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("p", [2, 3, 4])
def test_every_operation_matches_numpy(p):
    """Every allreduce algorithm (float32/float64, sum/max, lengths 0, 1, < p, odd, ~1e5) and
    every other operation equals numpy on every rank; ring counts exactly its bytes."""
    rc, out, _ = mpirun(p, os.path.join(HERE, "mpi_check_collectives.py"))
    assert rc == 0 and "OK " in out and "FAIL" not in out, out[-6000:]


@pytest.mark.mpi
@requires_mpi
def test_a_raising_rank_ends_the_job_and_names_itself():
    rc, out, seconds = mpirun(3, os.path.join(HERE, "mpi_check_failure.py"), "raise", timeout=60)
    assert rc != 0, out
    assert "deep500lite: rank 1 of 3 raised ValueError: boom from the test" in out, out
    assert "finished without error" not in out, out
    assert seconds < 15, f"took {seconds:.1f} s"


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("algorithm", ["ring", "tree", "native"])
def test_a_stalled_collective_times_out_naming_rank_and_operation(algorithm):
    # Rank 2 of 3 skips the allreduce; ranks 0 and 1 have a 2 s timeout.
    rc, out, seconds = mpirun(3, os.path.join(HERE, "mpi_check_failure.py"), "stall", algorithm, timeout=60)
    assert rc != 0, out
    assert "CommunicationTimeout: rank " in out and f"allreduce({algorithm})" in out, out
    assert "timed out after 2 s waiting for" in out, out
    if algorithm != "native":
        assert "waiting for a message from rank " in out, out
    assert "finished without error" not in out, out
    assert seconds < 15, f"took {seconds:.1f} s"


# ------------------------------------------------------- without MPI
@requires_mpi
def test_single_process_communicator_and_bad_input():
    # A fresh interpreter, so this pytest process never initializes MPI.
    out = subprocess.run([sys.executable, os.path.join(HERE, "mpi_check_single.py")], capture_output=True,
                         text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stdout + out.stderr


def test_import_does_not_load_mpi4py():
    code = "import sys, deep500lite as d5; d5.distributed.MPICommunicator; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def seed_costs(n, p, a, b):
    """The seeds' alpha-beta costs (no compute term), for p a power of two."""
    lg = math.log2(p)
    return {"ring": 2 * (p - 1) * a + 2 * (p - 1) / p * n * b,
            "recursive_doubling": lg * (a + n * b),
            "rabenseifner": 2 * lg * a + 2 * (p - 1) / p * n * b,
            "tree": 2 * lg * (a + n * b)}


@pytest.mark.parametrize("p", [2, 4, 8, 64])
def test_costs_are_the_seed_formulas(p):
    model = ar.AlphaBeta(alpha=3e-6, beta=2e-10)
    for n in (4, 4096, 1 << 26):
        expected = seed_costs(n, p, model.alpha, model.beta)
        for algorithm, cost in expected.items():
            assert ar.allreduce_cost(algorithm, n, p, model) == pytest.approx(cost, rel=1e-12)
        assert expected[ar.choose_algorithm(n, p, model)] == pytest.approx(min(expected.values()))


def test_auto_prefers_latency_algorithms_small_and_bandwidth_algorithms_large():
    model = ar.AlphaBeta(alpha=5e-5, beta=2e-10, gamma=5e-11)
    for p in (2, 3, 4, 5, 8, 16):
        assert ar.choose_algorithm(8, p, model) == "recursive_doubling"
        assert ar.choose_algorithm(256 << 20, p, model) in ("ring", "rabenseifner")
    # Non-powers of two pay a fold for Rabenseifner (a full-size message), so the ring wins large.
    assert ar.choose_algorithm(256 << 20, 3, model) == "ring"
    assert ar.choose_algorithm(256 << 20, 4, model) == "rabenseifner"
    # One extra rank costs recursive doubling 2 (alpha + n beta) + n gamma.
    cost = ar.allreduce_cost
    extra = cost("recursive_doubling", 1000, 5, model) - cost("recursive_doubling", 1000, 4, model)
    assert extra == pytest.approx(2 * (5e-5 + 1000 * 2e-10) + 1000 * 5e-11)
    assert ar.allreduce_cost("ring", 10**6, 1, model) == 0.0
    with pytest.raises(UserError, match="Received: algorithm='native'"):
        ar.allreduce_cost("native", 8, 4, model)


def test_block_bounds_cover_the_array():
    for n in (0, 1, 3, 10, 101):
        for parts in (1, 2, 3, 4, 7):
            b = ar.block_bounds(n, parts)
            lengths = np.diff(b)
            assert b[0] == 0 and b[-1] == n and len(b) == parts + 1
            assert lengths.min() >= 0 and lengths.max() - lengths.min() <= 1


# ------------------------------------------------------------ bench allreduce
BENCH_CLI = ("import argparse, sys; from deep500lite.cli import bench_allreduce; "
             "p = argparse.ArgumentParser(); bench_allreduce.add_subparser(p.add_subparsers()); "
             "a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))")


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_bench_allreduce_reports_bandwidths_model_and_data_check(tmp_path, ranks):
    out_json = tmp_path / "allreduce.json"
    cmd = [sys.executable, "-c", BENCH_CLI, "allreduce", "-n", str(ranks), "--max-bytes", "1KiB", "--factor", "16",
           "--max-time", "0.02", "--timeout", "20", "--json", str(out_json),
           "--plot", str(tmp_path / "allreduce.png")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"bench allreduce did not end: {proc.communicate()[0][-3000:]}")
    assert proc.returncode == 0, out
    for text in ("busbw", "algbw", "(GB/s)", "out-of-place", "in-place", "# Avg bus bandwidth    : ",
                 "alpha-beta model (us)", "#wrong", "auto->", "data check: 0 wrong"):
        assert text in out, out
    data = json.loads(out_json.read_text())
    if platform.libc_ver()[0] == "glibc":  # the ranks kept their freed memory, and the output says so
        assert data["allocator"].startswith("kept") and f"freed memory: {data['allocator']}" in out, out
    p, m = data["ranks"], data["model"]
    assert p == ranks and m["alpha"] > 0 and m["beta"] > 0 and data["environment"]
    rows = data["rows"]
    assert [(r["bytes"], r["algorithm"]) for r in rows] == [(s, a) for s in (4, 64, 1024) for a in ar.ALGORITHMS]
    for r in rows:
        assert r["wrong"] == 0 and len(r["samples"]) >= 3
        median = float(np.median(r["samples"]))
        assert r["summary"]["median"] == pytest.approx(median)
        assert r["algbw"] == pytest.approx(r["bytes"] / median)
        assert r["busbw"] == pytest.approx(r["bytes"] / median * 2 * (p - 1) / p)
        n = r["bytes"]
        if r["algorithm"] == "ring":
            if (n // 4) % p == 0:  # equal blocks; otherwise the ring's blocks differ by one element
                assert r["bytes_sent"] == 2 * (p - 1) * n // p
            expected = 2 * (p - 1) * m["alpha"] + 2 * (p - 1) / p * n * m["beta"] + (p - 1) / p * n * m["gamma"]
            assert r["predicted"] == pytest.approx(expected)
        if r["algorithm"] == "native":
            assert r["predicted"] is None
    png = (tmp_path / "allreduce.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    from deep500lite.bench.allreduce import AllreduceBenchmark

    again = AllreduceBenchmark.from_dict(data)
    assert again.table() == AllreduceBenchmark.from_dict(json.loads(json.dumps(again.to_dict()))).table()
    assert [s.median for _, s, _, _ in again.summaries()] == [r["summary"]["median"] for r in rows]


_RSS_AFTER_FREE = """
import sys, numpy as np
from deep500lite.bench.allreduce import keep_freed_memory
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * 4096
said = keep_freed_memory() if sys.argv[1] == "keep" else ""
before = rss()
x = np.ones(16 << 20, np.float32)  # 64 MiB, written
del x
print(rss() - before, said)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not os.path.exists("/proc/self/statm"),
                    reason="glibc's mallopt and Linux's /proc/self/statm")
def test_keep_freed_memory_keeps_a_freed_64_mib_block_resident():
    def resident_after_free(mode):
        out = subprocess.run([sys.executable, "-c", _RSS_AFTER_FREE, mode], capture_output=True, text=True,
                             cwd=REPO, timeout=60, check=True).stdout.split(maxsplit=1)
        return int(out[0]), out[1].strip() if len(out) > 1 else ""

    kept, said = resident_after_free("keep")
    released, _ = resident_after_free("default")
    assert said.startswith("kept:") and "M_MMAP_MAX=0" in said
    assert kept >= 60 << 20, kept  # the block's pages stay in the process after the free
    assert released < 8 << 20, released  # glibc's default unmaps them


def test_bench_allreduce_rejects_bad_input():
    from deep500lite.bench import allreduce as bench

    assert bench.parse_bytes("4") == 4 and bench.parse_bytes("64KiB") == 65536 and bench.parse_bytes("2M") == 2 << 20
    with pytest.raises(UserError, match="Received: '12 parsecs'"):
        bench.parse_bytes("12 parsecs")
    with pytest.raises(UserError, match=r"Allowed values are 'native'.*Received: 'ring,fast'"):
        bench.parse_algorithms("ring,fast")
    assert bench.message_sizes(4, 256 << 20) == [4 * 4**k for k in range(14)]
    assert bench.message_sizes(4, 100, factor=16) == [4, 64, 100]
    with pytest.raises(UserError, match="multiples of 4 bytes"):
        bench.message_sizes(3, 100)
    with pytest.raises(UserError, match="at least 2 ranks"):
        bench.run_allreduce_benchmark(1, [4])
