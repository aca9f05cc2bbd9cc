"""``deep500lite bench dataset``: many small files against one packed shard, and loading against compute.

Method::

    take N samples of a dataset (synthetic 1x28x28 by default)
    write them as N small files, DIR/files/<label>/<index>.npy (or .png), one sample each,
          and as one packed shard, DIR/samples.d5shard, with the same values
    check that both readers return the same batch for the same indices
    cold-ish pass, per reader: ask the kernel to drop the files from the page cache
          (fdatasync + posix_fadvise(POSIX_FADV_DONTNEED), advisory), then read every sample once
          in a random order, in batches; a truly cold cache needs root (drop_caches), which this
          benchmark does not use
    warm: time_paired(read a random batch from the files, from the shard), alternating, until
          the 95% CI of the median ratio is within 2% or max_time / 2 is spent; throughput =
          batch / median time; the ratio shard/files is the median of the per-pair ratios
    compute: LeNet (deep500lite.networks, sized for the samples) forward + backward with the
          dataset's loss on the chosen executor, on shard batches, timed with time_function
    one epoch: N / throughput for each reader, against ceil(N / batch) * compute time per batch

The target is a warm ratio >= 10x.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
import time

import numpy as np

from deep500lite.errors import UserError, format_choices
from deep500lite.lv2.dataset import Dataset

__all__ = ["DatasetBenchResult", "run_dataset_bench", "TARGET_RATIO", "FILE_FORMATS", "NpyFilesDataset"]

TARGET_RATIO = 10.0
FILE_FORMATS = ("npy", "png")


class NpyFilesDataset(Dataset):
    """One ``.npy`` file per sample, read with :func:`numpy.load` on access (the "many small files" layout).

    Args:
        files: one path per sample.
        labels: one int64 label per sample.
        input_node: the network input the samples feed.
        label_node: the network input the labels feed.
    """

    def __init__(self, files, labels, input_node: str, label_node: str):
        super().__init__(input_node, label_node)
        self.files, self.labels = list(files), np.asarray(labels, dtype=np.int64)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return {self.input_node: np.load(self.files[index]), self.label_node: self.labels[index]}
        idx = np.arange(len(self))[index] if isinstance(index, slice) else np.asarray(index)
        return {self.input_node: np.stack([np.load(self.files[i]) for i in idx.tolist()]),
                self.label_node: self.labels[idx]}

    def __len__(self):
        return len(self.files)


@dataclasses.dataclass
class DatasetBenchResult:
    """What ``deep500lite bench dataset`` measured."""

    dataset: str
    samples: int
    sample_shape: tuple
    sample_dtype: str
    file_format: str
    batch_size: int
    framework: str
    bytes_files: int
    bytes_shard: int
    write_seconds: dict
    cold: dict  # reader -> seconds for one pass over every sample
    paired: object  # PairedMeasurement: a = files, b = shard (seconds per batch)
    compute: object  # Measurement: seconds per forward+backward batch
    cache_note: str

    @property
    def ratio(self):
        """Summary of the per-pair ratios files time / shard time (= shard / files throughput)."""
        return self.paired.ratio

    @property
    def verdict(self) -> str:
        """``meets`` (CI lower bound >= target), ``likely`` (median >= target) or ``misses``."""
        r = self.ratio
        return "meets" if r.ci_low >= TARGET_RATIO else "likely" if r.median >= TARGET_RATIO else "misses"

    def throughput(self, reader: str) -> tuple[float, float, float]:
        """Warm samples/s of ``files`` or ``shard``: ``(median, CI low, CI high)``."""
        s = (self.paired.a if reader == "files" else self.paired.b).summary
        return self.batch_size / s.median, self.batch_size / s.ci_high, self.batch_size / s.ci_low

    def cold_throughput(self, reader: str) -> float:
        """Samples/s of the cold-ish first pass."""
        return self.samples / self.cold[reader]

    @property
    def batches_per_epoch(self) -> int:
        """Batches in one epoch over the samples (the last one may be partial)."""
        return math.ceil(self.samples / self.batch_size)

    def epoch_seconds(self) -> dict:
        """Seconds of one epoch: loading from files (warm, cold-ish), from the shard, and compute."""
        return {"files_warm": self.samples / self.throughput("files")[0],
                "files_cold": self.cold["files"],
                "shard_warm": self.samples / self.throughput("shard")[0],
                "shard_cold": self.cold["shard"],
                "compute": self.batches_per_epoch * self.compute.summary.median}

    def to_dict(self) -> dict:
        """JSON-ready form with every raw sample."""
        r = self.ratio
        return {"dataset": self.dataset, "samples": self.samples, "sample_shape": list(self.sample_shape),
                "sample_dtype": self.sample_dtype, "file_format": self.file_format, "batch_size": self.batch_size,
                "framework": self.framework, "bytes": {"files": self.bytes_files, "shard": self.bytes_shard},
                "write_seconds": self.write_seconds, "cold_pass_seconds": self.cold,
                "throughput_samples_per_s": {
                    k: dict(zip(("median", "ci_low", "ci_high"), self.throughput(k))) for k in ("files", "shard")},
                "cold_samples_per_s": {k: self.cold_throughput(k) for k in ("files", "shard")},
                "ratio_shard_over_files": r.to_dict(), "target_ratio": TARGET_RATIO, "verdict": self.verdict,
                "epoch_seconds": self.epoch_seconds(), "batches_per_epoch": self.batches_per_epoch,
                "read_times": self.paired.to_dict(), "compute_times": self.compute.to_dict(),
                "cache_note": self.cache_note}


def _source_samples(dataset, samples, root, seed, shape):
    from deep500lite.datasets import load_dataset

    if dataset == "synthetic":
        train, _ = load_dataset("synthetic", "input", "label", seed=seed, train_size=samples, test_size=1,
                                shape=shape or (1, 28, 28))
    else:
        if shape is not None:
            raise UserError(f"shape applies to the synthetic dataset only; {dataset!r} samples have their own "
                            f"shape. Received: shape={shape!r}")
        train, _ = load_dataset(dataset, "input", "label", root=root)
    n = min(samples, len(train))
    batch = train[np.arange(n)]
    return np.ascontiguousarray(batch["input"]), np.asarray(batch["label"], dtype=np.int64)


def _write_files(folder, x, y, file_format):
    files = []
    for label in np.unique(y).tolist():
        os.makedirs(os.path.join(folder, str(label)), exist_ok=True)
    if file_format == "npy":
        for i, (sample, label) in enumerate(zip(x, y.tolist())):
            path = os.path.join(folder, str(label), f"{i:07d}.npy")
            np.save(path, sample)
            files.append(path)
        return files
    from PIL import Image

    for i, (sample, label) in enumerate(zip(x, y.tolist())):
        path = os.path.join(folder, str(label), f"{i:07d}.png")
        image = sample[0] if sample.shape[0] == 1 else sample.transpose(1, 2, 0)
        Image.fromarray(image).save(path)
        files.append(path)
    return files


def _drop_from_page_cache(paths) -> bool:
    """Write back, then advise the kernel to evict, each file; False where the OS offers no way."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def _one_pass(dataset, order, batch_size) -> float:
    t0 = time.perf_counter()
    for start in range(0, len(order), batch_size):
        dataset[order[start:start + batch_size]]
    return time.perf_counter() - t0


