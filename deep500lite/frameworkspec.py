"""What a framework declares about itself: :class:`FrameworkSpec`, found through an entry point.

Every framework package, built in or installed from another distribution, declares one spec in a
module that imports nothing heavy (``frameworks/<fw>/spec.py``, or a plugin's own) and registers
it in the ``deep500lite.frameworks`` entry-point group of its ``pyproject.toml``::

    [project.entry-points."deep500lite.frameworks"]
    myframework = "my_package.spec:SPEC"

:mod:`deep500lite.registry` reads the group with :func:`importlib.metadata.entry_points` and loads
only the specs; the framework itself (torch, TensorFlow, ...) is imported when an executor or a
role module is asked for. The core asks a spec what the framework can do (``spec.training``,
``spec.custom_ops``, ``"gpu" in spec.devices``, ``"op" in spec.bench``), never its name.

A framework package whose ``__init__`` must stay light (the spec is imported through it) gets its
public names on first use with :func:`lazy_exports`, the way Keras' ``LazyModule`` defers a backend.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import types
import warnings
from typing import Callable, Mapping

from deep500lite.errors import FrameworkNotAvailableError, UserError
from deep500lite.utils import is_package_available, package_version

__all__ = ["FrameworkSpec", "ROLES", "CAPABILITIES", "BENCH_RUNNERS", "lazy_exports"]

#: Role modules a framework package may have, with what each holds (docs/architecture.md's table).
ROLES = {
    "executor": "the GraphExecutor: from_model, the conversion and the call",
    "ops": "ONNX operators: SUPPORTED_OPS and the converters by family",
    "custom": "custom_op(op): a deep500lite custom operator as the framework's own",
    "optimizers": "native optimizers (or the reference ones it runs)",
    "bench": "the runners of deep500lite bench (deep500lite.bench.contract)",
    "dtypes": "ONNX and numpy dtypes to the framework's and back",
    "native": "executors of models that exist only in this framework",
    "models": "lenet, resnet20 and export_onnx in the framework's own API",
    "zoo": "the zoo's models exported to ONNX (bench zoo's producers)",
    "zoo_graphs": "the zoo's graphs beyond classifiers (control flow, detection, dynamic axes, a decoder)",
    "op_validation": "Deep500's test_nativeop_forward/_gradient on the framework's own operators",
    "distributed": "its own distributed pieces: a communicator over its collectives and/or a Horovod optimizer",
    "state": "checkpoint state of its optimizers and executors",
}

#: The capability fields of a spec, for the generated table.
CAPABILITIES = ("inference", "training", "gradients", "custom_ops", "runtime_checks", "devices", "variants",
                "native_optimizers", "distributed", "bench")

#: What a framework's ``bench`` module can run (:class:`deep500lite.bench.contract.FrameworkBench`).
BENCH_RUNNERS = ("op", "inference", "training", "custom_op", "peak", "gpu", "data_parallel")


def _resolve(reference: str):
    """``"package.module:attribute"`` imported and looked up."""
    module, _, attribute = reference.partition(":")
    obj = importlib.import_module(module)
    for part in filter(None, attribute.split(".")):
        obj = getattr(obj, part)
    return obj


@dataclasses.dataclass(frozen=True)
class FrameworkSpec:
    """One framework's declaration: its names, where it lives, what it needs and what it can do.

    Attributes:
        name: the key (``torch``): the entry point's name, the CLI's and recipes' spelling.
        module: the package that offers ``from_model``, ``SUPPORTED_OPS`` and ``executor_class``.
        title: the framework's own name, for tables (``PyTorch``).
        aliases: other spellings (``pytorch``).
        requires: import names that must be installed (checked without importing them).
        distributions: pip distributions whose installed version is the framework's version (the
            first installed one).
        install: the command that installs what ``requires`` names.
        roles: the role modules the package has (keys of :data:`ROLES`).
        inference: runs ONNX graphs forward.
        training: ``inference_and_backprop`` works, so optimizers can train with it.
        gradients: how it differentiates: ``"native"`` (its own autodiff on the converted graph)
            or ``"autodiff"`` (deep500lite's ONNX autodiff graph, run like any ONNX graph).
        custom_ops: runs deep500lite custom operators inside its graphs.
        runtime_checks: an invalid value met while running (an index out of range, a reshape whose
            sizes do not fit) raises an error naming the node; False where the runtime computes
            something anyway (some inference runtimes do not check these).
        devices: ``"cpu"`` and/or ``"gpu"``.
        variants: executor variants, ``{"compile": {"compile": True}}``, spelled ``name:variant``.
        native_optimizers: its ``optimizers`` role module has optimizers of its own (the others
            export the reference optimizers).
        distributed: what its ``distributed`` role module provides, each ``"KIND: backend"``: a
            ``communicator`` (a :class:`~deep500lite.lv3.CommunicationNetwork` over the framework's own
            collectives, such as ``torch.distributed``) or an ``optimizer`` (a distributed-optimizer
            wrapper over another library's collectives, such as Horovod's). deep500lite's own
            distributed optimizers (:mod:`deep500lite.lv3`) run on every framework and are not listed.
        bench: the runners its ``bench`` module has (:data:`BENCH_RUNNERS`).
        zoo_export: exports the zoo's models to ONNX (a producer of ``bench zoo``).
        zoo_cells: runs the zoo's cells in ``bench zoo`` by default (inference, and training where
            ``training``).
        baseline: the yardstick the others are compared with (the reference executor).
        seed_hook: ``"module:function"`` that seeds the framework's global generators; called by
            :meth:`seed` only when the framework is already imported.
        state_hook: a module with ``optimizer_state(opt)``, ``restore_optimizer_state(opt, state)``,
            ``rng_state(executor)`` and ``restore_rng_state(executor, state)`` (numpy values only)
            for checkpoints of its native optimizers and executors.
        first: role modules imported before any other (a JAX switch that must come first).
        order: where it comes in lists of frameworks (then by name; plugins after the built-ins).
    """

    name: str
    module: str
    title: str = ""
    aliases: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    distributions: tuple[str, ...] = ()
    install: str = ""
    roles: frozenset = frozenset({"executor", "ops"})
    inference: bool = True
    training: bool = False
    gradients: str = "native"
    custom_ops: bool = False
    runtime_checks: bool = True
    devices: tuple[str, ...] = ("cpu",)
    variants: Mapping[str, Mapping] = dataclasses.field(default_factory=dict)
    native_optimizers: bool = False
    distributed: tuple[str, ...] = ()
    bench: frozenset = frozenset()
    zoo_export: bool = False
    zoo_cells: bool = True
    baseline: bool = False
    seed_hook: str | None = None
    state_hook: str | None = None
    first: tuple[str, ...] = ()
    order: int = 100

    def __post_init__(self):
        if not (isinstance(self.name, str) and self.name.isidentifier() and self.name == self.name.lower()):
            raise UserError(f"A framework's name is a lower-case Python identifier, such as 'torch'. "
                            f"Received: {self.name!r}")
        unknown = sorted(set(self.roles) - set(ROLES))
        if unknown:
            raise UserError(f"Framework {self.name!r} declares unknown roles {unknown}; the roles are "
                            f"{sorted(ROLES)}. Received: {sorted(self.roles)}")
        unknown = sorted(set(self.bench) - set(BENCH_RUNNERS))
        if unknown or (self.bench and "bench" not in self.roles):
            raise UserError(f"Framework {self.name!r}: 'bench' lists runners of {list(BENCH_RUNNERS)} and needs the "
                            f"'bench' role. Received: bench={sorted(self.bench)}, roles={sorted(self.roles)}")
        if self.gradients not in ("native", "autodiff"):
            raise UserError(f"Framework {self.name!r}: gradients is 'native' or 'autodiff'. "
                            f"Received: {self.gradients!r}")
        if set(self.devices) - {"cpu", "gpu"}:
            raise UserError(f"Framework {self.name!r}: devices are 'cpu' and 'gpu'. Received: {self.devices!r}")
        object.__setattr__(self, "roles", frozenset(self.roles))
        object.__setattr__(self, "bench", frozenset(self.bench))
        object.__setattr__(self, "aliases", tuple(self.aliases))
        object.__setattr__(self, "requires", tuple(self.requires))

    # ------------------------------------------------------------------ installation
    def is_available(self) -> bool:
        """Whether every package in ``requires`` is installed (nothing is imported)."""
        return all(is_package_available(p) for p in self.requires)

    def missing(self) -> list[str]:
        """The packages of ``requires`` that are not installed."""
        return [p for p in self.requires if not is_package_available(p)]

    def version(self) -> str | None:
        """The installed version of the first of ``distributions`` that is installed, or None."""
        for dist in self.distributions:
            version = package_version(dist)
            if version:
                return version
        return None

    def require(self) -> None:
        """Raise :class:`FrameworkNotAvailableError` (with the install command) unless it is available."""
        missing = self.missing()
        if missing:
            raise FrameworkNotAvailableError(
                f"Framework '{self.name}' needs the Python package{'s' if len(missing) > 1 else ''} "
                f"{', '.join(repr(m) for m in missing)}, which {'are' if len(missing) > 1 else 'is'} not installed: "
                f"{self.install or 'install it'}")

    # ------------------------------------------------------------------ loading
    def load(self) -> types.ModuleType:
        """The framework's package, imported (after :meth:`require`)."""
        self.require()
        for role in self.first:
            importlib.import_module(f"{self.module}.{role}")
        return importlib.import_module(self.module)

    def role(self, role: str) -> types.ModuleType:
        """One role module (``"bench"``, ``"zoo"``), imported.

        Raises:
            UserError: the framework does not declare that role (the message lists its roles).
            FrameworkNotAvailableError: the framework is not installed.
        """
        if role not in self.roles:
            raise UserError(f"Framework '{self.name}' has no '{role}' module; its roles are "
                            f"{', '.join(sorted(self.roles))}. Received: {role!r}")
        package = self.load()
        return importlib.import_module(f"{package.__name__}.{role}")

    def owns(self, obj) -> bool:
        """Whether ``obj``'s class is defined in this framework's package."""
        return type(obj).__module__ == self.module or type(obj).__module__.startswith(self.module + ".")

    # ------------------------------------------------------------------ seeds and state
    def seed(self, seed: int) -> bool:
        """Seed the framework's global generators, if it is imported already (nothing is imported).

        Returns:
            Whether a seed was set.
        """
        if self.seed_hook is None or not all(p in sys.modules for p in self.requires):
            return False
        _resolve(self.seed_hook)(seed)
        return True

    def state(self) -> types.ModuleType | None:
        """The module of :attr:`state_hook`, imported, or None."""
        return None if self.state_hook is None else importlib.import_module(self.state_hook)

    def describe(self) -> dict:
        """The spec as a JSON-ready dict (for ``deep500lite list frameworks --json`` and the docs' table)."""
        out = dataclasses.asdict(self)
        out.update(roles=sorted(self.roles), bench=sorted(self.bench), variants={k: dict(v) for k, v in
                                                                                 self.variants.items()})
        return out


