"""The first training step of a recipe on its executor against the reference executor.

:func:`first_step_divergence` builds the recipe twice from the same seed, runs one
``inference_and_backprop`` on each executor with the same batch and reports the largest output
and gradient differences (``deep500lite run --divergence``, which ``compare`` passes).
"""

from __future__ import annotations

import numpy as np

from deep500lite.recipe.components import _LOSS, _build
from deep500lite.recipe.loading import Recipe

__all__ = ["first_step_divergence"]

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