def _cycle_batches(n, batch_size, rng):
    """A function returning the next random batch of indices (fresh permutations, endlessly)."""
    state = {"order": rng.permutation(n), "pos": 0}

    def next_batch():
        if state["pos"] + batch_size > n:
            state["order"], state["pos"] = rng.permutation(n), 0
        idx = state["order"][state["pos"]:state["pos"] + batch_size]
        state["pos"] += batch_size
        return idx

    return next_batch


def _compute_step(framework, batch_size, classes, shape, feeds):
    from deep500lite.datasets import dataset_loss
    from deep500lite.networks import create_model
    from deep500lite.registry import executor

    net, _, output = create_model("lenet", batch_size, classes=classes, shape=shape)
    net.add_operation(dataset_loss("synthetic")([output, "label"], "loss"))
    ex = executor(net, framework)
    return (lambda: ex.inference_and_backprop(feeds, "loss")), ex


def run_dataset_bench(dataset: str = "synthetic", samples: int = 4096, batch_size: int = 64,
                      framework: str | None = None, max_time: float = 10.0, directory=None,
                      file_format: str = "npy", root=None, seed: int = 0, shape=None,
                      progress=None) -> DatasetBenchResult:
    """Compare random-access reads of many small files with one packed shard (see the module doc).

    Args:
        dataset: where the samples come from: ``synthetic`` (1x28x28 float32, any number of
            samples) or another dataset name (its training split, at most ``samples`` samples).
        samples: number of samples N.
        batch_size: samples per random-access read and per compute step.
        framework: executor for the compute side (default ``torch`` when installed, else ``reference``).
        max_time: seconds of timed work: half for the paired reads, half for compute.
        directory: where to write the files and the shard (kept); default a temporary folder, removed.
        file_format: ``npy`` (one ``numpy.save`` file per sample) or ``png`` (uint8 images; the shard
            then stores uint8 too).
        root: the folder of a dataset read from files.
        seed: seed of the samples and of the random read order.
        shape: the sample shape of ``synthetic`` samples (default ``(1, 28, 28)``).
        progress: optional ``callable(str)`` told what is being done.

    Returns:
        A :class:`DatasetBenchResult`.
    """
    from deep500lite.datasets import ShardDataset, write_shards
    from deep500lite.datasets.formats import ImageFolderDataset
    from deep500lite.lv2.dataset import NumpyDataset
    from deep500lite.metrics.timing import time_function, time_paired
    from deep500lite.registry import baseline, frameworks_with

    if file_format not in FILE_FORMATS:
        raise UserError(f"file_format must be one of {format_choices(FILE_FORMATS)}. Received: {file_format!r}")
    for key, value in (("samples", samples), ("batch_size", batch_size)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise UserError(f"{key} must be a positive integer. Received: {value!r}")
    if max_time <= 0:
        raise UserError(f"max_time must be positive. Received: {max_time!r}")
    if framework is None:
        # the first installed framework with native optimizers (torch), else the baseline
        native = frameworks_with(training=True, native_optimizers=True, available=True)
        framework = native[0] if native else baseline().name
    say = progress or (lambda msg: None)
    x, y = _source_samples(dataset, samples, root, seed, shape)
    n = len(x)
    if n < batch_size:
        raise UserError(f"batch_size {batch_size} exceeds the {n} samples available from {dataset!r}; use a "
                        f"smaller --batch-size or more --samples. Received: --batch-size {batch_size}")
    classes = max(int(y.max()) + 1, 2)
    if file_format == "png":
        if x.min() < 0 or x.max() > 1 or x.shape[1] not in (1, 3):
            raise UserError(f"PNG files hold 1- or 3-channel images in [0, 1]; {dataset!r} samples are "
                            f"{x.dtype}{list(x.shape[1:])} in [{x.min():.3g}, {x.max():.3g}]. Use --format npy. "
                            "Received: --format png")
        x = np.rint(x.astype(np.float64) * 255).astype(np.uint8)

    own = directory is None
    folder = tempfile.mkdtemp(prefix="d5bench-dataset-") if own else os.path.abspath(directory)
    try:
        files_dir = os.path.join(folder, "files")
        shard = os.path.join(folder, "samples.d5shard")
        if os.path.exists(files_dir):
            shutil.rmtree(files_dir)
        say(f"writing {n} .{file_format} files in {files_dir}")
        t0 = time.perf_counter()
        files = _write_files(files_dir, x, y, file_format)
        t_files = time.perf_counter() - t0
        say(f"writing the packed shard {shard}")
        t0 = time.perf_counter()
        write_shards(NumpyDataset(x, "input", y, "label"), shard,
                     image_dtype=None, classes=classes, source={"benchmark": "dataset", "dataset": dataset})
        t_shard = time.perf_counter() - t0
        if file_format == "png":
            small = ImageFolderDataset(files, y, "input", "label", [str(c) for c in range(classes)],
                                       channels=x.shape[1])
            packed = _ScaledShard(ShardDataset(shard, "input", "label"))
        else:
            small = NpyFilesDataset(files, y, "input", "label")
            packed = ShardDataset(shard, "input", "label")
        rng = np.random.default_rng(seed)
        probe = rng.choice(n, size=batch_size, replace=False)
        a, b = small[probe], packed[probe]
        if not (np.array_equal(a["input"], b["input"]) and np.array_equal(a["label"], b["label"])):
            raise RuntimeError("the small files and the shard returned different samples for the same indices")

        dropped = _drop_from_page_cache(files + [shard])
        cache_note = ("cold-ish pass: first read after fdatasync + posix_fadvise(DONTNEED) on every file "
                      "(advisory; a truly cold page cache needs root: echo 3 > /proc/sys/vm/drop_caches)"
                      if dropped else "cold-ish pass: first read after writing (this OS offers no posix_fadvise; "
                                      "dropping the page cache needs root)")
        say("cold-ish pass over the files")
        cold = {"files": _one_pass(small, rng.permutation(n), batch_size)}
        say("cold-ish pass over the shard")
        cold["shard"] = _one_pass(packed, rng.permutation(n), batch_size)

        say(f"warm random-access reads, files and shard in alternation (up to {max_time / 2:g} s)")
        next_a, next_b = _cycle_batches(n, batch_size, rng), _cycle_batches(n, batch_size, rng)
        paired = time_paired(lambda: small[next_a()], lambda: packed[next_b()], label_a="files", label_b="shard",
                             warmup=3, min_pairs=20, target_rel_ci=0.02, max_time=max_time / 2)

        say(f"compute: lenet forward+backward on {framework} (up to {max_time / 2:g} s)")
        feeds = packed[np.arange(batch_size)]
        feeds = {"input": np.ascontiguousarray(feeds["input"], dtype=np.float32), "label": feeds["label"]}
        step, ex = _compute_step(framework, batch_size, classes, x.shape[1:], feeds)
        compute = time_function(step, label=f"lenet {framework}", sync=ex.synchronize, warmup=1, min_runs=6,
                                max_time=max_time / 2)
        size_files = sum(os.path.getsize(f) for f in files)
        return DatasetBenchResult(
            dataset=dataset, samples=n, sample_shape=tuple(x.shape[1:]), sample_dtype=str(x.dtype),
            file_format=file_format, batch_size=batch_size, framework=framework, bytes_files=size_files,
            bytes_shard=os.path.getsize(shard), write_seconds={"files": t_files, "shard": t_shard}, cold=cold,
            paired=paired, compute=compute, cache_note=cache_note)
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)


class _ScaledShard(Dataset):
    """A uint8 shard served as float32 / 255, like the PNG reader serves the same images."""

    def __init__(self, shard):
        super().__init__(shard.input_node, shard.label_node)
        self.shard = shard

    def __getitem__(self, index):
        batch = self.shard[index]
        batch[self.input_node] = batch[self.input_node].astype(np.float32) / np.float32(255)
        return batch

    def __len__(self):
        return len(self.shard)