def lazy_exports(package: str, exports: Mapping[str, str], spec: FrameworkSpec,
                 deprecated: Mapping[str, tuple[str, str]] | None = None) -> tuple[Callable, Callable]:
    """A module ``__getattr__`` and ``__dir__`` that import a framework package's names on first use.

    Args:
        package: the package's ``__name__``.
        exports: public name -> ``"role_module"`` (the same name there) or ``"role_module:attribute"``;
            a module path starting with ``deep500lite.`` is taken as it is.
        spec: the package's spec: a missing framework raises its install command on first use.
        deprecated: old name -> (new name, message), returned with a :class:`DeprecationWarning`.

    Returns:
        ``(__getattr__, __dir__)`` to assign in the package's ``__init__``.
    """
    deprecated = dict(deprecated or {})

    def __getattr__(name: str):
        if name in deprecated:
            new, message = deprecated[name]
            warnings.warn(message, DeprecationWarning, stacklevel=2)
            return __getattr__(new)
        target = exports.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        spec.require()
        for role in spec.first:
            importlib.import_module(f"{package}.{role}")
        module, _, attribute = target.partition(":")
        module = module if module.startswith("deep500lite.") else f"{package}.{module}"
        value = getattr(importlib.import_module(module), attribute or name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return sorted(set(exports) | set(vars(sys.modules[package])))

    return __getattr__, __dir__
