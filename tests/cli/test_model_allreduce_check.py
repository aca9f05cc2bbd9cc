"""``model allreduce --check``: measured ``bench allreduce`` rows beside a link's alpha-beta model or a calibration.

The files are written here in the form ``bench allreduce --json`` writes, with medians from the
alpha-beta formulas of seed 002 (docs/distributed.md) computed in the test, so the verdicts are known.
A run on real emulated links is in ``tests/lv3/test_emulate.py``.
"""

from __future__ import annotations

import json

import pytest

from deep500lite.cli import main
from deep500lite.cli.model_allreduce_check import doubling_size
from deep500lite.lv3.costmodel import CalibratedModel, CostParameters

ALPHA, BETA = 20e-6, 1e-8  # 20 us, 100 MB/s: --network 2e-05,1e8


def _bench_file(path, ranks, times):
    """A ``bench allreduce --json`` file whose rows have the medians ``times[(algorithm, bytes)]``."""
    rows = [{"bytes": n, "algorithm": a, "summary": {"median": t, "ci_low": t * 0.99, "ci_high": t * 1.01}}
            for (a, n), t in times.items()]
    path.write_text(json.dumps({"benchmark": "allreduce", "ranks": ranks, "rows": rows,
                                "model": {"alpha": ALPHA, "beta": BETA, "gamma": 0.0}}))
    return str(path)


def _two_ranks(n, algorithm):
    # seed 002 on 2 ranks: recursive doubling one exchange of n bytes, the ring two of n/2
    return ALPHA + n * BETA if algorithm == "recursive_doubling" else 2 * ALPHA + n * BETA


SIZES = [4 ** k for k in range(4, 12)]  # 256 B .. 1 MiB


def test_rows_within_the_tolerance_pass_and_one_off_fails(tmp_path, capsys):
    times = {(a, n): _two_ranks(n, a) * f for n in SIZES for a, f in (("recursive_doubling", 1.1), ("ring", 0.9))}
    times.update({("native", n): _two_ranks(n, "recursive_doubling") * 1.15 for n in SIZES})
    path = _bench_file(tmp_path / "ar.json", 2, times)
    assert main(["model", "allreduce", "--check", path, "--network", f"{ALPHA},{1 / BETA}"]) == 0
    out = capsys.readouterr().out
    assert f"measured ({path}, 2 ranks) against predicted by" in out
    assert "native (as recursive_doubling)" in out and "-13.0%" in out  # 1/1.15 - 1
    assert f"predicted within 20% of the measured median in {3 * len(SIZES)} of {3 * len(SIZES)} rows" in out
    times[("ring", 4096)] = _two_ranks(4096, "ring") * 1.5
    path = _bench_file(tmp_path / "ar.json", 2, times)
    assert main(["model", "allreduce", "--check", path, "--network", f"{ALPHA},{1 / BETA}"]) == 1
    out = capsys.readouterr().out
    assert "ring 4 KiB -33%" in out and "the check fails" in out
    # rows outside --min-bytes..--max-bytes are shown, not judged
    assert main(["model", "allreduce", "--check", path, "--network", f"{ALPHA},{1 / BETA}",
                 "--min-bytes", "16KiB"]) == 0
    out = capsys.readouterr().out
    assert "not judged" in out and f"in {3 * (len(SIZES) - 3)} of {3 * (len(SIZES) - 3)} rows (16 KiB to 256 MiB)" in out


def test_the_measured_crossover_of_four_ranks_is_where_the_model_puts_it(tmp_path, capsys):
    # 4 ranks: recursive doubling 2 exchanges of n, Rabenseifner 4 messages and 1.5 n: equal at n = 4 alpha / beta
    times = {}
    for n in [2 ** k for k in range(8, 18)]:
        times[("recursive_doubling", n)] = 2 * (ALPHA + n * BETA)
        times[("rabenseifner", n)] = 4 * ALPHA + 1.5 * n * BETA
    path = _bench_file(tmp_path / "cross.json", 4, times)
    main(["model", "allreduce", "--check", path, "--network", f"{ALPHA},{1 / BETA}"])
    out = capsys.readouterr().out
    # 4 alpha / beta = 8,000 bytes: recursive doubling up to 4 KiB, Rabenseifner from 8 KiB, measured and modelled
    assert "crossover, measured: recursive_doubling is fastest up to 4 KiB, rabenseifner from 8 KiB" in out, out
    assert "crossover, model: recursive_doubling is fastest up to 4 KiB, rabenseifner from 8 KiB" in out, out


def test_where_latency_gives_way_to_bandwidth():
    # t = alpha + n beta doubles from t(4) at n = alpha / beta + 8 = 2,008 bytes
    points = [(n, ALPHA + n * BETA) for n in (4, 16, 2008, 8192)]
    assert doubling_size(points) == pytest.approx(2008)
    assert doubling_size([(4, 1.0), (16, 1.5)]) is None  # never twice the first


def test_a_calibration_file_predicts_the_rows(tmp_path, capsys):
    params = CostParameters(overhead=5e-6, alpha=ALPHA, beta=BETA, gamma=0.0, delta=0.0)
    model = CalibratedModel("MPICommunicator", ((2, params),))
    model.save(tmp_path / "cal.json")
    times = {("recursive_doubling", n): model.cost("recursive_doubling", n, 2) for n in SIZES}
    path = _bench_file(tmp_path / "ar.json", 2, times)
    assert main(["model", "allreduce", "--check", path, "--allreduce-model", str(tmp_path / "cal.json")]) == 0
    out = capsys.readouterr().out
    assert "+0.0%" in out and "calibrated model" in out


@pytest.mark.parametrize("content, message", [
    ("not json", "must name the JSON file of 'deep500lite bench allreduce --json'"),
    (json.dumps({"ranks": 2, "rows": []}), "rows with bytes, algorithm and a median"),
    (json.dumps({"ranks": 1, "rows": [{"bytes": 4, "algorithm": "ring", "summary": {"median": 1e-5}}]}),
     "Received: --check"),
])
def test_a_file_that_is_not_a_bench_file_is_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["model", "allreduce", "--check", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_nodes_must_match_the_file(tmp_path, capsys):
    path = _bench_file(tmp_path / "ar.json", 2, {("ring", 1024): 1e-4})
    assert main(["model", "allreduce", "--check", path, "--nodes", "4"]) == 2
    assert "was measured on 2 ranks; --nodes must be 2 or left out" in capsys.readouterr().err
