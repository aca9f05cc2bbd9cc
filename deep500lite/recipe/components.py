"""Building a resolved recipe's components: dataset, network, executor, samplers, optimizer, events.

``_build`` seeds the global generators and builds every component of a
:class:`~deep500lite.recipe.resolution.ResolvedRecipe` from deep copies of its arguments (the
calls are listed in :mod:`deep500lite.recipe`), filling in ``classes``, ``shape`` and the seeds
where the callable declares them and the recipe left them open. With ``distributed`` it also
builds the communicator and wraps the optimizer in the distributed optimizer.
"""

from __future__ import annotations

import dataclasses
import inspect
import random
from typing import Any, Sequence

import numpy as np

from deep500lite.errors import Deep500Error, UserError, format_choices
from deep500lite.recipe.keys import _fresh, _qualified
from deep500lite.recipe.resolution import (_COMMUNICATOR_NAMES, ResolvedRecipe, _distributed_class, _event_class,
                                           _optimizer_class, _sampler_class)

__all__ = ["COMMUNICATORS"]

_INPUT, _LABEL, _LOSS = "input", "label", "loss"


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
            raise UserError(f"{what}: the arguments do not fit {_qualified(fn)}{sig}: {exc}. Received: "
                            f"{len(args)} positional, keywords {format_choices(kwargs) or 'none'}") from exc
        for name, value in fill.items():
            param = sig.parameters.get(name)
            if param is not None and name not in bound.arguments and param.kind in (
                    param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                kwargs[name] = value
                used[name] = value
    try:
        return fn(*args, **kwargs), used
    except Deep500Error:
        raise
    except TypeError as exc:
        if sig is not None:
            try:
                sig.bind(*args, **kwargs)
            except TypeError as bind_exc:
                raise UserError(f"{what}: the arguments do not fit {_qualified(fn)}{sig}: {bind_exc}. Received: "
                                f"{len(args)} positional, keywords {format_choices(kwargs) or 'none'}") from exc
        _reraise_user_code(fn, exc, what)
        raise
    except Exception as exc:  # noqa: BLE001 - only the recipe's own callables are blamed (below)
        _reraise_user_code(fn, exc, what)
        raise


def _reraise_user_code(fn, exc: Exception, what: str) -> None:
    """An error raised inside a callable the recipe itself defines is the recipe's to fix: say so in one line.

    Errors inside deep500lite's own components are left alone (they are deep500lite's bugs).
    """
    module = getattr(fn, "__module__", None) or getattr(type(fn), "__module__", "") or ""
    if module == "deep500lite" or module.startswith("deep500lite."):
        return
    text = " ".join(str(exc).split())[:300] or "(no message)"
    raise UserError(f"{what}: the recipe's callable {_qualified(fn)} raised {type(exc).__name__}; fix the callable "
                    f"or its '{what}_args'/'{what}_kwargs'. Received: {text}") from exc


COMMUNICATORS = _COMMUNICATOR_NAMES


def _build_communicator(cfg: dict):
    from deep500lite.lv3.communication import CommunicationNetwork

    spec = cfg.get("communicator") or "mpi"
    args, kwargs = _args_of(cfg, "communicator")
    if isinstance(spec, str):
        if spec == "mpi":
            from deep500lite.lv3.mpi import MPICommunicator as spec
        elif spec == "torch":
            from deep500lite.lv3 import TorchDistributedCommunicator as spec
        else:
            raise UserError(f"Unknown communicator {spec!r}. Allowed values are {format_choices(COMMUNICATORS)}, or a "
                            f"callable returning a CommunicationNetwork. Received: {spec!r}")
    comm = spec(*args, **kwargs)
    if not isinstance(comm, CommunicationNetwork):
        raise UserError(f"'communicator' built a {type(comm).__name__}, which is not a d5.distributed."
                        f"CommunicationNetwork; it must build one. Received: {type(comm).__name__}")
    return comm


def _bucket_kwargs(cfg: dict, wrapper, kwargs: dict) -> dict:
    """``distributed_kwargs`` with the recipe key ``bucket_mb`` put in as the distributed optimizer's ``bucket_bytes``."""
    mb = cfg.get("bucket_mb")
    if mb is None:
        return kwargs
    sig = _signature(wrapper)
    if sig is None or "bucket_bytes" not in sig.parameters:
        raise UserError("'bucket_mb' sets the gradient buckets of a data-parallel optimizer that takes bucket_bytes "
                        "(ConsistentDecentralized, ModelAverageDecentralized, CompressedDecentralized); "
                        f"{_qualified(wrapper)} takes none. Received: bucket_mb={mb!r}")
    if "bucket_bytes" in kwargs:
        raise UserError("The bucket size is set twice: as 'bucket_mb' and as distributed_kwargs.bucket_bytes; set it "
                        f"once. Received: bucket_mb={mb!r}, bucket_bytes={kwargs['bucket_bytes']!r}")
    return {**kwargs, "bucket_bytes": int(round(float(mb) * (1 << 20)))}


def _seed_globals(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    from deep500lite.registry import seed_frameworks

    seed_frameworks(seed)  # each imported framework seeds its own generators (its spec's seed_hook)


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
    import deep500lite.datasets as datasets

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
        raise UserError(f"The dataset callable {_qualified(spec)} returned a training set that is not a d5.Dataset "
                        f"(with __getitem__ and __len__). Received: {type(train).__name__}")
    input_node = getattr(train, "input_node", _INPUT)
    first = train[np.arange(1)]
    shape = tuple(np.asarray(first[input_node]).shape[1:])
    classes = getattr(train, "classes", None)
    if classes is None and getattr(train, "labels", None) is not None:
        classes = int(np.max(np.asarray(train.labels))) + 1
    return train, test, classes, shape, datasets.SoftmaxCrossEntropy()


def _build_network(cfg: dict, classes, shape, seed: int, loss, label_node: str, seeds: dict):
    import deep500lite.networks as networks
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
        _check_executor_arguments(network, spec, args, kwargs)
        return make_executor(network, spec, *args, **kwargs)
    ex, used = _call_filling(spec, [network, *args], kwargs, {"seed": seed}, "executor")
    if "seed" in used or "seed" in kwargs:
        seeds["executor"] = used.get("seed", kwargs.get("seed"))
    if not hasattr(ex, "inference_and_backprop"):
        raise UserError(f"The executor callable {_qualified(spec)} must return a d5.GraphExecutor. "
                        f"Received: {type(ex).__name__}")
    return ex


def _check_executor_arguments(network, spec: str, args: list, kwargs: dict) -> None:
    """Refuse ``executor_args``/``executor_kwargs`` the framework's ``from_model`` does not take, before calling it."""
    from deep500lite.registry import import_framework, split_executor_spelling

    key, variant_kwargs = split_executor_spelling(spec)
    from_model = getattr(import_framework(key), "from_model", None)
    sig = _signature(from_model) if from_model is not None else None
    if sig is None:
        return
    given = {**variant_kwargs, **kwargs}
    if args and "device" in given:
        raise UserError(f"executor: the device is given twice, as executor_args[0] ({args[0]!r}) and as "
                        f"executor_kwargs['device'] ({given['device']!r}); give it once. Received: both")
    given.setdefault("device", args[0] if args else None)
    try:
        sig.bind(network, **given)
    except TypeError as exc:
        options = [n for n, p in sig.parameters.items() if n not in ("network", "model", "device")
                   and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        raise UserError(f"executor: the '{key}' executor does not take these arguments ({exc}); its options: "
                        f"{format_choices(options) or 'none'}. Received: executor_kwargs "
                        f"{format_choices(k for k in kwargs if k != 'seed') or 'none'}") from exc


def _variant_of(spec, executor, framework: str) -> str:
    """The executor's spelling in results and comparisons: ``torch:compile`` for that variant, else the framework."""
    if isinstance(spec, str):
        from deep500lite.registry import canonical_executor_spelling

        return canonical_executor_spelling(spec)
    return getattr(executor, "framework", None) or framework


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
            raise UserError("'events_args'/'events_kwargs' are given but 'events' is not; set 'events' or remove "
                            f"them. Received: events_args={args!r}, events_kwargs={kwargs!r}")
        return []
    if isinstance(spec, (list, tuple)):
        if args or kwargs:
            raise UserError("'events_args'/'events_kwargs' apply when 'events' is one class, name or callable, not a "
                            f"list; construct each event in the list instead. Received: a list of {len(spec)} "
                            f"events with events_args={args!r}, events_kwargs={kwargs!r}")
        out = []
        for i, item in enumerate(spec):
            item = _event_class(item)
            if inspect.isclass(item):
                try:
                    item = item()
                except TypeError as exc:
                    raise UserError(f"events[{i}]: {item.__name__} needs arguments ({exc}); construct it in the "
                                    f"list, as {item.__name__}(...). Received: the class {item.__name__}") from exc
            if not _is_event(item):
                raise UserError(f"events[{i}] is not a training event (an object with hooks such as after_epoch, or "
                                f"an event class or name). Received: {type(item).__name__} {item!r}")
            out.append(_fresh(item))
        return out
    item = _event_class(spec)
    if not callable(item):
        raise UserError(f"'events' must be events or a callable that builds them. Received: {item!r}")
    built = item(*args, **kwargs)
    built = list(built) if isinstance(built, (list, tuple)) else [built]
    for i, event in enumerate(built):
        if not _is_event(event):
            raise UserError(f"'events' ({_qualified(item)}) built something that is not a training event (an object "
                            f"with hooks such as after_epoch). Received: item {i}, {type(event).__name__}")
    return built


_HOOKS = ("before_training", "after_training", "before_epoch", "after_epoch", "before_sampling", "after_sampling",
          "before_training_batch", "after_training_batch", "before_optimizer_step", "after_optimizer_step",
          "before_test_set", "after_test_set", "before_test_batch", "after_test_batch")


def _is_event(item) -> bool:
    from deep500lite.metrics.events import TrainingEvent

    return isinstance(item, TrainingEvent) or any(callable(getattr(item, h, None)) for h in _HOOKS)


def _build(resolved: ResolvedRecipe, seed: int, with_optimizer: bool = True) -> _Components:
    cfg = resolved.config
    if cfg.get("bucket_mb") is not None and cfg.get("distributed") is None:
        raise UserError("'bucket_mb' sizes the gradient buckets of a data-parallel run; this recipe sets no "
                        f"'distributed' optimizer. Received: bucket_mb={cfg['bucket_mb']!r}, distributed=None")
    seeds: dict = {"run": seed}
    _seed_globals(seed)
    train, test, classes, shape, loss = _build_data(cfg)
    label_node = getattr(train, "label_node", None) or _LABEL
    net, input_node, output_node = _build_network(cfg, classes, shape, seed, loss, label_node, seeds)
    for ds in (train, test):
        if ds is not None and getattr(ds, "input_node", input_node) != input_node:
            ds.input_node = input_node  # the network's data input has another name than the dataset's default
    from deep500lite.recipe.parallelism import microbatch_network, microbatch_optimizer

    net = microbatch_network(net, cfg)  # the 'microbatches' key: any batch size
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
            raise UserError(f"'optimizer' built a {type(opt).__name__}, which has no step(); it must be a "
                            f"d5.Optimizer. Received: {type(opt).__name__}")
        opt = microbatch_optimizer(opt, cfg)  # the 'microbatches' key: one step as n micro-batches
        if distributed:
            wrapper = _distributed_class(cfg["distributed"])
            args, kwargs = _args_of(cfg, "distributed")
            if not callable(wrapper):
                raise UserError(f"'distributed' must be a distributed optimizer class or name. Received: {wrapper!r}")
            kwargs = _bucket_kwargs(cfg, wrapper, kwargs)  # the 'bucket_mb' key
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
                  "executor_variant": _variant_of(cfg["executor"], parts.executor, resolved.framework),
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
