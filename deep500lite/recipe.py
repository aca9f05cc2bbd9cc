"""Recipes: Deep500's fixed components + mutable components + acceptable metrics.

A recipe is three objects, usually the module-level names of a Python file::

    import deep500lite as d5
    from deep500lite.frameworks import reference as d5ref

    FIXED = {'dataset': 'digits', 'model': 'lenet', 'train_sampler': d5.ShuffleSampler,
             'train_sampler_kwargs': dict(seed=3), 'epochs': 8}
    MUTABLE = {'batch_size': 64, 'executor': 'torch', 'optimizer': d5ref.MomentumOptimizer,
               'optimizer_kwargs': dict(learning_rate=0.05, momentum=0.9)}
    METRICS = [(d5.TestAccuracy(), 90)]

    if __name__ == '__main__':
        d5.run_recipe(FIXED, MUTABLE, METRICS) or exit(1)

:func:`run_recipe` builds every component, trains, and returns whether every acceptable metric
holds. ``deep500lite run RECIPE.py`` does the same from the command line (reading the three
names without running the file's ``__main__`` block), and may change mutable keys only.

Keys (the same in ``FIXED`` and ``MUTABLE``; a key appears in at most one of them):

==========================  ====================================================================
``dataset``                 a name (:func:`deep500lite.datasets.list_datasets`) or a callable
                            ``f(input_node, label_node, *args, **kwargs) -> (train, test)``
``model``                   a zoo name (:func:`deep500lite.networks.list_models`), an ``.onnx``
                            path, or a callable returning a Network or ``(network, input, output)``
``executor``                a framework name (``reference``, ``torch``, ``tensorflow``,
                            ``onnxruntime``) or a callable ``f(network, *args, **kwargs)``
                            such as ``deep500lite.frameworks.torch.from_model``
``train_sampler``           a sampler class or its name (default ``ShuffleSampler``)
``validation_sampler``      a sampler class or its name (default ``OrderedSampler`` keeping the
                            last partial batch)
``optimizer``               an optimizer class or its name: ``'MomentumOptimizer'`` is the numpy
                            reference one (works on every executor), ``'native.MomentumOptimizer'``
                            the executor's own framework's, ``'torch.MomentumOptimizer'`` torch's
``events``                  training events: a list of event objects or classes, or one class,
                            name or callable (with ``events_args``/``events_kwargs``)
``distributed``             a distributed optimizer wrapping ``optimizer`` (Level 3): its name
                            (``'ConsistentDecentralized'``, ...) or class; makes the run
                            data-parallel over MPI ranks (``deep500lite run RECIPE -n N``)
``communicator``            ``'mpi'`` (default) or ``'torch'`` (torch.distributed), or a callable
                            returning a :class:`~deep500lite.lv3.communication.CommunicationNetwork`
``epochs``, ``batch_size``  integers
``<key>_args``              positional arguments of the component (a list or tuple)
``<key>_kwargs``            keyword arguments of the component (a dict)
==========================  ====================================================================

Deep500's singular spellings ``<key>_arg`` and ``<key>_kwarg`` are read as ``<key>_args`` and
``<key>_kwargs``. ``dataset``, ``model``, ``executor``, ``optimizer``, ``epochs`` and
``batch_size`` are required.

How components are called (the recipe's arguments first, then what deep500lite fills in for
parameters the recipe leaves out and the callable declares)::

    train, test = load_dataset(name, "input", "label", *dataset_args, **dataset_kwargs)
    network, input, output = create_model(name, batch_size, *model_args, classes=, shape=, seed=, **model_kwargs)
    network.add_operation(dataset_loss(name)([output, "label"], "loss"))   # unless it has a "loss" output
    executor = d5.executor(network, framework, *executor_args, seed=, **executor_kwargs)
    train_sampler = cls(train, batch_size, *train_sampler_args, seed=, **train_sampler_kwargs)
    validation_sampler = cls(test, batch_size, *validation_sampler_args, **validation_sampler_kwargs)
    optimizer = cls(executor, *optimizer_args, **optimizer_kwargs)
    optimizer = distributed(optimizer, communicator, *distributed_args, **distributed_kwargs)  # if set

With ``distributed``, ``batch_size`` is per rank (the global batch is ``batch_size`` times the
ranks), the training sampler defaults to
:class:`~deep500lite.lv3.sampler.PartitionedDistributedSampler` and gets ``comm=`` when it takes
one, every rank evaluates the whole validation set with its own replica, and a run on ``P > 1``
ranks writes its results to ``OUT/rank<r>/`` (``deep500lite run -n`` aggregates them).

Acceptable metrics: ``(metric, threshold)`` holds when the measured value is at least the
threshold for a metric where higher is better (``metric.higher_is_better``: accuracy,
throughput) and at most the threshold where lower is better (time, memory);
``(metric, threshold, 'higher')`` or ``'lower'`` states the direction explicitly. Accuracy
metrics (:class:`~deep500lite.metrics.training.TestAccuracy`,
:class:`~deep500lite.metrics.training.TrainingAccuracy`) measure percent, so Deep500's
``(d5.TestAccuracy(), 90)`` means 90%; a threshold from 0 to 1 for them is read as a fraction
(``0.9`` is 90%). ``(metric, None)`` or a bare metric is measured and recorded, not judged.

Seeds: one run seed (``seed=``, default 0) seeds every component whose seed the recipe does not
set: the model's weights, the executor's dropout generator, the training sampler (the
validation sampler gets ``seed + 1``), and the global ``random``/``numpy.random`` generators
(and torch's and TensorFlow's when they are imported). Seeds the recipe sets are kept; every
seed used is recorded in the results. The recipe's dicts, lists and objects are never modified:
each run works on deep copies of the arguments (so seeded transforms start afresh in every run).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import math
import os
import random
import sys
import time
from typing import Any, Sequence

import numpy as np

from deep500lite.errors import UserError, format_choices

__all__ = ["run_recipe", "train_recipe", "resolve_recipe", "load_recipe", "parse_set", "check_determinism",
           "first_step_divergence", "Recipe", "ResolvedRecipe", "AcceptableMetric", "Verdict", "RecipeRun",
           "DeterminismReport", "EpochLines", "metric_name", "RECIPE_KEYS", "COMPONENT_KEYS", "REQUIRED_KEYS"]

#: Keys whose value names or builds a component (each also takes ``<key>_args`` and ``<key>_kwargs``).
COMPONENT_KEYS = ("dataset", "model", "executor", "train_sampler", "validation_sampler", "optimizer", "events",
                  "distributed", "communicator")
#: Every key a recipe may set.
RECIPE_KEYS = ("epochs", "batch_size") + COMPONENT_KEYS + tuple(
    f"{c}_{s}" for c in COMPONENT_KEYS for s in ("args", "kwargs"))
#: Keys a recipe must set (in FIXED or MUTABLE).
REQUIRED_KEYS = ("dataset", "model", "executor", "optimizer", "epochs", "batch_size")

_DIRECTIONS = {"higher": "higher", "lower": "lower", ">=": "higher", "<=": "lower", "at least": "higher",
               "at most": "lower", "max": "higher", "min": "lower"}
_INPUT, _LABEL, _LOSS = "input", "label", "loss"


# =============================================================================== recipe files
@dataclasses.dataclass(frozen=True)
class Recipe:
    """A recipe as read from a file (or given as objects).

    Attributes:
        fixed: the ``FIXED`` dict (as written; never modified).
        mutable: the ``MUTABLE`` dict.
        metrics: the ``METRICS`` list.
        path: the file it came from, or None.
        name: the file's name without ``.py`` (``"recipe"`` without a file).
        sha256: the SHA-256 of the file's bytes, or None.
    """

    fixed: dict
    mutable: dict
    metrics: list
    path: str | None = None
    name: str = "recipe"
    sha256: str | None = None

    def resolve(self, overrides: dict | None = None) -> "ResolvedRecipe":
        """:func:`resolve_recipe` of this recipe with ``overrides`` of mutable keys."""
        return resolve_recipe(self.fixed, self.mutable, self.metrics, overrides=overrides, path=self.path,
                              name=self.name, sha256=self.sha256)


def _bundled_recipes() -> dict[str, str]:
    import deep500lite.recipes as pkg

    folder = os.path.dirname(pkg.__file__)
    return {f[:-3]: os.path.join(folder, f) for f in sorted(os.listdir(folder))
            if f.endswith(".py") and not f.startswith("_")}


def load_recipe(path_or_name) -> Recipe:
    """Read ``FIXED``, ``MUTABLE`` and ``METRICS`` from a recipe file without running its ``__main__`` block.

    The file is imported as a module under a name other than ``"__main__"`` (so an
    ``if __name__ == '__main__':`` block does not run), with its folder on ``sys.path`` while it
    loads (so it can import files next to it).

    Args:
        path_or_name: a ``.py`` file, or the name of a bundled recipe (``deep500lite list recipes``),
            such as ``"digits_lenet"``.

    Raises:
        UserError: the file does not exist, cannot be imported (the error and line are named), or
            lacks one of the three names, or one has the wrong type.
    """
    text = os.fspath(path_or_name)
    path = text
    if not os.path.exists(path):
        bundled = _bundled_recipes()
        if text in bundled:
            path = bundled[text]
        else:
            raise UserError(f"Recipe file '{text}' does not exist. Give a recipe file (.py) or a bundled recipe: "
                            f"{format_choices(bundled) or 'none'}.")
    if os.path.isdir(path):
        raise UserError(f"Recipe '{path}' is a folder; give a recipe file (.py).")
    path = os.path.abspath(path)
    with open(path, "rb") as f:
        data = f.read()
    stem = os.path.splitext(os.path.basename(path))[0]
    module_name = f"deep500lite_recipe_{stem}_{hashlib.sha256(path.encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"Recipe '{path}' cannot be imported as a Python module; a recipe is a .py file.")
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    # Registered like any import, so code that looks a class's module up (dataclasses, pickle) finds it.
    sys.modules[module_name] = module
    try:
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
    except SyntaxError as exc:
        raise UserError(f"Recipe '{path}' has a syntax error at line {exc.lineno}: {exc.msg}") from exc
    except UserError as exc:
        raise UserError(f"Recipe '{path}' failed while loading: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - any error in the user's file is the user's to fix
        line = _user_line(exc, path)
        raise UserError(f"Recipe '{path}' failed while loading{line}: {type(exc).__name__}: {exc}") from exc
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    missing = [n for n in ("FIXED", "MUTABLE", "METRICS") if not hasattr(module, n)]
    if missing:
        raise UserError(f"Recipe '{path}' does not define {', '.join(missing)}. A recipe file defines FIXED (dict of "
                        "fixed components), MUTABLE (dict of mutable components) and METRICS (list of "
                        "(metric, threshold)).")
    for name, kind in (("FIXED", dict), ("MUTABLE", dict), ("METRICS", (list, tuple))):
        if not isinstance(getattr(module, name), kind):
            raise UserError(f"Recipe '{path}': {name} must be a {'dict' if kind is dict else 'list'}. "
                            f"Received: {type(getattr(module, name)).__name__}")
    return Recipe(module.FIXED, module.MUTABLE, list(module.METRICS), path, stem, hashlib.sha256(data).hexdigest())


def _user_line(exc: BaseException, path: str) -> str:
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (line {line})" if line else ""


def parse_set(text: str) -> tuple[str, Any]:
    """Parse one ``--set key=value``: the value as a Python literal, else as a string.

    ``key`` may be dotted to set one entry of a dict: ``optimizer_kwargs.learning_rate=0.1``.

    >>> parse_set("batch_size=32"), parse_set("executor=torch"), parse_set("epochs=[1, 2]")
    (('batch_size', 32), ('executor', 'torch'), ('epochs', [1, 2]))

    Raises:
        UserError: no ``=`` or an empty key.
    """
    import ast

    if "=" not in text:
        raise UserError(f"--set takes key=value (such as batch_size=32). Received: {text!r}")
    key, value = text.split("=", 1)
    key = key.strip()
    if not key:
        raise UserError(f"--set needs a key before '='. Received: {text!r}")
    try:
        parsed = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        parsed = value.strip()
    return key, parsed


# ============================================================================ acceptable metrics
def _percent_metric(metric) -> bool:
    from deep500lite.metrics.training import TestAccuracy, TrainingAccuracy

    return isinstance(metric, (TestAccuracy, TrainingAccuracy))


_UNITS = {"TestAccuracy": "%", "TrainingAccuracy": "%", "TimeToAccuracy": "s", "Throughput": "samples/s",
          "PeakMemory": "bytes", "WallclockTime": "s"}


def metric_name(metric) -> str:
    """The metric's display name (``repr`` for parametrized ones such as ``TimeToAccuracy(90)``)."""
    r = repr(metric)
    return r[:-2] if r.endswith("()") else r


