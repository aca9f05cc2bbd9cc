"""Resolving a recipe: FIXED, MUTABLE and the overrides merged; component names looked up.

:func:`resolve_recipe` checks a recipe's keys, values and metrics and merges ``FIXED``,
``MUTABLE`` and the ``--set`` overrides into a :class:`ResolvedRecipe`; nothing is built yet.
The ``_*_class`` functions resolve the name a recipe gives for a sampler, an optimizer, a
distributed optimizer or a training event (or an import path ``module.Class``) to the class.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import Sequence

from deep500lite.errors import UserError, format_choices
from deep500lite.recipe.keys import COMPONENT_KEYS, REQUIRED_KEYS, _check_value, _describe, _normalize_keys
from deep500lite.recipe.verdicts import _acceptable

__all__ = ["ResolvedRecipe", "resolve_recipe"]

# The communicator names (components.COMMUNICATORS, which imports this module, repeats them).
_COMMUNICATOR_NAMES = ("mpi", "torch")

def _set_dotted(target: dict, key: str, value, allowed_base: set, fixed: dict, recipe: str) -> None:
    base, _, sub = key.partition(".")
    base_norm = _normalize_keys({base: None}, "--set")
    base = next(iter(base_norm))
    if base in fixed:
        raise UserError(f"Cannot set '{key}': '{base}' is a FIXED key of {recipe}; only mutable keys can be set: "
                        f"{format_choices(sorted(allowed_base))}. Received: {key!r}")
    if base not in allowed_base:
        raise UserError(f"Cannot set '{key}': '{base}' is not a MUTABLE key of {recipe}; only mutable keys can be set: "
                        f"{format_choices(sorted(allowed_base))}. Received: {key!r}")
    if not sub:
        target[base] = value
        return
    if not sub.isidentifier():
        raise UserError(f"Cannot set '{key}': after the dot comes one keyword name (such as "
                        f"optimizer_kwargs.learning_rate=0.1). Received: {sub!r}")
    if not base.endswith("_kwargs"):
        raise UserError(f"Cannot set '{key}': a dotted key sets one entry of a *_kwargs dict (such as "
                        f"optimizer_kwargs.learning_rate=0.1); '{base}' is not one. Received: {key!r}")
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
            from deep500lite.registry import split_executor_spelling

            return split_executor_spelling(ex)[0]
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
                        f"not both. Remove it from one of them. Received: {format_choices(both)} in both")
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
                        f"{format_choices(REQUIRED_KEYS)}. Received: the keys "
                        f"{format_choices(k for k in config if config[k] is not None)}")
    for key, value in config.items():
        _check_value(key, value)
    comm = config.get("communicator")
    if isinstance(comm, str) and comm not in _COMMUNICATOR_NAMES:
        raise UserError(f"Unknown communicator {comm!r}. Allowed values are {format_choices(_COMMUNICATOR_NAMES)}, or "
                        f"a callable returning a CommunicationNetwork. Received: {comm!r}")
    if isinstance(metrics, (str, bytes)) or not isinstance(metrics, (list, tuple)):
        raise UserError(f"METRICS must be a list of (metric, threshold). Received: {type(metrics).__name__}")
    acceptable = [_acceptable(item, i) for i, item in enumerate(metrics)]
    return ResolvedRecipe(config, list(fixed_n), list(mutable_now), changed, acceptable, path, name, sha256)


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
                        f"class, or an import path 'module.Class'. Received: {value!r}")
    return found


def _reference_optimizers():
    """The numpy reference optimizers (``deep500lite.frameworks.reference.optimizers``), through the registry."""
    from deep500lite.registry import import_framework

    return importlib.import_module(f"{import_framework('reference').__name__}.optimizers")


def _optimizer_class(value, framework: str):
    if not isinstance(value, str):
        return value
    from deep500lite.registry import FRAMEWORK_ALIASES, FRAMEWORKS, canonical_framework, import_framework

    ref = _reference_optimizers()
    prefix, dot, name = value.rpartition(".")
    if not dot:
        if value in ref.__all__:
            return getattr(ref, value)
        raise UserError(f"Unknown optimizer {value!r}. Known optimizers (numpy reference, every executor): "
                        f"{format_choices(ref.__all__)}; 'native.NAME' or 'torch.NAME' (or 'tensorflow.NAME') "
                        f"for a framework's own; or an import path 'module.Class'. Received: {value!r}")
    if prefix in ("native", *FRAMEWORKS, *FRAMEWORK_ALIASES):
        fw = framework if prefix == "native" else canonical_framework(prefix)
        if fw == "custom":
            raise UserError(f"Optimizer {value!r}: 'native' needs an executor named by its framework; name the "
                            "framework instead of 'native'. Received: a custom executor")
        module = import_framework(fw)
        native = getattr(module, "optimizers", None) if not FRAMEWORKS[fw].baseline else ref
        if native is None:
            try:
                native = importlib.import_module(f"{module.__name__}.optimizers")
            except ImportError:
                native = None
        names = list(getattr(native, "__all__", [])) if native is not None else []
        if name not in names:
            raise UserError(f"Framework '{fw}' has no native optimizer {name!r}. Its optimizers: "
                            f"{format_choices(names) or 'none'}; the reference ones work on every executor: "
                            f"{format_choices(ref.__all__)}. Received: {value!r}")
        return getattr(native, name)
    found = _import_path(value, "optimizer")
    if found is None:
        raise UserError(f"Unknown optimizer {value!r}: not a reference optimizer ({format_choices(ref.__all__)}), "
                        "not 'native.NAME' or '<framework>.NAME', and not an importable 'module.Class'. "
                        f"Received: {value!r}")
    return found


def _distributed_names() -> dict:
    import deep500lite.lv3 as lv3

    out = {}
    for name in lv3.__all__:
        obj = vars(lv3).get(name)  # not getattr: a name lv3 takes from a framework (torch) would import it
        if inspect.isclass(obj) and issubclass(obj, lv3.DistributedOptimizer) and obj is not lv3.DistributedOptimizer:
            out[name] = obj
    out["CompressedDecentralized"] = lv3.compression.CompressedDecentralized
    return out


def _distributed_class(value):
    if not isinstance(value, str):
        return value
    known = _distributed_names()
    if value == "data":  # the data-parallel scheme (deep500lite.recipe.parallelism.SCHEMES)
        value = "ConsistentDecentralized"
    if value in known:
        return known[value]
    found = _import_path(value, "distributed") if "." in value or ":" in value else None
    if found is None:
        raise UserError(f"Unknown distributed optimizer {value!r}. Known ones: {format_choices(known)}; the parallel "
                        "schemes 'data', 'spatial', 'pipeline', 'tensor', 'hybrid'; or a class, or an import path "
                        f"'module.Class'. Received: {value!r}")
    return found


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
        raise UserError(f"Unknown event {value!r}. Known events: {format_choices(known)}, or an import path. "
                        f"Received: {value!r}")
    return found
