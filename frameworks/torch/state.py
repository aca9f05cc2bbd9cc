"""PyTorch's part of seeds and checkpoints: the global seed, the native optimizers' and the executor's state.

:mod:`deep500lite.lv2.checkpoint` asks the spec's ``state_hook`` (this module) for the state of a
torch optimizer or executor and gets numpy values only, so the checkpoint format knows no torch:
``torch.optim`` state dicts have their tensors turned into numpy arrays and back.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["seed", "optimizer_state", "restore_optimizer_state", "rng_state", "restore_rng_state"]


def seed(value: int) -> None:
    """``torch.manual_seed`` (every device's default generator)."""
    torch.manual_seed(value)


def _to_numpy(value):
    if isinstance(value, torch.Tensor):
        return {"__tensor__": value.detach().cpu().numpy()}
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_numpy(v) for v in value)
    return value


def _to_torch(value):
    if isinstance(value, dict):
        if set(value) == {"__tensor__"}:
            return torch.from_numpy(np.array(value["__tensor__"]))
        return {k: _to_torch(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_torch(v) for v in value)
    return value


def optimizer_state(opt) -> dict | None:
    """The ``torch.optim`` state of a native optimizer, numpy arrays in place of tensors (None: not one)."""
    if not hasattr(opt, "_optimizer"):
        return None
    # _optimizer() creates the torch.optim optimizer over the live parameters if no step ran yet.
    return {"torch_optim": _to_numpy(opt._optimizer().state_dict()), "skip": ["torch_optimizer"]}


def restore_optimizer_state(opt, state: dict) -> None:
    """Load :func:`optimizer_state`'s value back (torch casts the state to the parameters' device)."""
    opt._optimizer().load_state_dict(_to_torch(state["torch_optim"]))


def rng_state(executor) -> dict | None:
    """The dropout generator's state of a :class:`~deep500lite.frameworks.torch.TorchExecutor` (None: none)."""
    generator = getattr(executor, "_generator", None)
    return None if generator is None else {"torch_generator": generator.get_state().numpy()}


def restore_rng_state(executor, state: dict) -> None:
    """Restore :func:`rng_state`'s value."""
    executor._generator.set_state(torch.from_numpy(np.array(state["torch_generator"])))