@dataclasses.dataclass
class AcceptableMetric:
    """One entry of ``METRICS``, checked and normalized.

    Attributes:
        metric: the metric object as given (each run measures with a deep copy).
        threshold: the threshold as written (None: measured, not judged).
        direction: ``"higher"`` (the value must be at least ``required``) or ``"lower"`` (at most).
        required: the threshold in the metric's unit (a fraction given for an accuracy becomes percent).
        explicit_direction: whether the recipe stated the direction.
    """

    metric: Any
    threshold: float | None
    direction: str
    required: float | None
    explicit_direction: bool = False

    @property
    def name(self) -> str:
        """The metric's display name."""
        return metric_name(self.metric)

    @property
    def unit(self) -> str:
        """The metric's unit (``%``, ``s``, ...) or ``""``."""
        return _UNITS.get(type(self.metric).__name__, "")

    def describe(self) -> dict:
        """A JSON-ready description."""
        return {"metric": self.name, "class": _qualified(type(self.metric)), "threshold": self.threshold,
                "required": self.required, "direction": self.direction, "unit": self.unit,
                "explicit_direction": self.explicit_direction}


def _acceptable(item, index: int) -> AcceptableMetric:
    from deep500lite.metrics.base import TestMetric

    where = f"METRICS[{index}]"
    if isinstance(item, (tuple, list)):
        if not 1 <= len(item) <= 3:
            raise UserError(f"{where} must be (metric, threshold) or (metric, threshold, 'higher'|'lower'). "
                            f"Received {len(item)} items: {item!r}")
        metric, threshold, direction = (list(item) + [None, None])[:3]
    else:
        metric, threshold, direction = item, None, None
    if isinstance(metric, type) and issubclass(metric, TestMetric):
        try:
            metric = metric()
        except TypeError as exc:
            raise UserError(f"{where}: {metric.__name__} needs arguments; write {metric.__name__}(...). ({exc})") from exc
    if not isinstance(metric, TestMetric):
        raise UserError(f"{where}: the metric must be a d5.TestMetric such as d5.TestAccuracy(). "
                        f"Received: {type(metric).__name__} {metric!r}")
    if type(metric).__name__ == "StepTimeBreakdown" and threshold is not None:
        raise UserError(f"{where}: StepTimeBreakdown measures several parts, so it takes no threshold; give it as "
                        "(StepTimeBreakdown(), None), or judge the whole step with Throughput.")
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)) \
                or not math.isfinite(float(threshold)):
            raise UserError(f"{where}: the threshold must be a finite number (or None to only measure). "
                            f"Received: {threshold!r}")
        threshold = float(threshold) if isinstance(threshold, (np.floating, float)) else int(threshold)
    if direction is None:
        direction_name, explicit = ("higher" if getattr(metric, "higher_is_better", True) else "lower"), False
    else:
        key = str(direction).strip().lower()
        if key not in _DIRECTIONS:
            raise UserError(f"{where}: the direction must be 'higher' or 'lower'. Received: {direction!r}")
        direction_name, explicit = _DIRECTIONS[key], True
    required = None if threshold is None else float(threshold)
    if required is not None and _percent_metric(metric):
        if not 0 <= required <= 100:
            raise UserError(f"{where}: {metric_name(metric)} is a percentage, so its threshold must be from 0 to 100 "
                            f"(or a fraction from 0 to 1). Received: {threshold!r}")
        if required <= 1:
            required *= 100.0
    return AcceptableMetric(metric, threshold, direction_name, required, explicit)


