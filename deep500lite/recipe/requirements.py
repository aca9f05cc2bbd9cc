"""Optional parts a command needs, checked before any work starts.

A benchmark that finds a missing library only at its end loses what it measured: ``run --plots``
without matplotlib would train, then fail to draw. :func:`missing_parts` lists what a recipe and a
command need that is not installed (each framework of ``--frameworks``, the dataset's loader
package, scipy for the significance tests, matplotlib for plots), each once, with the pip extra
that brings it; :func:`require_parts` raises one :class:`~deep500lite.errors.FrameworkNotAvailableError`
naming them all (the CLI prints it in one line, exit status 2). Packages are looked up with
``importlib.util.find_spec``, without importing them.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from deep500lite.errors import FrameworkNotAvailableError
from deep500lite.utils import is_package_available

__all__ = ["MissingPart", "missing_parts", "require_parts", "dataset_name"]


@dataclasses.dataclass(frozen=True)
class MissingPart:
    """One optional part that is not installed.

    Attributes:
        what: what it is, for the message (``"torch (framework)"``).
        purpose: what needs it (``"--frameworks"``, ``"the plots"``).
        install: the command that installs it (``pip install 'deep500lite[torch]'``; a plugin's own).
    """

    what: str
    purpose: str
    install: str

    def text(self) -> str:
        """``torch (framework 'torch') for --frameworks (pip install 'deep500lite[torch]')``."""
        return f"{self.what} for {self.purpose} ({self.install})"


def _extra(name: str) -> str:
    return f"pip install 'deep500lite[{name}]'"


def dataset_name(config: dict) -> str | None:
    """The recipe's dataset, when it is named by a string (None for a dataset built by a callable)."""
    value = config.get("dataset")
    return value if isinstance(value, str) else None


def missing_parts(*, frameworks: Sequence[str] = (), dataset: str | None = None, stats: bool = False,
                  plots: bool = False, plots_flag: str = "the plots") -> list[MissingPart]:
    """Every optional part the work needs and this installation lacks, each once.

    Args:
        frameworks: framework keys or executor variant spellings (``torch:compile``).
        dataset: a dataset name (:data:`deep500lite.datasets.DATASET_PACKAGES` says what it needs).
        stats: the significance tests (scipy) are needed.
        plots: plots are needed (matplotlib); ``plots_flag`` names what asks for them.
    """
    from deep500lite.registry import FRAMEWORKS, is_framework_available, split_executor_spelling

    out: list[MissingPart] = []
    seen: set[str] = set()
    for spelling in frameworks:
        key = split_executor_spelling(spelling)[0]
        if key in seen:
            continue
        seen.add(key)
        if not is_framework_available(key):
            spec = FRAMEWORKS[key]
            out.append(MissingPart(f"{', '.join(spec.missing()) or key} (framework '{key}')", "--frameworks",
                                   spec.install or _extra(key)))
    if dataset is not None:
        from deep500lite.datasets import DATASET_PACKAGES

        for module, name, extra in DATASET_PACKAGES.get(dataset, ()):
            if not is_package_available(module):
                out.append(MissingPart(name, f"the dataset '{dataset}'", _extra(extra)))
    if stats and not is_package_available("scipy"):
        out.append(MissingPart("scipy", "the significance tests of the step times", _extra("stats")))
    if plots and not is_package_available("matplotlib"):
        out.append(MissingPart("matplotlib", plots_flag, _extra("plots")))
    return out


def require_parts(command: str, parts: Sequence[MissingPart], hint: str = "") -> None:
    """Raise one :class:`FrameworkNotAvailableError` naming every part of ``parts`` (nothing when empty)."""
    if not parts:
        return
    names = "; ".join(p.text() for p in parts)
    raise FrameworkNotAvailableError(f"{command} needs optional parts that are not installed, so nothing was run: "
                                     f"{names}.{(' ' + hint) if hint else ''} Received: {len(parts)} missing")
