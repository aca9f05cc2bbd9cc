"""Level 2: checkpoint and resume a :class:`~deep500lite.lv2.trainer.Trainer` at an epoch boundary.

A checkpoint is two files written atomically, ``NAME.npz`` (every array) and then ``NAME.json``
(everything else, with the SHA-256 of the ``.npz``, so a pair from two different saves is
detected). It holds:

- the network's parameters: every floating-point initializer (``network.parameters``,
  BatchNormalization running statistics included), read with ``network.fetch_tensors``;
- the optimizer's state: ``optimizer.get_state()`` when the optimizer has it; for a framework's
  native optimizer, what the framework's spec's ``state_hook`` returns (numpy values: torch's
  ``torch.optim`` ``state_dict``, TensorFlow's Keras optimizer variables); otherwise (the
  reference optimizers and other :class:`~deep500lite.ThreeStepOptimizer` subclasses) the
  optimizer's public attributes: numbers and dicts of arrays such as ``velocity``, ``first``,
  ``second``, ``t``;
- the samplers' state: the generator state of ``sampler.random`` and of each transformation's
  ``random`` (or ``sampler.get_state()`` when a sampler has it);
- the executor's random generator for dropout masks, where the executor has one
  (``executor.get_rng_state()``, or its framework's ``state_hook``);
- the trainer's position (epochs done, global step) and its statistics so far.

A run stopped after epoch ``k`` and resumed with :func:`load_checkpoint` on a new trainer (new
executor, optimizer and samplers, built the same way) runs epochs ``k+1..`` exactly as the
uninterrupted run would: the same batches in the same order, the same updates, and so the same
final parameters (bit for bit on the reference executor; the tests check torch too).

>>> trainer.run_loop(3, events=[CheckpointEvent("ckpt/run")])    # doctest: +SKIP
>>> resumed = Trainer(...)                                         # doctest: +SKIP
>>> load_checkpoint("ckpt/run", resumed); resumed.run_loop(10)    # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os

import numpy as np

from deep500lite.errors import CheckpointError, UserError, UserTypeError  # CheckpointError is re-exported here
from deep500lite.lv2.events import TrainingEvent
from deep500lite.utils import atomic_write_bytes, atomic_write_text

__all__ = ["save_checkpoint", "load_checkpoint", "CheckpointEvent", "CheckpointError"]

_FORMAT = "deep500lite-checkpoint"
_VERSION = 1
_SKIP = {"executor", "network", "gradient_modifier", "loss"}


def _paths(path) -> tuple[str, str]:
    path = os.fspath(path)
    for ext in (".json", ".npz"):
        if path.endswith(ext):
            path = path[: -len(ext)]
    return path + ".json", path + ".npz"


# ------------------------------------------------------------------------------ encoding
class _Encoder:
    """Turns nested state into JSON plus a dict of arrays (``{"__array__": key}`` references)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.arrays: dict[str, np.ndarray] = {}

    def _array(self, value: np.ndarray, **tags) -> dict:
        key = f"{self.prefix}/{len(self.arrays)}"
        self.arrays[key] = np.asarray(value)
        return {"__array__": key, **tags}

    def __call__(self, value, where="state"):
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
            return int(value)
        if isinstance(value, (float, np.floating)):
            value = float(value)
            return value if math.isfinite(value) else {"__float__": repr(value)}
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, np.ndarray):
            return self._array(value)
        if isinstance(value, tuple):
            return {"__tuple__": [self(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [self(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value):
                return {k: self(v, f"{where}.{k}") for k, v in value.items()}
            return {"__items__": [[self(k, where), self(v, f"{where}[{k!r}]")] for k, v in value.items()]}
        raise UserTypeError(f"Cannot checkpoint {where}: a {type(value).__name__}. Checkpoints hold numbers, "
                            "strings, numpy arrays, tensors and lists/dicts of them; give the object get_state() "
                            f"and set_state(state) methods to save it another way. Received: {type(value).__name__}")


def _decode(value, arrays):
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if "__array__" in value:
        return np.array(arrays[value["__array__"]])
    if "__float__" in value:
        return float(value["__float__"])
    if "__tuple__" in value:
        return tuple(_decode(v, arrays) for v in value["__tuple__"])
    if "__items__" in value:
        return {_decode(k, arrays): _decode(v, arrays) for k, v in value["__items__"]}
    return {k: _decode(v, arrays) for k, v in value.items()}


# ------------------------------------------------------------------------------ optimizer
def _public_attributes(opt) -> dict:
    return {k: v for k, v in vars(opt).items() if k not in _SKIP and not k.startswith("_") and not callable(v)}


def _state_hook(obj):
    """The checkpoint module of the framework that defines ``obj``'s class (its spec's ``state_hook``), or None."""
    from deep500lite.registry import spec_of

    spec = spec_of(obj)
    return None if spec is None else spec.state()


def _optimizer_state(opt) -> dict:
    if callable(getattr(opt, "get_state", None)):
        return {"kind": "get_state", "state": opt.get_state()}
    attrs = _public_attributes(opt)
    hook = _state_hook(opt)
    native = hook.optimizer_state(opt) if hook is not None else None
    if native is not None:
        for name in native.pop("skip", ()):
            attrs.pop(name, None)
        return {"kind": "framework", "attrs": attrs, "framework": native}
    return {"kind": "attributes", "attrs": attrs}


def _restore_optimizer(opt, state: dict, where: str) -> None:
    kind = state["kind"]
    if kind == "get_state":
        if not callable(getattr(opt, "set_state", None)):
            raise CheckpointError(f"{where}: the optimizer state was saved with get_state(), but "
                                  f"{type(opt).__name__} has no set_state(state); load it into an optimizer that "
                                  f"has one. Received: {type(opt).__name__}")
        opt.set_state(state["state"])
        return
    for k, v in state["attrs"].items():
        setattr(opt, k, v)
    if kind == "framework":
        hook = _state_hook(opt)
        if hook is None:
            raise CheckpointError(f"{where}: the optimizer state was saved by a framework's native optimizer; "
                                  f"{type(opt).__name__} is not one. Load it into the optimizer class it was saved "
                                  f"from. Received: {type(opt).__name__}")
        try:
            hook.restore_optimizer_state(opt, state["framework"])
        except CheckpointError as exc:
            raise CheckpointError(f"{where}: {exc}") from None


# ------------------------------------------------------------------------ samplers, executor
def _sampler_state(sampler) -> dict | None:
    if sampler is None:
        return None
    if callable(getattr(sampler, "get_state", None)):
        return {"get_state": sampler.get_state()}
    gens = {}
    if isinstance(getattr(sampler, "random", None), np.random.Generator):
        gens["sampler"] = sampler.random.bit_generator.state
    for i, t in enumerate(getattr(sampler, "transformations", None) or []):
        if isinstance(getattr(t, "random", None), np.random.Generator):
            gens[f"transformation{i}"] = t.random.bit_generator.state
    return {"class": type(sampler).__name__, "generators": gens}


def _restore_sampler(sampler, state, where: str) -> None:
    if state is None or sampler is None:
        return
    if "get_state" in state:
        sampler.set_state(state["get_state"])
        return
    if state["class"] != type(sampler).__name__:
        raise CheckpointError(f"{where}: the checkpoint's sampler is a {state['class']}; this trainer's is a "
                              f"{type(sampler).__name__}. A checkpoint loads into samplers of the saved classes. "
                              f"Received: {type(sampler).__name__}")
    transforms = getattr(sampler, "transformations", None) or []
    for key, gen_state in state["generators"].items():
        obj = sampler if key == "sampler" else transforms[int(key[len("transformation"):])]
        obj.random.bit_generator.state = gen_state


def _executor_rng(executor):
    if callable(getattr(executor, "get_rng_state", None)):
        return {"get_rng_state": executor.get_rng_state()}
    hook = _state_hook(executor)
    state = hook.rng_state(executor) if hook is not None else None
    return None if state is None else {"framework": state}


def _restore_executor_rng(executor, state) -> None:
    if state is None:
        return
    if "get_rng_state" in state:
        executor.set_rng_state(state["get_rng_state"])
    elif "framework" in state:
        _state_hook(executor).restore_rng_state(executor, state["framework"])


# ------------------------------------------------------------------------------ save / load
def save_checkpoint(path, trainer) -> tuple[str, str]:
    """Save ``trainer`` (network parameters, optimizer, samplers, position, statistics) at ``path``.

    Call it between epochs (:class:`CheckpointEvent` does, after every complete epoch): the
    samplers' position inside an epoch is not saved.

    Args:
        path: the checkpoint's name; ``.json`` and ``.npz`` are added (a given extension is dropped).
        trainer: the :class:`~deep500lite.lv2.trainer.Trainer`.

    Returns:
        ``(json_path, npz_path)``.
    """
    json_path, npz_path = _paths(path)
    network = trainer.executor.network
    names = list(network.parameters)
    values = network.fetch_tensors(names)
    enc = _Encoder("state")
    stats = trainer.stats
    meta = {
        "format": _FORMAT, "version": _VERSION,
        "epoch": stats.epoch, "global_step": stats.global_step,
        "framework": getattr(trainer.executor, "framework", ""),
        "parameters": {n: {"dtype": np.asarray(v).dtype.name, "shape": list(np.shape(v))} for n, v in zip(names, values)},
        "optimizer": {"class": type(trainer.optimizer).__name__,
                      "state": enc(_optimizer_state(trainer.optimizer), "optimizer")},
        "samplers": {"train": enc(_sampler_state(trainer.train_sampler), "train_sampler"),
                     "validation": enc(_sampler_state(trainer.validation_sampler), "validation_sampler")},
        "executor_rng": enc(_executor_rng(trainer.executor), "executor_rng"),
        "stats": enc({"epochs": stats.epochs, "steps": stats.steps, "hyperparameters": stats.hyperparameters,
                      "elapsed": stats.epochs[-1]["elapsed"] if stats.epochs else stats.time_offset}, "stats"),
    }
    arrays = {f"param/{i}": np.asarray(v) for i, v in enumerate(values)}
    arrays.update(enc.arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    data = buf.getvalue()
    meta["npz"] = os.path.basename(npz_path)
    meta["npz_sha256"] = hashlib.sha256(data).hexdigest()
    atomic_write_bytes(npz_path, data)
    atomic_write_text(json_path, json.dumps(meta, indent=1, allow_nan=False) + "\n")
    return json_path, npz_path


def load_checkpoint(path, trainer) -> dict:
    """Restore a checkpoint written by :func:`save_checkpoint` into ``trainer``.

    The trainer must have been built like the saved one: a network with the same parameters,
    an optimizer of the same class, samplers of the same classes. Afterwards
    ``trainer.run_loop(epochs)`` continues with the epoch after the saved one.

    Returns:
        The checkpoint's metadata (``epoch``, ``global_step``, ``framework``...).

    Raises:
        CheckpointError: a file is missing or corrupt, the two files come from different saves,
            or the checkpoint does not fit the trainer (the message names the difference).
    """
    json_path, npz_path = _paths(path)
    for p in (json_path, npz_path):
        if not os.path.exists(p):
            raise CheckpointError(f"Checkpoint file {p} does not exist; a checkpoint is NAME.json plus NAME.npz "
                                  f"written by save_checkpoint(NAME, trainer). Received: {os.fspath(path)!r}")
    try:
        with open(json_path, encoding="utf-8") as f:
            meta = json.load(f)
    except OSError as exc:
        raise CheckpointError(f"Checkpoint file {json_path} cannot be read ({exc.strerror or exc}); a checkpoint "
                              f"is a readable NAME.json plus NAME.npz. Received: {os.fspath(path)!r}") from exc
    except ValueError as exc:
        raise CheckpointError(f"Checkpoint {json_path} is not valid JSON: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise CheckpointError(f"{json_path} is not a deep500lite checkpoint (no \"format\": \"{_FORMAT}\").")
    if meta.get("version") != _VERSION:
        raise CheckpointError(f"{json_path} has checkpoint format version {meta.get('version')}; this deep500lite "
                              f"reads version {_VERSION}. Received: version {meta.get('version')!r}")
    try:
        with open(npz_path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise CheckpointError(f"Checkpoint file {npz_path} cannot be read ({exc.strerror or exc}); a checkpoint "
                              f"is NAME.json plus a readable NAME.npz. Received: {os.fspath(path)!r}") from exc
    if hashlib.sha256(data).hexdigest() != meta.get("npz_sha256"):
        raise CheckpointError(f"{npz_path} does not match {json_path} (SHA-256 differs): the file is corrupt or "
                              "from another save.")
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}

    network = trainer.executor.network
    saved = meta["parameters"]
    have = {n: v for n, v in zip(network.parameters, network.fetch_tensors(network.parameters))}
    problems = [f"'{n}' missing from the network" for n in saved if n not in have]
    problems += [f"'{n}' not in the checkpoint" for n in have if n not in saved]
    for n, d in saved.items():
        if n in have and (list(have[n].shape) != d["shape"] or have[n].dtype.name != d["dtype"]):
            problems.append(f"'{n}' is {have[n].dtype.name}{list(have[n].shape)} here and "
                            f"{d['dtype']}{d['shape']} in the checkpoint")
    if problems:
        raise CheckpointError(f"Checkpoint {json_path} does not fit this network: " + "; ".join(problems[:10]))
    opt_class = meta["optimizer"]["class"]
    if opt_class != type(trainer.optimizer).__name__:
        raise CheckpointError(f"Checkpoint {json_path} holds the state of a {opt_class}; this trainer's optimizer "
                              f"is a {type(trainer.optimizer).__name__}. Load it into a trainer whose optimizer is a "
                              f"{opt_class}. Received: {type(trainer.optimizer).__name__}")

    for i, name in enumerate(saved):
        network.feed_tensor(name, arrays[f"param/{i}"])
    _restore_optimizer(trainer.optimizer, _decode(meta["optimizer"]["state"], arrays), json_path)
    samplers = meta["samplers"]
    _restore_sampler(trainer.train_sampler, _decode(samplers["train"], arrays), json_path)
    _restore_sampler(trainer.validation_sampler, _decode(samplers["validation"], arrays), json_path)
    _restore_executor_rng(trainer.executor, _decode(meta["executor_rng"], arrays))
    saved_stats = _decode(meta["stats"], arrays)
    stats = trainer.stats
    stats.epochs, stats.steps = saved_stats["epochs"], saved_stats["steps"]
    stats.hyperparameters = saved_stats["hyperparameters"]
    stats.epoch, stats.global_step = meta["epoch"], meta["global_step"]
    stats.time_offset, stats.start_time, stats.end_time = saved_stats["elapsed"], None, None
    stats.stopped_by = stats.nonfinite = None
    return {k: meta[k] for k in ("epoch", "global_step", "framework")}


class CheckpointEvent(TrainingEvent):
    """Save a checkpoint after every ``every``-th complete epoch.

    Args:
        path: the checkpoint name (see :func:`save_checkpoint`); ``{epoch}`` in it is replaced
            by the number of epochs done, to keep one checkpoint per epoch.
        every: save after epochs ``every - 1``, ``2 * every - 1``, ... (counted from 0).

    Attributes:
        saved: the ``.json`` paths written, in order.
    """

    def __init__(self, path, every: int = 1):
        if not isinstance(every, int) or every < 1:
            raise UserError(f"every must be an integer >= 1. Received: {every!r}")
        self.path, self.every = os.fspath(path), every
        self.saved: list[str] = []

    def after_epoch(self, trainer, stats, epoch):
        rec = stats.epochs[-1]
        if not rec.get("complete", True) or stats.nonfinite or (epoch + 1) % self.every:
            return
        json_path, _ = save_checkpoint(self.path.replace("{epoch}", str(stats.epoch)), trainer)
        self.saved.append(json_path)
