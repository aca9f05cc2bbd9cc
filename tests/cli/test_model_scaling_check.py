"""``model scaling --check``: predictions beside measured ``deep500lite run -n P`` steps.

The runs in tests/data/scaling_check are real: ``deep500lite run digits_mlp_distributed -n P``
(P = 1, 2, 4, 8; 10 epochs; ``algorithm=auto``) and the ``bench allreduce`` calibration they used,
written on the 16-core lent machine of docs/scaling.md ("With a core per rank"), set A.
``run4-on-2-cores.json`` is the same recipe on 4 ranks on the 2-core AMD VM (``algorithm=auto``,
the calibration of docs/results/run-n-amd-2026-11-27/ar-interleaved.json), 2026-11-27.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from deep500lite.cli import main

DATA = Path(__file__).resolve().parent.parent / "data" / "scaling_check"
RUNS = {p: DATA / f"run{p}.json" for p in (1, 2, 4, 8)}
SHARED = DATA / "run4-on-2-cores.json"  # 4 ranks on a machine with 2 usable cores
BASE = ["model", "scaling", "digits_mlp_distributed", "--nodes", "1,2,4,8", "--weak", "--batch", "32",
        "--allreduce-model", str(DATA / "allreduce-model.json"), "--host-cores", "16", "--fusion-mb", "1",
        "--no-overlap", "--accelerator", "k80", "--step-from", str(RUNS[1])]


def measured(p: int) -> float:
    """The slowest rank's median step as the run wrote it (the 1-rank run's own median)."""
    data = json.loads(RUNS[p].read_text())
    step = data["summaries"]["step_time"] if p == 1 else data["distributed"]["aggregate"]["step_time"]
    return step["median"]


def test_check_puts_each_run_beside_its_prediction(tmp_path, capsys):
    out = tmp_path / "s.json"
    check = ",".join(str(RUNS[p]) for p in (1, 2))
    rc = main([*BASE, "--check", check, "--check", str(RUNS[4]), "--check", str(RUNS[8]), "--json", str(out)])
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    predicted = {r["accelerators"]: r["step"] for r in data["rows"]}
    runs = {c["ranks"]: c for c in data["checks"]["runs"]}
    assert sorted(runs) == [1, 2, 4, 8] and data["checks"]["tolerance"] == 0.2
    for p, c in runs.items():
        assert c["median"] == measured(p) and c["predicted"] == predicted[p]
        assert c["error"] == pytest.approx(predicted[p] / measured(p) - 1)
        assert c["ci_low"] <= c["median"] <= c["ci_high"]
    # the 1-rank run is the file the step was scaled to: a calibration point, not a test of the model
    assert runs[1]["verdict"] == "calibration point" and runs[1]["error"] == pytest.approx(0, abs=1e-12)
    expected = {p: abs(runs[p]["error"]) <= 0.2 for p in (2, 4, 8)}
    assert {p: runs[p]["verdict"] == "within" for p in (2, 4, 8)} == expected
    good = sum(expected.values())
    assert f"predicted within 20% of the measured step in {good} of 3 runs" in text
    assert rc == (0 if good == 3 else 1)


def test_a_tighter_tolerance_fails_the_check_with_exit_1(tmp_path, capsys):
    out = tmp_path / "s.json"
    errors = []
    for p in (2, 4, 8):
        assert main([*BASE, "--check", str(RUNS[p]), "--tolerance", "1", "--json", str(out)]) == 0
        errors.append(abs(json.loads(out.read_text())["checks"]["runs"][0]["error"]))
    capsys.readouterr()
    tight = min(errors) / 2  # every run misses at half its own smallest error
    rc = main([*BASE, "--check", ",".join(str(RUNS[p]) for p in (2, 4, 8)), "--tolerance", str(tight)])
    text = capsys.readouterr().out
    assert rc == 1 and "in 0 of 3 runs: the check fails" in text
    assert text.count(f"off by more than {tight * 100:g}%") == 3


def test_csv_keeps_the_check_off_stdout(capsys):
    main([*BASE, "--check", str(RUNS[2]), "--format", "csv"])
    out, err = capsys.readouterr()
    assert out.startswith("nodes,") and "measured step" not in out
    assert "measured step [95% CI]" in err


def test_bad_check_input_is_one_line_with_exit_2(tmp_path, capsys):
    no_steps = tmp_path / "no_steps.json"
    no_steps.write_text(json.dumps({"summaries": {}}))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    zero = tmp_path / "zero.json"
    data = json.loads(RUNS[2].read_text())
    data["distributed"]["aggregate"]["step_time"]["median"] = 0.0
    zero.write_text(json.dumps(data))
    cases = [
        (["--check", str(tmp_path / "missing.json")], "does not exist"),
        (["--check", str(broken)], "is not valid JSON"),
        (["--check", str(no_steps)], "no summaries.step_time with median"),
        (["--check", str(zero)], "median step must be positive"),
        (["--nodes", "1,2", "--check", str(RUNS[4])], "a run on 4 ranks, which this sweep does not predict"),
        (["--check", str(RUNS[2]), "--tolerance", "0"], "--tolerance: must be a fraction > 0"),
        (["--check", str(RUNS[2]), "--tolerance", "nan"], "--tolerance: must be a fraction > 0"),
    ]
    for extra, expected in cases:
        rc = main([*BASE, *extra])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1, (extra, err)
        assert expected in err and "Received:" in err, (extra, err)
    rc = main(["model", "scaling", "digits_mlp_distributed", "--nodes", "1,2", "--scheme", "pipeline",
               "--check", str(RUNS[2])])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "cannot be combined with another --scheme" in err and len(err.splitlines()) == 1


def test_the_bundled_runs_are_real_multi_rank_runs():
    for p, path in RUNS.items():
        data = json.loads(path.read_text())
        assert (data.get("distributed") or {}).get("ranks", 1) == p
        assert math.isfinite(measured(p)) and measured(p) > 0


def test_step_from_a_multi_rank_run_takes_its_1_rank_baseline(tmp_path, capsys):
    out = tmp_path / "s.json"
    base = json.loads(RUNS[2].read_text())["distributed"]["baseline"]["step_time"]
    args = [a if a != str(RUNS[1]) else str(RUNS[2]) for a in BASE]
    rc = main([*args, "--check", f"{RUNS[2]},{RUNS[4]}", "--json", str(out)])
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    rows = {r["accelerators"]: r for r in data["rows"]}
    assert rows[1]["step"] == pytest.approx(base["median"], rel=1e-9)  # 1 rank is the baseline the 2-rank run timed
    cv = (base["q3"] - base["q1"]) / 1.349 / base["median"]
    assert f"the 1-rank baseline timed after its 2 ranks, median {base['median'] * 1e6:.4g} us" in text
    assert f"jitter {cv * 100:.3g}%" in text
    runs = {c["ranks"]: c for c in data["checks"]["runs"]}
    # the 2-rank run lent its baseline, not its 2-rank step: that step is predicted, not a calibration point
    for p in (2, 4):
        assert runs[p]["verdict"] == ("within" if abs(runs[p]["error"]) <= 0.2 else "outside")
        assert runs[p]["predicted"] == rows[p]["step"] and runs[p]["median"] == measured(p)
    assert rc == (0 if all(c["verdict"] == "within" for c in runs.values()) else 1)


def test_a_run_with_more_ranks_than_cores_gets_a_note(tmp_path, capsys):
    recorded = json.loads(SHARED.read_text())["environment"]["cpu"]["usable_cores"]
    assert json.loads(SHARED.read_text())["distributed"]["ranks"] > recorded  # the file is what the test needs
    out = tmp_path / "s.json"
    main([*BASE, "--check", f"{RUNS[8]},{SHARED}", "--json", str(out)])
    text = capsys.readouterr().out
    runs = {c["file"]: c for c in json.loads(out.read_text())["checks"]["runs"]}
    assert runs[str(SHARED)]["usable_cores"] == recorded
    assert runs[str(RUNS[8])]["usable_cores"] == json.loads(RUNS[8].read_text())["environment"]["cpu"]["usable_cores"]
    notes = [line for line in text.splitlines() if line.startswith("note: ")]
    # only the shared run: 8 ranks on the 16-core machine had a core each
    assert notes == [f"note: {SHARED} ran 4 ranks on {recorded} usable cores: they took turns on the cores, and the "
                     f"model does not predict their waits for ranks the scheduler had not run yet (docs/scaling.md, "
                     f"'Where the 4-rank step goes')"]


def test_the_note_asks_for_host_cores_when_the_sweep_has_none(capsys):
    args = [a for i, a in enumerate(BASE) if a != "--host-cores" and BASE[i - 1] != "--host-cores"]
    assert len(args) == len(BASE) - 2
    main([*args, "--check", str(SHARED)])
    recorded = json.loads(SHARED.read_text())["environment"]["cpu"]["usable_cores"]
    note = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    assert len(note) == 1 and note[0].endswith(f"; give --host-cores {recorded} so that the prediction at least "
                                               f"shares the cores")


def test_a_run_without_a_recorded_core_count_gets_no_note(tmp_path, capsys):
    data = json.loads(SHARED.read_text())
    del data["environment"]["cpu"]
    bare = tmp_path / "run4.json"
    bare.write_text(json.dumps(data))
    out = tmp_path / "s.json"
    main([*BASE, "--check", str(bare), "--json", str(out)])
    assert "note: " not in capsys.readouterr().out
    assert json.loads(out.read_text())["checks"]["runs"][0]["usable_cores"] is None


def test_runs_of_one_rank_count_too_far_apart_for_any_prediction_are_named(tmp_path, capsys):
    # Two real 4-rank runs of the same recipe: on 16 cores (a core per rank) and on 2 cores.
    out = tmp_path / "s.json"
    main([*BASE, "--check", f"{RUNS[4]},{SHARED},{RUNS[2]}", "--json", str(out)])
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    fast, slow = sorted([measured(4), json.loads(SHARED.read_text())["distributed"]["aggregate"]["step_time"]["median"]])
    assert slow / fast > 1.5  # what the test needs: further apart than a 20% band can hold
    (group,) = data["checks"]["repeatability"]  # 2 ranks had one run: no entry
    predicted = {r["accelerators"]: r["step"] for r in data["rows"]}[4]
    assert group["ranks"] == 4 and group["runs"] == 2 and group["repeats"] is False
    assert group["fastest"] == fast and group["slowest"] == slow
    assert group["ratio"] == pytest.approx(slow / fast) and group["band"] == pytest.approx(1.2 / 0.8)
    assert group["median"] == pytest.approx((fast + slow) / 2)
    assert group["error"] == pytest.approx(predicted / ((fast + slow) / 2) - 1)
    lines = [line for line in text.splitlines() if line.startswith("2 runs on 4 ranks: ")]
    assert len(lines) == 1 and f"the slowest {slow / fast:.2f} times the fastest" in lines[0], text
    assert lines[0].endswith("one prediction can be within 20% of runs at most 1.50 times apart, so these runs "
                             "cannot all pass: the machine did not repeat the job"), text
    # one note for the 2-core run only
    assert sum(line.startswith("note: ") for line in text.splitlines()) == 1


def test_runs_close_enough_for_one_prediction_get_no_warning(tmp_path, capsys):
    twin = tmp_path / "run2-again.json"
    twin.write_text(RUNS[2].read_text())
    out = tmp_path / "s.json"
    # a 1-rank run checked against itself is the calibration point and is left out of the groups
    main([*BASE, "--check", f"{RUNS[1]},{RUNS[2]},{twin}", "--json", str(out)])
    text = capsys.readouterr().out
    (group,) = json.loads(out.read_text())["checks"]["repeatability"]
    assert group["ranks"] == 2 and group["ratio"] == 1.0 and group["repeats"] is True
    line = next(line for line in text.splitlines() if line.startswith("2 runs on 2 ranks: "))
    assert "cannot all pass" not in line and "the slowest 1.00 times the fastest" in line
    # a tolerance of 1 or more lets one prediction cover runs any distance apart
    main([*BASE, "--check", f"{RUNS[4]},{SHARED}", "--tolerance", "1", "--json", str(out)])
    capsys.readouterr()
    (group,) = json.loads(out.read_text())["checks"]["repeatability"]
    assert group["band"] is None and group["repeats"] is True


def test_several_shared_runs_share_one_note(tmp_path, capsys):
    twin = tmp_path / "run4-again.json"
    twin.write_text(SHARED.read_text())
    main([*BASE, "--check", f"{SHARED},{twin}"])
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and notes[0].startswith(f"note: {SHARED}, {twin} ran 4 ranks on "), notes