@dataclasses.dataclass
class Verdict:
    """Whether one acceptable metric held.

    Attributes:
        metric: the metric's name.
        measured: the measured value (None when it was not measured or not finite).
        required: the threshold in the metric's unit (None: not judged).
        direction: ``"higher"`` or ``"lower"``.
        passed: True, False, or None for a metric that is only measured.
        unit: the metric's unit.
        note: why it failed when the value is missing, or ``""``.
    """

    metric: str
    measured: float | None
    required: float | None
    direction: str
    passed: bool | None
    unit: str = ""
    note: str = ""

    def line(self) -> str:
        """One line for the terminal: measured, required, direction and the verdict."""
        value = _format_value(self.measured, self.unit) if self.measured is not None else (self.note or "not measured")
        if self.required is None:
            return f"{self.metric}: {value} (measured only)"
        sign = ">=" if self.direction == "higher" else "<="
        better = "higher is better" if self.direction == "higher" else "lower is better"
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{self.metric}: measured {value}, required {sign} {_format_value(self.required, self.unit)} "
                f"({better}): {verdict}")

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return dataclasses.asdict(self)


def _format_value(value, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "%":
        return f"{value:.2f}%"
    if unit == "s":
        from deep500lite.metrics.tables import format_seconds

        return format_seconds(value)
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB" if abs(value) >= 2**20 else f"{value:.0f} bytes"
    if unit:
        return f"{value:.4g} {unit}"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _judge(acceptable: AcceptableMetric, value) -> Verdict:
    note = ""
    number = None
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        number = float(value)
        if not math.isfinite(number):
            note = "never reached" if number == math.inf else f"{number}"
            number = None
    elif value is None:
        note = "not measured"
    elif isinstance(value, dict):
        from deep500lite.metrics.tables import format_seconds

        note = ", ".join(f"{k} {format_seconds(v) if isinstance(v, float) and math.isfinite(v) else 'n/a'}"
                         for k, v in value.items())
    else:
        note = f"not a number ({type(value).__name__})"
    if acceptable.required is None:
        return Verdict(acceptable.name, number, None, acceptable.direction, None, acceptable.unit, note)
    if number is None:
        passed = False
    elif acceptable.direction == "higher":
        passed = number >= acceptable.required
    else:
        passed = number <= acceptable.required
    return Verdict(acceptable.name, number, acceptable.required, acceptable.direction, passed, acceptable.unit, note)


# =============================================================================== resolution
def _normalize_keys(d: dict, where: str) -> dict:
    if not isinstance(d, dict):
        raise TypeError(f"{where} must be a dict of recipe keys. Received: {type(d).__name__}")
    out: dict = {}
    origin: dict = {}
    for key, value in d.items():
        if not isinstance(key, str):
            raise UserError(f"{where} keys must be strings. Received the key {key!r}")
        name = key
        for singular, plural in (("_kwarg", "_kwargs"), ("_arg", "_args")):
            if key.endswith(singular) and key[: -len(singular)] in COMPONENT_KEYS:
                name = key[: -len(singular)] + plural
        if name not in RECIPE_KEYS:
            close = difflib.get_close_matches(name, RECIPE_KEYS, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise UserError(f"{where} has the unknown key '{key}'.{hint} Recipe keys: {format_choices(RECIPE_KEYS)}.")
        if name in out:
            raise UserError(f"{where} sets '{name}' twice: as '{origin[name]}' and as '{key}'.")
        out[name], origin[name] = value, key
    return out


def _check_value(key: str, value) -> None:
    if key == "epochs":
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise UserError(f"'epochs' must be an integer >= 0. Received: {value!r}")
    elif key == "batch_size":
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise UserError(f"'batch_size' must be an integer >= 1. Received: {value!r}")
    elif key.endswith("_args"):
        if not isinstance(value, (list, tuple)):
            raise UserError(f"'{key}' must be a list or tuple of positional arguments. Received: "
                            f"{type(value).__name__} {value!r}")
    elif key.endswith("_kwargs"):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise UserError(f"'{key}' must be a dict of keyword arguments (string keys). Received: {value!r}")
    elif key == "events":
        if value is not None and not (isinstance(value, (list, tuple, str)) or callable(value)):
            raise UserError(f"'events' must be a list of training events, or an event class, name or callable. "
                            f"Received: {type(value).__name__}")
    elif key in COMPONENT_KEYS:
        if not (isinstance(value, str) or callable(value)) and value is not None:
            raise UserError(f"'{key}' must be a name (string) or a callable that builds it. Received: "
                            f"{type(value).__name__} {value!r}")


def _set_dotted(target: dict, key: str, value, allowed_base: set, fixed: dict, recipe: str) -> None:
    base, _, sub = key.partition(".")
    base_norm = _normalize_keys({base: None}, "--set")
    base = next(iter(base_norm))
    if base in fixed:
        raise UserError(f"Cannot set '{key}': '{base}' is a FIXED key of {recipe}; only mutable keys can be set: "
                        f"{format_choices(sorted(allowed_base))}.")
    if base not in allowed_base:
        raise UserError(f"Cannot set '{key}': '{base}' is not a MUTABLE key of {recipe}; only mutable keys can be set: "
                        f"{format_choices(sorted(allowed_base))}.")
    if not sub:
        target[base] = value
        return
    if not base.endswith("_kwargs"):
        raise UserError(f"Cannot set '{key}': a dotted key sets one entry of a *_kwargs dict (such as "
                        f"optimizer_kwargs.learning_rate=0.1); '{base}' is not one.")
    current = target.get(base) or {}
    if not isinstance(current, dict):
        raise UserError(f"Cannot set '{key}': '{base}' is not a dict in the recipe. Received: {current!r}")
    updated = dict(current)
    updated[sub] = value
    target[base] = updated


@dataclasses.dataclass
class ResolvedRecipe:
    """A checked recipe: the merged configuration and the acceptable metrics.

    Attributes:
        config: ``{**fixed, **mutable}`` after the overrides (keys normalized; values as given).
        fixed_keys: the keys that came from ``FIXED``.
        mutable_keys: the keys that came from ``MUTABLE``.
        overrides: the mutable keys changed (``--set``).
        metrics: the :class:`AcceptableMetric` list.
        path, name, sha256: where the recipe came from (see :class:`Recipe`).
    """

    config: dict
    fixed_keys: list
    mutable_keys: list
    overrides: dict
    metrics: list
    path: str | None = None
    name: str = "recipe"
    sha256: str | None = None

    @property
    def framework(self) -> str:
        """The executor's framework key (``custom`` for a callable executor without a known framework)."""
        ex = self.config["executor"]
        if isinstance(ex, str):
            from deep500lite.registry import canonical_framework

            return canonical_framework(ex)
        module = getattr(ex, "__module__", "") or ""
        parts = module.split(".")
        if len(parts) > 2 and parts[0] == "deep500lite" and parts[1] == "frameworks":
            return parts[2]
        return "custom"

    def with_config(self, **changes) -> "ResolvedRecipe":
        """A copy with some configuration values replaced (for internal variants such as the reference build)."""
        cfg = dict(self.config)
        cfg.update(changes)
        return dataclasses.replace(self, config=cfg)

    def accuracy_target(self) -> float | None:
        """The required test accuracy (percent) of the first judged TestAccuracy metric, else
        the target of the first TimeToAccuracy metric, else None."""
        from deep500lite.metrics.training import TestAccuracy, TimeToAccuracy

        for a in self.metrics:
            if isinstance(a.metric, TestAccuracy) and a.required is not None and a.direction == "higher":
                return a.required
        for a in self.metrics:
            if isinstance(a.metric, TimeToAccuracy) and a.metric.key == "test_accuracy":
                return a.metric.target
        return None

    def describe(self) -> dict:
        """The resolved recipe as JSON-ready data (callables as qualified names)."""
        return {"name": self.name, "file": self.path, "sha256": self.sha256,
                "config": {k: _describe(v) for k, v in self.config.items()},
                "fixed_keys": list(self.fixed_keys), "mutable_keys": list(self.mutable_keys),
                "overrides": {k: _describe(v) for k, v in self.overrides.items()},
                "metrics": [m.describe() for m in self.metrics]}


def resolve_recipe(fixed: dict, mutable: dict, metrics: Sequence, overrides: dict | None = None,
                   path: str | None = None, name: str = "recipe", sha256: str | None = None) -> ResolvedRecipe:
    """Check a recipe and merge it; nothing is built yet and nothing given is modified.

    Args:
        fixed: the fixed components.
        mutable: the mutable components.
        metrics: the acceptable metrics.
        overrides: new values for mutable keys (``--set``); a dotted key
            (``optimizer_kwargs.learning_rate``) sets one entry of a ``*_kwargs`` dict.
        path, name, sha256: where the recipe came from, for the results.

    Raises:
        UserError: a key in both FIXED and MUTABLE, an unknown key, a missing required key, a
            bad value, an override of a fixed or unknown key, or a malformed metric.
    """
    fixed_n = _normalize_keys(fixed, "FIXED")
    mutable_n = _normalize_keys(mutable, "MUTABLE")
    both = [k for k in fixed_n if k in mutable_n]
    if both:
        raise UserError(f"The key '{both[0]}' is in both FIXED and MUTABLE; a recipe key is fixed or mutable, "
                        "not both. Remove it from one of them.")
    recipe = f"recipe '{name}'"
    mutable_now = dict(mutable_n)
    allowed = set(mutable_n) | {f"{k}_{s}" for k in mutable_n if k in COMPONENT_KEYS for s in ("args", "kwargs")}
    allowed -= set(fixed_n)
    changed = {}
    for key, value in (overrides or {}).items():
        _set_dotted(mutable_now, key, value, allowed, fixed_n, recipe)
        base = next(iter(_normalize_keys({key.partition(".")[0]: None}, "--set")))
        changed[base] = mutable_now[base]
    config = {**fixed_n, **mutable_now}
    missing = [k for k in REQUIRED_KEYS if k not in config or config[k] is None]
    if missing:
        raise UserError(f"The recipe does not set {format_choices(missing)} (in FIXED or MUTABLE). Required keys: "
                        f"{format_choices(REQUIRED_KEYS)}.")
    for key, value in config.items():
        _check_value(key, value)
    if isinstance(metrics, (str, bytes)) or not isinstance(metrics, (list, tuple)):
        raise UserError(f"METRICS must be a list of (metric, threshold). Received: {type(metrics).__name__}")
    acceptable = [_acceptable(item, i) for i, item in enumerate(metrics)]
    return ResolvedRecipe(config, list(fixed_n), list(mutable_now), changed, acceptable, path, name, sha256)


# =============================================================================== building
def _qualified(obj) -> str:
    module = getattr(obj, "__module__", None)
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qual is None:
        return type(obj).__qualname__
    return f"{module}.{qual}" if module and module != "builtins" else qual


def _describe(value):
    """JSON-ready description of a recipe value (callables by qualified name, objects by class and repr)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else str(v)
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, np.ndarray):
        return {"array": list(value.shape), "dtype": str(value.dtype)}
    if inspect.isclass(value) or inspect.isfunction(value) or inspect.ismethod(value) or inspect.isbuiltin(value):
        return _qualified(value)
    if inspect.ismodule(value):
        return value.__name__
    if callable(value) and hasattr(value, "__qualname__"):
        return _qualified(value)
    return {"object": _qualified(type(value)), "repr": repr(value)[:500]}


def _fresh(value):
    """A deep copy (so a run never changes the recipe's objects), or the value itself if it cannot be copied."""
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - e.g. an object holding an open stream is used as given
        return value


def _import_path(text: str, what: str):
    module, sep, attr = text.partition(":")
    if not sep:
        module, _, attr = text.rpartition(".")
    if not module or not attr:
        return None
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    return getattr(mod, attr, None)


def _signature(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _call_filling(fn, args: Sequence, kwargs: dict, fill: dict, what: str):
    """Call ``fn(*args, **kwargs)``, adding each ``fill`` entry the call does not set and ``fn`` declares.

    Returns the result and the filled entries actually passed.
    """
    sig = _signature(fn)
    kwargs = dict(kwargs)
    used = {}
    if sig is not None:
        try:
            bound = sig.bind_partial(*args, **kwargs)
        except TypeError as exc:
            raise UserError(f"{what}: the arguments do not fit {_qualified(fn)}{sig}: {exc}") from exc
        for name, value in fill.items():
            param = sig.parameters.get(name)
            if param is not None and name not in bound.arguments and param.kind in (
                    param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                kwargs[name] = value
                used[name] = value
    try:
        return fn(*args, **kwargs), used
    except TypeError as exc:
        if sig is not None:
            try:
                sig.bind(*args, **kwargs)
            except TypeError as bind_exc:
                raise UserError(f"{what}: the arguments do not fit {_qualified(fn)}{sig}: {bind_exc}") from exc
        raise


def _sampler_class(value, key: str):
    from deep500lite.lv2 import sampler as sampler_module
    from deep500lite.lv3 import sampler as distributed_samplers

    if not isinstance(value, str):
        return value
    names = [n for n in sampler_module.__all__ if n != "Sampler"]
    if value in names:
        return getattr(sampler_module, value)
    if value in distributed_samplers.__all__:
        return getattr(distributed_samplers, value)
    names += list(distributed_samplers.__all__)
    found = _import_path(value, key) if "." in value or ":" in value else None
    if found is None:
        raise UserError(f"Unknown sampler {value!r} for '{key}'. Known samplers: {format_choices(names)}, or a "
                        "class, or an import path 'module.Class'.")
    return found


def _optimizer_class(value, framework: str):
    if not isinstance(value, str):
        return value
    from deep500lite.frameworks.reference import optimizers as ref
    from deep500lite.registry import FRAMEWORKS, canonical_framework, import_framework

    prefix, dot, name = value.rpartition(".")
    if not dot:
        if value in ref.__all__:
            return getattr(ref, value)
        raise UserError(f"Unknown optimizer {value!r}. Known optimizers (numpy reference, every executor): "
                        f"{format_choices(ref.__all__)}; 'native.NAME' or 'torch.NAME' (or 'tensorflow.NAME') "
                        "for a framework's own; or an import path 'module.Class'.")
    if prefix in ("native", *FRAMEWORKS, "pytorch", "tf", "ort", "numpy"):
        fw = framework if prefix == "native" else canonical_framework(prefix)
        if fw == "custom":
            raise UserError(f"Optimizer {value!r}: 'native' needs an executor named by its framework. "
                            "Received a custom executor; name the framework instead of 'native'.")
        module = import_framework(fw)
        native = getattr(module, "optimizers", None) if fw != "reference" else ref
        if native is None:
            try:
                native = importlib.import_module(f"{module.__name__}.optimizers")
            except ImportError:
                native = None
        names = list(getattr(native, "__all__", [])) if native is not None else []
        if name not in names:
            raise UserError(f"Framework '{fw}' has no native optimizer {name!r}. Its optimizers: "
                            f"{format_choices(names) or 'none'}; the reference ones work on every executor: "
                            f"{format_choices(ref.__all__)}.")
        return getattr(native, name)
    found = _import_path(value, "optimizer")
    if found is None:
        raise UserError(f"Unknown optimizer {value!r}: not a reference optimizer ({format_choices(ref.__all__)}), "
                        "not 'native.NAME' or '<framework>.NAME', and not an importable 'module.Class'.")
    return found


def _distributed_names() -> dict:
    from deep500lite import lv3

    out = {}
    for name in lv3.__all__:
        obj = getattr(lv3, name)
        if inspect.isclass(obj) and issubclass(obj, lv3.DistributedOptimizer) and obj is not lv3.DistributedOptimizer:
            out[name] = obj
    out["CompressedDecentralized"] = lv3.compression.CompressedDecentralized
    return out


def _distributed_class(value):
    if not isinstance(value, str):
        return value
    known = _distributed_names()
    if value in known:
        return known[value]
    found = _import_path(value, "distributed") if "." in value or ":" in value else None
    if found is None:
        raise UserError(f"Unknown distributed optimizer {value!r}. Known ones: {format_choices(known)}, or a class, "
                        "or an import path 'module.Class'.")
    return found


COMMUNICATORS = ("mpi", "torch")


def _build_communicator(cfg: dict):
    from deep500lite.lv3.communication import CommunicationNetwork

    spec = cfg.get("communicator") or "mpi"
    args, kwargs = _args_of(cfg, "communicator")
    if isinstance(spec, str):
        if spec == "mpi":
            from deep500lite.lv3.mpi import MPICommunicator as spec
        elif spec == "torch":
            from deep500lite.lv3.torch_dist import TorchDistributedCommunicator as spec
        else:
            raise UserError(f"Unknown communicator {spec!r}. Allowed values are {format_choices(COMMUNICATORS)}, or a "
                            "callable returning a CommunicationNetwork.")
    comm = spec(*args, **kwargs)
    if not isinstance(comm, CommunicationNetwork):
        raise UserError(f"'communicator' built a {type(comm).__name__}, which is not a d5.distributed."
                        "CommunicationNetwork.")
    return comm


def _event_class(value):
    if not isinstance(value, str):
        return value
    from deep500lite.lv2 import events as ev
    from deep500lite.metrics import training as tm

    modules = [ev, tm]
    try:
        from deep500lite.lv2 import checkpoint as ck

        modules.append(ck)
    except ImportError:  # pragma: no cover - checkpointing is optional here
        pass
    for mod in modules:
        if value in getattr(mod, "__all__", ()) and inspect.isclass(getattr(mod, value)):
            return getattr(mod, value)
    found = _import_path(value, "events") if "." in value or ":" in value else None
    if found is None:
        known = [n for m in modules for n in getattr(m, "__all__", ()) if inspect.isclass(getattr(m, n))]
        raise UserError(f"Unknown event {value!r}. Known events: {format_choices(known)}, or an import path.")
    return found


def _seed_globals(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)
    if "tensorflow" in sys.modules:
        try:
            sys.modules["tensorflow"].random.set_seed(seed)
        except AttributeError:  # a partially imported tensorflow
            pass


@dataclasses.dataclass
class _Components:
    train_set: Any
    test_set: Any
    classes: int | None
    shape: tuple | None
    network: Any
    input_node: str
    output_node: str
    executor: Any = None
    train_sampler: Any = None
    validation_sampler: Any = None
    optimizer: Any = None
    events: list = dataclasses.field(default_factory=list)
    seeds: dict = dataclasses.field(default_factory=dict)
    info: dict = dataclasses.field(default_factory=dict)
    communicator: Any = None


def _args_of(cfg: dict, key: str) -> tuple[list, dict]:
    return list(_fresh(list(cfg.get(f"{key}_args") or []))), dict(_fresh(dict(cfg.get(f"{key}_kwargs") or {})))


def _build_data(cfg: dict) -> tuple:
    from deep500lite import datasets

    spec = cfg["dataset"]
    args, kwargs = _args_of(cfg, "dataset")
    if isinstance(spec, str):
        shape_opts = {k: v for k, v in kwargs.items()}
        train, test = datasets.load_dataset(spec, _INPUT, _LABEL, *args, **kwargs)
        root = args[0] if args else shape_opts.pop("root", None)
        shape_opts.pop("root", None)
        info = datasets.dataset_shape(spec, root, **shape_opts)
        classes, shape = int(info[0]), tuple(int(s) for s in info[1:])
        return train, test, classes, shape, datasets.dataset_loss(spec)
    result, _ = _call_filling(spec, [_INPUT, _LABEL, *args], kwargs, {}, "dataset")
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise UserError(f"The dataset callable {_qualified(spec)} must return (train, test) datasets. "
                        f"Received: {type(result).__name__}")
    train, test = result
    if train is None or not hasattr(train, "__getitem__") or not hasattr(train, "__len__"):
        raise UserError(f"The dataset callable {_qualified(spec)} returned a training set that is not a d5.Dataset: "
                        f"{type(train).__name__}")
    input_node = getattr(train, "input_node", _INPUT)
    first = train[np.arange(1)]
    shape = tuple(np.asarray(first[input_node]).shape[1:])
    classes = getattr(train, "classes", None)
    if classes is None and getattr(train, "labels", None) is not None:
        classes = int(np.max(np.asarray(train.labels))) + 1
    return train, test, classes, shape, datasets.SoftmaxCrossEntropy()


def _build_network(cfg: dict, classes, shape, seed: int, loss, label_node: str, seeds: dict):
    from deep500lite import networks
    from deep500lite.lv1.network import Network, load_model

    spec = cfg["model"]
    args, kwargs = _args_of(cfg, "model")
    batch_size = int(cfg["batch_size"])
    if isinstance(spec, str) and spec.endswith(".onnx"):
        net = load_model(spec)
        input_node, output_node = net.inputs[0], net.outputs[0]
    elif isinstance(spec, str):
        fill = {"classes": classes, "shape": shape, "seed": seed}
        fill = {k: v for k, v in fill.items() if v is not None}
        merged = {**fill, **kwargs}
        seeds["model"] = merged.get("seed", 0)
        net, input_node, output_node = networks.create_model(spec, batch_size, *args, **merged)
    else:
        fill = {k: v for k, v in {"batch_size": batch_size, "classes": classes, "shape": shape,
                                  "seed": seed}.items() if v is not None}
        result, used = _call_filling(spec, args, kwargs, fill, "model")
        if "seed" in used:
            seeds["model"] = used["seed"]
        elif "seed" in kwargs:
            seeds["model"] = kwargs["seed"]
        if isinstance(result, Network):
            net = result
            input_node = net.inputs[0]
            output_node = net.outputs[0]
        elif isinstance(result, (tuple, list)) and len(result) == 3 and isinstance(result[0], Network):
            net, input_node, output_node = result
        else:
            raise UserError(f"The model callable {_qualified(spec)} must return a d5.Network or (network, input_node, "
                            f"output_node). Received: {type(result).__name__}")
    if _LOSS not in net.outputs:
        net.add_operation(loss([output_node, label_node], _LOSS))
    return net, input_node, output_node


def _build_executor(cfg: dict, network, seed: int, seeds: dict):
    from deep500lite.registry import executor as make_executor

    spec = cfg["executor"]
    args, kwargs = _args_of(cfg, "executor")
    if isinstance(spec, str):
        if len(args) > 1:
            raise UserError(f"'executor_args' for a framework name takes at most the device. Received: {args!r}")
        kwargs.setdefault("seed", seed)
        seeds["executor"] = kwargs["seed"]
        return make_executor(network, spec, *args, **kwargs)
    ex, used = _call_filling(spec, [network, *args], kwargs, {"seed": seed}, "executor")
    if "seed" in used or "seed" in kwargs:
        seeds["executor"] = used.get("seed", kwargs.get("seed"))
    if not hasattr(ex, "inference_and_backprop"):
        raise UserError(f"The executor callable {_qualified(spec)} must return a d5.GraphExecutor. "
                        f"Received: {type(ex).__name__}")
    return ex


def _transform_seeds(sampler) -> list:
    return [getattr(t, "seed", None) for t in getattr(sampler, "transformations", [])]


def _build_sampler(cfg: dict, key: str, dataset, seed: int, seeds: dict, default, fill: dict | None = None):
    spec = cfg.get(key) or default
    cls = _sampler_class(spec, key)
    args, kwargs = _args_of(cfg, key)
    if key == "validation_sampler" and cfg.get(key) is None:
        kwargs.setdefault("drop_last_batch", False)
    if not callable(cls):
        raise UserError(f"'{key}' must be a sampler class or name. Received: {cls!r}")
    fill = {"seed": seed, **(fill or {})}
    sampler, used = _call_filling(cls, [dataset, int(cfg["batch_size"]), *args], kwargs, fill, key)
    actual = getattr(sampler, "seed", used.get("seed", kwargs.get("seed")))
    seeds[key] = actual
    ts = _transform_seeds(sampler)
    if ts:
        seeds[f"{key}_transformations"] = ts
    return sampler


def _build_events(cfg: dict) -> list:
    spec = cfg.get("events")
    args, kwargs = _args_of(cfg, "events")
    if spec is None:
        if args or kwargs:
            raise UserError("'events_args'/'events_kwargs' are given but 'events' is not.")
        return []
    if isinstance(spec, (list, tuple)):
        if args or kwargs:
            raise UserError("'events_args'/'events_kwargs' apply when 'events' is one class, name or callable, not a "
                            "list; construct each event in the list instead.")
        out = []
        for i, item in enumerate(spec):
            item = _event_class(item)
            if inspect.isclass(item):
                try:
                    item = item()
                except TypeError as exc:
                    raise UserError(f"events[{i}]: {item.__name__} needs arguments; construct it in the list "
                                    f"({exc}).") from exc
            out.append(_fresh(item))
        return out
    item = _event_class(spec)
    if not callable(item):
        raise UserError(f"'events' must be events or a callable that builds them. Received: {item!r}")
    built = item(*args, **kwargs)
    return list(built) if isinstance(built, (list, tuple)) else [built]


def _build(resolved: ResolvedRecipe, seed: int, with_optimizer: bool = True) -> _Components:
    cfg = resolved.config
    seeds: dict = {"run": seed}
    _seed_globals(seed)
    train, test, classes, shape, loss = _build_data(cfg)
    label_node = getattr(train, "label_node", None) or _LABEL
    net, input_node, output_node = _build_network(cfg, classes, shape, seed, loss, label_node, seeds)
    for ds in (train, test):
        if ds is not None and getattr(ds, "input_node", input_node) != input_node:
            ds.input_node = input_node  # the network's data input has another name than the dataset's default
    parts = _Components(train, test, classes, shape, net, input_node, output_node, seeds=seeds)
    from deep500lite.lv2.sampler import OrderedSampler, ShuffleSampler

    parts.executor = _build_executor(cfg, net, seed, seeds)
    distributed = cfg.get("distributed") is not None
    default_sampler = ShuffleSampler
    if distributed:
        from deep500lite.lv3.sampler import PartitionedDistributedSampler as default_sampler

        if with_optimizer:
            parts.communicator = _build_communicator(cfg)
    # Without a communicator (a first-step comparison builds no optimizer), samplers act as rank 0 of 1.
    fill = {} if not distributed else (
        {"comm": parts.communicator} if parts.communicator is not None else {"rank": 0, "size": 1})
    parts.train_sampler = _build_sampler(cfg, "train_sampler", train, seed, seeds, default_sampler, fill)
    if test is not None and not ("validation_sampler" in cfg and cfg["validation_sampler"] is None):
        parts.validation_sampler = _build_sampler(cfg, "validation_sampler", test, seed + 1, seeds, OrderedSampler)
    if with_optimizer:
        spec = _optimizer_class(cfg["optimizer"], resolved.framework)
        args, kwargs = _args_of(cfg, "optimizer")
        if not callable(spec):
            raise UserError(f"'optimizer' must be an optimizer class or name. Received: {spec!r}")
        opt, _ = _call_filling(spec, [parts.executor, *args], kwargs, {}, "optimizer")
        if not hasattr(opt, "step"):
            raise UserError(f"'optimizer' built a {type(opt).__name__}, which has no step(); it must be a d5.Optimizer.")
        if distributed:
            wrapper = _distributed_class(cfg["distributed"])
            args, kwargs = _args_of(cfg, "distributed")
            if not callable(wrapper):
                raise UserError(f"'distributed' must be a distributed optimizer class or name. Received: {wrapper!r}")
            opt, _ = _call_filling(wrapper, [opt, parts.communicator, *args], kwargs, {}, "distributed")
        parts.optimizer = opt
    parts.events = _build_events(cfg)
    parts.info = {"train_samples": len(train), "test_samples": len(test) if test is not None else 0,
                  "classes": classes, "sample_shape": list(shape) if shape else None,
                  "input_node": input_node, "output_node": output_node,
                  "parameters": int(sum(np.asarray(v).size for k, v in net.host_values().items()
                                        if k in set(net.parameters))),
                  "executor": _qualified(type(parts.executor)),
                  "framework": getattr(parts.executor, "framework", resolved.framework),
                  "device": str(getattr(parts.executor, "devname", "cpu")),
                  "train_sampler": _qualified(type(parts.train_sampler)),
                  "validation_sampler": _qualified(type(parts.validation_sampler)) if parts.validation_sampler else None,
                  "optimizer": _qualified(type(parts.optimizer)) if parts.optimizer is not None else None,
                  "steps_per_epoch": len(parts.train_sampler)}
    if parts.communicator is not None:
        parts.info.update({"distributed": _qualified(type(parts.optimizer)),
                           "communicator": _qualified(type(parts.communicator)),
                           "rank": parts.communicator.rank, "ranks": parts.communicator.size,
                           "global_batch_size": int(cfg["batch_size"]) * parts.communicator.size})
    return parts


# ================================================================================ progress
class EpochLines:
    """A training event printing one line per epoch (for logs and pipes, where a bar would not redraw).

    Args:
        stream: where to write (default ``sys.stdout`` at the time of writing).
        prefix: text before every line.
    """

    def __init__(self, stream=None, prefix: str = ""):
        self._stream, self.prefix = stream, prefix

    def _write(self, text: str) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        stream.write(self.prefix + text + "\n")
        stream.flush()

    def before_training(self, trainer, stats):
        self._write(f"training: {trainer.total_epochs} epochs x {trainer.steps_per_epoch} steps")

    def after_epoch(self, trainer, stats, epoch):
        rec = stats.epochs[-1]
        parts = [f"epoch {epoch + 1}/{trainer.total_epochs}", f"loss {rec['train_loss']:.4g}"]
        if rec.get("train_accuracy") is not None:
            parts.append(f"train acc {rec['train_accuracy']:.2f}%")
        if rec.get("test_accuracy") is not None:
            parts.append(f"test acc {rec['test_accuracy']:.2f}%")
        parts.append(f"{rec['elapsed']:.1f} s")
        self._write("  ".join(parts))

    def after_training(self, trainer, stats):
        if stats.stopped_by:
            self._write(f"training stopped: {stats.stopped_by}")


def _progress_events(progress: str | None) -> list:
    if progress in (None, "none"):
        return []
    if progress == "lines":
        return [EpochLines()]
    from deep500lite.lv2.events import TerminalBarEvent

    if progress == "bar":
        return [TerminalBarEvent(enabled=True)]
    if progress == "auto":
        return [TerminalBarEvent()] if sys.stderr.isatty() else [EpochLines(stream=sys.stderr)]
    raise UserError(f"progress must be one of 'auto', 'bar', 'lines', 'none'. Received: {progress!r}")


# ================================================================================== training
@dataclasses.dataclass
class RecipeRun:
    """What :func:`train_recipe` produced.

    Attributes:
        passed: every judged acceptable metric held (and training ended without error).
        verdicts: one :class:`Verdict` per acceptable metric, in order.
        values: the measured value of each acceptable metric, in order.
        stats: the :class:`~deep500lite.lv2.trainer.TrainingStats`.
        results: the results-file dict (:mod:`deep500lite.results`).
        error: the message of an error that stopped training (a non-finite loss), or None.
        results_path: where the results file was written, or None.
    """

    passed: bool
    verdicts: list
    values: list
    stats: Any
    results: dict
    error: str | None = None
    results_path: str | None = None

    def lines(self) -> list[str]:
        """One line per acceptable metric (measured, required, direction, verdict)."""
        out = [v.line() for v in self.verdicts]
        if self.error:
            out.append(f"training stopped: {self.error}")
        return out


class _DistributedSteps:
    """Adds the distributed optimizer's figures of each step to its record in ``stats.steps``:
    ``communication_time`` and ``compute_time`` (= ``step_time`` - ``communication_time``),
    seconds, and ``bytes_sent`` by this rank."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def after_training_batch(self, trainer, stats, batch, outputs):
        rec = stats.steps[-1]
        comm = float(getattr(self.optimizer, "communication_seconds", math.nan))
        rec["communication_time"] = comm
        rec["compute_time"] = rec["step_time"] - comm
        rec["bytes_sent"] = int(getattr(self.optimizer, "bytes_per_step", 0))


def _distributed_section(parts) -> dict:
    comm, opt = parts.communicator, parts.optimizer
    bound = getattr(opt, "staleness", None)  # StaleSynchronous's bound (a list of values elsewhere)
    return {"rank": comm.rank, "ranks": comm.size, "optimizer": _qualified(type(opt)),
            "communicator": _qualified(type(comm)), "bytes_sent": comm.bytes_sent,
            "bytes_received": comm.bytes_received, "communication_seconds": comm.seconds,
            "operations": {k: dict(v) for k, v in comm.stats.items()},
            # Asynchronous optimizers: every served / applied gradient's staleness, and the bound if any.
            "staleness": _staleness(opt),
            "staleness_bound": bound if isinstance(bound, int) else None}


def _staleness(opt) -> list | None:
    for name in ("observed_staleness", "staleness"):
        value = getattr(opt, name, None)
        if isinstance(value, (list, tuple)):
            return list(value)
    return None


class _ParameterDigest:
    """Records a SHA-256 of all parameters after every step (for the determinism check)."""

    def __init__(self):
        self.digests: list[str] = []

    def after_training_batch(self, trainer, stats, batch, outputs):
        net = trainer.executor.network
        h = hashlib.sha256()
        for value in net.fetch_tensors(net.parameters):
            h.update(np.ascontiguousarray(value).tobytes())
        self.digests.append(h.hexdigest())


def train_recipe(recipe, seed: int | None = None, *, events: Sequence = (), progress: str | None = None,
                 out: str | os.PathLike | None = None, mllog: str | os.PathLike | None = None,
                 divergence: bool = False, environment: bool = True, _digest: _ParameterDigest | None = None
                 ) -> RecipeRun:
    """Build every component of a recipe, train, measure and judge.

    Args:
        recipe: a :class:`ResolvedRecipe` (or a :class:`Recipe`, resolved without overrides).
        seed: the run seed (default 0; see the module documentation).
        events: more training events.
        progress: ``"auto"`` (a bar on a terminal, else a line per epoch on stderr), ``"bar"``,
            ``"lines"`` (stdout), or None/``"none"``.
        out: a folder for ``results.json`` (and ``epochs.csv``, ``steps.csv``); None writes nothing.
        mllog: a file for MLPerf-style ``:::MLLOG`` lines, or None.
        divergence: also measure the first step's largest output and gradient differences from
            the reference executor (:func:`first_step_divergence`; recorded in the results).
        environment: record the environment (:func:`deep500lite.environment.collect_environment`).

    Returns:
        A :class:`RecipeRun`.

    Raises:
        UserError: a component cannot be built (unknown name, missing dataset file, bad argument).
    """
    from deep500lite import results as res
    from deep500lite.lv2.trainer import NonFiniteLossError, test_training
    from deep500lite.metrics.training import (PeakMemory, StepTimeBreakdown, TestAccuracy, Throughput,
                                              TimeToAccuracy, TrainingAccuracy)

    if isinstance(recipe, Recipe):
        recipe = recipe.resolve()
    seed = 0 if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UserError(f"seed must be an integer >= 0. Received: {seed!r}")
    seed = int(seed)
    started = time.time()
    div = None
    if divergence:
        try:
            div = first_step_divergence(recipe, seed)
        except Exception as exc:  # noqa: BLE001 - the run itself may still work; the error is recorded
            div = {"reference": "reference", "error": f"{type(exc).__name__}: {exc}", "outputs": None,
                   "gradients": None}
    parts = _build(recipe, seed)
    comm = parts.communicator
    if comm is not None and comm.size > 1:
        if comm.rank != 0:
            progress = None  # one progress display per job
        if out is not None:
            out = os.path.join(os.fspath(out), f"rank{comm.rank}")
    judged = [_fresh(a.metric) for a in recipe.metrics]
    target = recipe.accuracy_target()
    internal = {"test_accuracy": TestAccuracy(), "train_accuracy": TrainingAccuracy(), "throughput": Throughput(),
                "breakdown": StepTimeBreakdown(warmup=1), "memory": PeakMemory()}
    if target is not None:
        internal["time_to_accuracy"] = TimeToAccuracy(target)
    run_events = list(parts.events) + _progress_events(progress) + list(events)
    writer = None
    if mllog is not None:
        writer = res.MLLogEvent(mllog, recipe, parts, seed)
        run_events.insert(0, writer)
    if _digest is not None:
        run_events.append(_digest)
    if comm is not None:
        run_events.insert(0, _DistributedSteps(parts.optimizer))
    if out is not None:
        from deep500lite.lv2.events import CSVSummaryWriter

        run_events.append(CSVSummaryWriter(out))
    metrics = judged + list(internal.values())
    error = None
    cfg = recipe.config
    try:
        values = test_training(parts.executor, parts.train_sampler, parts.validation_sampler, parts.optimizer,
                               int(cfg["epochs"]), int(cfg["batch_size"]), parts.output_node, metrics=metrics,
                               events=run_events)
        stats = values.stats
    except NonFiniteLossError as exc:
        error, stats = str(exc), exc.stats
        values = [m.measure(None, stats, None) for m in metrics]
    if comm is not None and hasattr(parts.optimizer, "finalize"):
        parts.optimizer.finalize()  # collective: asynchronous optimizers settle their messages
    user_values = list(values[:len(judged)])
    verdicts = [_judge(a, v) for a, v in zip(recipe.metrics, user_values)]
    passed = error is None and all(v.passed is not False for v in verdicts)
    finished = time.time()
    results = res.build_results(recipe, parts, stats, judged, user_values, verdicts, internal, passed, error,
                                seed, started, finished, divergence=div, environment=environment)
    if comm is not None:
        results["distributed"] = res.jsonable(_distributed_section(parts))
    if writer is not None:
        writer.run_stop(passed)
    path = None
    if out is not None:
        path = os.path.join(os.fspath(out), "results.json")
        res.write_results(path, results)
    return RecipeRun(passed, verdicts, user_values, stats, results, error, path)


def run_recipe(fixed: dict, mutable: dict, metrics: Sequence, *, seed: int | None = None,
               out: str | os.PathLike | None = None, events: Sequence = (), verbose: bool = True) -> bool:
    """Run a recipe (Deep500's ``run_recipe``): build, train, and check the acceptable metrics.

    Args:
        fixed: the fixed components (see the module documentation for the keys).
        mutable: the mutable components.
        metrics: the acceptable metrics: ``(metric, threshold)`` or ``(metric, threshold,
            'higher'|'lower')``.
        seed: the run seed (default 0).
        out: a folder to write ``results.json`` to (None: no file).
        events: more training events.
        verbose: print progress (a bar on a terminal) and one line per metric.

    Returns:
        True when every acceptable metric holds.

    Raises:
        UserError: a bad recipe (overlapping or unknown keys, bad values) or a component that
            cannot be built.

    >>> d5.run_recipe(FIXED, MUTABLE, METRICS) or exit(1)  # doctest: +SKIP
    """
    resolved = resolve_recipe(fixed, mutable, metrics)
    run = train_recipe(resolved, seed, events=events, progress="auto" if verbose else None, out=out)
    if verbose:
        for line in run.lines():
            print(line)
    return run.passed


# ============================================================================= determinism
@dataclasses.dataclass
class DeterminismReport:
    """The outcome of :func:`check_determinism`.

    Attributes:
        identical: both runs gave bit-identical losses and parameters at every step.
        steps: steps compared.
        first_divergence: ``None``, or a dict: ``global_step``, ``epoch``, ``step``, ``what``
            (``"loss"`` or ``"parameters"``), ``loss_a``, ``loss_b``.
        accuracy_a, accuracy_b: the test-accuracy curves (percent per epoch) of the two runs.
        runs: the two :class:`RecipeRun`.
    """

    identical: bool
    steps: int
    first_divergence: dict | None
    accuracy_a: list
    accuracy_b: list
    runs: list

    def describe(self) -> str:
        """A sentence for the terminal."""
        if self.identical:
            return (f"deterministic: {self.steps} steps with bit-identical losses and parameters in both runs; "
                    f"test accuracy per epoch {_fmt_curve(self.accuracy_a)}")
        d = self.first_divergence
        if d is None:
            return (f"NOT deterministic: the runs differ in length or accuracy ({_fmt_curve(self.accuracy_a)} vs "
                    f"{_fmt_curve(self.accuracy_b)})")
        return (f"NOT deterministic: the runs diverge first at global step {d['global_step']} (epoch {d['epoch']}, "
                f"step {d['step']}; counted from 0) in the {d['what']}: loss {d['loss_a']!r} vs {d['loss_b']!r}; "
                f"test accuracy per epoch {_fmt_curve(self.accuracy_a)} vs {_fmt_curve(self.accuracy_b)}")

    def to_dict(self) -> dict:
        """A JSON-ready dict (without the runs)."""
        return {"identical": self.identical, "steps": self.steps, "first_divergence": self.first_divergence,
                "accuracy_a": self.accuracy_a, "accuracy_b": self.accuracy_b}


def _fmt_curve(curve) -> str:
    return "[" + ", ".join("-" if v is None else f"{v:.2f}" for v in curve) + "]"


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    a, b = float(a), float(b)
    return a == b or (math.isnan(a) and math.isnan(b))


def check_determinism(recipe, seed: int | None = None, *, progress: str | None = None,
                      out: str | os.PathLike | None = None) -> DeterminismReport:
    """Run a recipe twice with the same seed and find the first step where the runs differ.

    Both runs happen in this process, one after the other, each with freshly built components.
    After every step the loss and a SHA-256 of all parameters are compared bit for bit.

    Args:
        recipe: a :class:`ResolvedRecipe` or :class:`Recipe`.
        seed: the run seed.
        progress: as for :func:`train_recipe`.
        out: a folder: the first run's results go to ``out/results.json`` with the report under
            ``"determinism"``; the second run's to ``out/second-run/results.json``.
    """
    from deep500lite import results as res

    if isinstance(recipe, Recipe):
        recipe = recipe.resolve()
    digests = [_ParameterDigest(), _ParameterDigest()]
    runs = []
    for i, digest in enumerate(digests):
        sub = None if out is None else (out if i == 0 else os.path.join(os.fspath(out), "second-run"))
        runs.append(train_recipe(recipe, seed, progress=progress, out=sub, _digest=digest,
                                 environment=i == 0))
    steps_a, steps_b = runs[0].stats.steps, runs[1].stats.steps
    first = None
    for i, (sa, sb) in enumerate(zip(steps_a, steps_b)):
        what = None
        if not _same(sa["loss"], sb["loss"]):
            what = "loss"
        elif digests[0].digests[i] != digests[1].digests[i]:
            what = "parameters"
        if what:
            first = {"global_step": sa["global_step"], "epoch": sa["epoch"], "step": sa["step"], "what": what,
                     "loss_a": sa["loss"], "loss_b": sb["loss"]}
            break
    acc_a = [e.get("test_accuracy") for e in runs[0].stats.epochs]
    acc_b = [e.get("test_accuracy") for e in runs[1].stats.epochs]
    identical = first is None and len(steps_a) == len(steps_b) and all(_same(a, b) for a, b in zip(acc_a, acc_b)) \
        and len(acc_a) == len(acc_b)
    report = DeterminismReport(identical, min(len(steps_a), len(steps_b)), first, acc_a, acc_b, runs)
    if out is not None:
        runs[0].results["determinism"] = report.to_dict()
        res.write_results(runs[0].results_path, runs[0].results)
    return report


# =============================================================================== divergence
def first_step_divergence(recipe, seed: int | None = None, reference: str = "reference") -> dict:
    """The largest difference of one training step's outputs and gradients from the reference executor.

    The recipe's network is built once (same seed, same weights) and copied; one copy runs on the
    recipe's executor, the other on ``reference``. Both take the first batch of the recipe's
    training sampler (freshly built, so training is not affected) and run
    ``inference_and_backprop(batch, "loss")`` once. No optimizer step is taken.

    Returns:
        ``{"reference": name, "outputs": max |a - b| over all outputs, "gradients": max over every
        parameter gradient, "outputs_relative", "gradients_relative" (divided by the largest
        reference magnitude), "worst_output", "worst_gradient", "per_output": {...}}``;
        for the reference executor itself, ``{"reference": name, "is_reference": True,
        "outputs": 0.0, "gradients": 0.0}``.
    """
    from deep500lite.registry import canonical_framework

    if isinstance(recipe, Recipe):
        recipe = recipe.resolve()
    seed = 0 if seed is None else int(seed)
    ref_key = canonical_framework(reference)
    if isinstance(recipe.config["executor"], str) and recipe.framework == ref_key:
        return {"reference": ref_key, "is_reference": True, "outputs": 0.0, "gradients": 0.0,
                "outputs_relative": 0.0, "gradients_relative": 0.0}
    parts = _build(recipe, seed, with_optimizer=False)
    batch = next(iter(parts.train_sampler))
    twin = parts.network  # attached to the recipe's executor
    ref_parts = _build(recipe.with_config(executor=ref_key, executor_args=[], executor_kwargs={}), seed,
                       with_optimizer=False)
    ref_net, ref_ex = ref_parts.network, ref_parts.executor
    out_a = parts.executor.inference_and_backprop(batch, _LOSS)
    out_b = ref_ex.inference_and_backprop(batch, _LOSS)
    per_output, worst_out, max_out, scale_out = {}, None, 0.0, 0.0
    for name in out_b:
        if name not in out_a:
            continue
        a = np.asarray(out_a[name], dtype=np.float64)
        b = np.asarray(out_b[name], dtype=np.float64)
        d = float(np.max(np.abs(a - b))) if a.size else 0.0
        per_output[name] = d
        scale_out = max(scale_out, float(np.max(np.abs(b))) if b.size else 0.0)
        if worst_out is None or d > max_out:
            worst_out, max_out = name, d
    pairs = twin.gradient(_LOSS)
    grads_a = twin.fetch_tensors([g for _, g in pairs])
    grads_b = ref_net.fetch_tensors([g for _, g in ref_net.gradient(_LOSS)])
    worst_grad, max_grad, scale_grad = None, 0.0, 0.0
    for (pname, _), ga, gb in zip(pairs, grads_a, grads_b):
        ga = np.asarray(ga, dtype=np.float64)
        gb = np.asarray(gb, dtype=np.float64)
        d = float(np.max(np.abs(ga - gb))) if ga.size else 0.0
        scale_grad = max(scale_grad, float(np.max(np.abs(gb))) if gb.size else 0.0)
        if worst_grad is None or d > max_grad:
            worst_grad, max_grad = pname, d
    return {"reference": ref_key, "is_reference": False, "outputs": max_out, "gradients": max_grad,
            "outputs_relative": max_out / scale_out if scale_out else max_out,
            "gradients_relative": max_grad / scale_grad if scale_grad else max_grad,
            "worst_output": worst_out, "worst_gradient": worst_grad, "per_output": per_output,
            "batch_samples": int(len(next(iter(batch.values())))), "gradients_compared": len(pairs)}
