"""``deep500lite bench dataset``: runs tiny, prints its table and JSON, keeps files in --dir (no timing
assertions: the >= 10x target is checked by running the benchmark, see docs/datasets.md)."""

import json
import os

import numpy as np

import deep500lite as d5
from support import run_cli
from deep500lite.datasets import ShardDataset

# The fastest executor for the tiny compute side (the reference executor is slow, but always there).
FRAMEWORK = "onnxruntime" if d5.is_framework_available("onnxruntime") else "reference"


def test_bench_dataset_table_json_and_kept_files(tmp_path):
    out, folder = tmp_path / "bench.json", tmp_path / "kept"
    proc = run_cli("bench", "dataset", "--samples", "48", "--batch-size", "8", "--shape", "1,8,8", "--max-time",
                   "0.4", "--framework", FRAMEWORK, "--dir", folder, "--json", out)
    assert proc.returncode == 0, proc.stderr
    assert "random-access reads: 48 samples of float32[1x8x8] from synthetic, random batches of 8" in proc.stdout
    for fragment in ("small files (.npy)", "packed shard", "ratio shard/files (warm):", "target >= 10x:",
                     "posix_fadvise", "needs root", "one epoch (48 samples, 6 batches of 8)",
                     f"compute: lenet forward+backward ({FRAMEWORK})"):
        assert fragment in proc.stdout, fragment
    result = json.loads(out.read_text())["result"]
    assert result["samples"] == 48 and result["sample_shape"] == [1, 8, 8] and result["framework"] == FRAMEWORK
    pairs = result["read_times"]
    assert len(pairs["ratios"]) == len(pairs["a"]["raw"]) == len(pairs["b"]["raw"]) >= 20
    med = np.median(np.array(pairs["a"]["raw"]) / np.array(pairs["b"]["raw"]))
    assert abs(result["ratio_shard_over_files"]["median"] - med) <= 1e-9 * med
    assert abs(result["throughput_samples_per_s"]["shard"]["median"] - 8 / np.median(pairs["b"]["raw"])) < 1e-6 * (
        8 / np.median(pairs["b"]["raw"]))
    assert result["verdict"] in ("meets", "likely", "misses") and result["target_ratio"] == 10
    assert np.isclose(result["epoch_seconds"]["compute"], 6 * np.median(result["compute_times"]["raw"]), rtol=1e-9)
    assert all(v > 0 for v in result["cold_pass_seconds"].values())
    # --dir keeps one .npy per sample, in label folders, and the shard holding the same samples.
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(folder / "files") for f in fs)
    assert len(files) == 48 and all(f.endswith(".npy") for f in files)
    shard = ShardDataset(folder / "samples.d5shard", "x", "y")
    for path in files[::7]:
        i = int(os.path.basename(path)[:-4])
        np.testing.assert_array_equal(np.load(path), shard[i]["x"])
        assert int(os.path.basename(os.path.dirname(path))) == shard[i]["y"]


def test_bench_dataset_png_files(tmp_path):
    proc = run_cli("bench", "dataset", "--dataset", "digits", "--format", "png", "--samples", "24", "--batch-size",
                   "8", "--max-time", "0.3", "--framework", FRAMEWORK, "--dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "small files (.png)" in proc.stdout and "24 samples of uint8[1x8x8] from digits" in proc.stdout
    assert len([f for _, _, fs in os.walk(tmp_path / "files") for f in fs if f.endswith(".png")]) == 24


def test_bench_dataset_bad_input():
    for args, fragment in [
        (["--format", "png"], "PNG files hold 1- or 3-channel images in [0, 1]"),
        (["--samples", "4", "--batch-size", "8"], "batch_size 8 exceeds the 4 samples"),
        (["--dataset", "digits", "--shape", "1,8,8"], "shape applies to the synthetic dataset only"),
        (["--framework", "caffe"], "Unknown framework 'caffe'"),
        (["--shape", "8,8"], "expected C,H,W"),
    ]:
        proc = run_cli("bench", "dataset", "--samples", "16", "--batch-size", "8", "--max-time", "0.1", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and fragment in proc.stderr, (args, proc.stderr)
