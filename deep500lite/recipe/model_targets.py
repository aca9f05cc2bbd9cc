"""What ``deep500lite model scaling`` and ``model layers`` accept as MODEL_OR_RECIPE, turned into a model.

A built-in network description (:data:`deep500lite.perfmodel.scaling_networks.MODELS`), an ``.onnx``
file, a zoo network (:func:`deep500lite.networks.list_models`) or a recipe, whose network is built
as the recipe builds it (the dataset's sample shape and classes). It lives beside the recipes because
it resolves one; the models it feeds are in :mod:`deep500lite.perfmodel`.
"""

from __future__ import annotations

import os

import numpy as np
import onnx

import deep500lite.datasets as datasets
import deep500lite.networks as networks
from deep500lite.errors import UserError, format_choices
from deep500lite.perfmodel import scaling_networks as sn
from deep500lite.recipe.loading import load_recipe

__all__ = ["DEFAULT_BATCH", "describe_target", "load_onnx", "target_onnx"]

DEFAULT_BATCH = {"alexnet": 256, "vgg16": 256, "googlenet": 32, "resnet50": 64, "resnet101": 64}


def describe_target(target: str):
    """``(ModelDescription, default batch or None)`` of a built-in name, an ``.onnx`` file or a recipe."""
    key = str(target).lower().replace("-", "").replace("_", "")
    if key in sn.MODELS:
        return sn.model_description(key), DEFAULT_BATCH.get(key)
    if str(target).endswith(".onnx"):
        if not os.path.exists(target):
            raise UserError(f"The ONNX file does not exist. Received: {target!r}")
        return sn.describe_onnx(load_onnx(target), os.path.basename(target)[:-5]), None

    if target in networks.list_models():  # a zoo model not built in: its ONNX graph, as 'model layers' sees it
        model, name = target_onnx(target)
        return sn.describe_onnx(model, name), None
    return _describe_recipe(target)


def load_onnx(path: str):
    """``onnx.load(path)``; a file that is not an ONNX model is a :class:`UserError` naming it."""

    try:
        return onnx.load(path)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and OSError: the file is not a model
        raise UserError(f"MODEL_OR_RECIPE {path!r} is not a readable ONNX model ({type(exc).__name__}: "
                        f"{str(exc)[:200]}); give an .onnx file written by an ONNX exporter. Received: {path!r}") from None


def _recipe_network(target: str, batch_size):
    """``(onnx ModelProto, recipe name, recipe batch, sample shape or None, source)`` of a recipe's model."""

    try:
        recipe = load_recipe(target)
    except UserError as exc:
        raise UserError(f"MODEL_OR_RECIPE must be a built-in network ({format_choices(sn.MODELS)}), an .onnx file or "
                        f"a recipe; as a recipe it failed: {str(exc).splitlines()[0].split(' Received:')[0]} "
                        f"Received: {target!r}") from None
    cfg = recipe.resolve().config
    spec, batch = cfg.get("model"), int(cfg.get("batch_size") or 1)
    if isinstance(spec, str) and spec.endswith(".onnx"):
        return load_onnx(spec), recipe.name, batch, None, f"recipe {recipe.name} ({spec})"
    if not (isinstance(spec, str) and isinstance(cfg.get("dataset"), str)):
        raise UserError("model scaling reads a recipe whose 'model' is a zoo name (with a named 'dataset') or an "
                        ".onnx path; export other models to ONNX and pass the file. Received: model="
                        f"{spec!r}, dataset={cfg.get('dataset')!r}")

    kwargs = dict(cfg.get("dataset_kwargs") or {})
    args = list(cfg.get("dataset_args") or [])
    root = args[0] if args else kwargs.pop("root", None)
    info = datasets.dataset_shape(cfg["dataset"], root, **kwargs)
    classes, shape = int(info[0]), tuple(int(s) for s in info[1:])
    mk = dict(cfg.get("model_kwargs") or {})
    net, _, _ = networks.create_model(spec, batch_size, *(cfg.get("model_args") or []),
                                      **{"classes": classes, "shape": shape, **mk})
    return net.to_onnx(), recipe.name, batch, shape, f"recipe {recipe.name} ({spec} on {cfg['dataset']})"


def _describe_recipe(target: str):


    model, name, batch, shape, source = _recipe_network(target, 1)
    desc = sn.describe_onnx(model, name)
    if shape is None:
        return desc, batch
    return sn.ModelDescription(desc.name, desc.layers, int(np.prod(shape)) * 4, source), batch


def target_onnx(target: str):
    """``(onnx ModelProto with a symbolic batch where the zoo allows it, name)`` of ``model layers``'s target:
    an ``.onnx`` file, a zoo model name (its default sample shape) or a recipe."""

    if str(target).endswith(".onnx"):
    
        if not os.path.exists(target):
            raise UserError(f"The ONNX file does not exist. Received: {target!r}")
        return load_onnx(target), os.path.basename(target)[:-5]
    if target in networks.list_models():
        net, _, _ = networks.create_model(target, None)
        return net.to_onnx(), target
    model, name, _, _, _ = _recipe_network(target, None)
    return model, name
