"""MLPerf training logs: ``:::MLLOG`` lines that pass ``mlperf_logging``'s compliance checker.

:class:`MLLogEvent` writes one ``:::MLLOG {json}`` line per event, in the format of MLCommons'
``mlperf_logging`` package, with every key the checker's training rules require
(:data:`RULESET`, the checker's current one): the submission fields (``submission_org``,
``submission_platform``, ``submission_division``, ``submission_status``, ``submission_benchmark``),
``cache_clear``, ``init_start``/``init_stop`` around building the components and compiling,
the hyperparameters and the disclosures of precision and parallelism, ``run_start``/``run_stop``,
``epoch_start``/``epoch_stop``, ``eval_start``/``eval_stop`` and ``eval_accuracy`` (epochs
counted from 1, with ``samples_count``).

Compilation belongs to initialization, as MLPerf rules it: a compiled executor
(``torch:compile``, ``tensorflow:xla``, ``jax``) compiles its training and inference functions
between ``init_start`` and ``init_stop`` (:meth:`deep500lite.GraphExecutor.precompile`, on zeros
shaped like a batch, its state put back after), so ``run_start`` to ``run_stop`` is training only.

The submission fields come from the recipe file (a dict ``MLPERF = {"org": ..., "platform": ...,
"division": ..., "status": ..., "benchmark": ...}``) and from ``deep500lite run --mllog
--mlperf KEY=VALUE``, which wins. Defaults: ``org`` "unspecified", ``platform`` the machine's
CPU (and GPU) model, ``division`` "open", ``status`` "research", ``benchmark`` the recipe's name.

:func:`check_log` runs the real checker (``pip install 'deep500lite[mlperf]'``). A benchmark name
of the ruleset (``llama31_8b``, ``flux1``, ...) gets the checker's full chain: the common rules, the
division's, and the benchmark's (quality target, hyperparameter ranges). Any other recipe gets the
ruleset's common rules (every required key, their order, start/stop pairs): the division's rules
only admit MLPerf's own benchmark names. :func:`mlperf_score` scores a time to accuracy over
several seeds as MLPerf's results summarizer does.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Mapping, Sequence

import numpy as np

from deep500lite.errors import FrameworkNotAvailableError, UserError, format_choices

__all__ = ["MLLogEvent", "RULESET", "SUBMISSION_KEYS", "submission_fields", "check_log", "mlperf_score",
           "ruleset_benchmarks", "precompile_parts", "ComplianceReport"]

#: The checker's ruleset this module writes for (``mlperf_logging.compliance_checker``'s default).
RULESET = "6.1.0"

#: The submission fields a recipe's ``MLPERF`` dict or ``--mlperf KEY=VALUE`` may set.
SUBMISSION_KEYS = ("org", "platform", "division", "status", "benchmark")
_DIVISIONS = ("open", "closed")
_STATUSES = ("onprem", "cloud", "research", "preview", "available")
_PRECISIONS = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bfloat16", "int8": "int8",
               "uint8": "uint8"}


def submission_fields(recipe_fields: Mapping | None = None, overrides: Mapping | None = None,
                      recipe_name: str = "recipe") -> dict:
    """The submission fields of a log: defaults, then the recipe's ``MLPERF`` dict, then ``overrides``.

    Raises:
        UserError: an unknown key, an empty value, a division other than open/closed or an
            unknown status.
    """
    from deep500lite.environment import collect_environment

    fields = {"org": "unspecified", "platform": None, "division": "open", "status": "research",
              "benchmark": recipe_name}
    for where, given in (("the recipe's MLPERF", recipe_fields), ("--mlperf", overrides)):
        if given is None:
            continue
        if not isinstance(given, Mapping):
            raise UserError(f"{where} must be a dict of submission fields ({format_choices(SUBMISSION_KEYS)}). "
                            f"Received: {type(given).__name__}")
        for key, value in given.items():
            if key not in SUBMISSION_KEYS:
                raise UserError(f"{where} has the unknown submission field {key!r}; allowed: "
                                f"{format_choices(SUBMISSION_KEYS)}. Received: {key!r}")
            if not isinstance(value, str) or not value.strip():
                raise UserError(f"{where}: the submission field {key!r} must be a non-empty string. Received: "
                                f"{value!r}")
            fields[key] = value.strip()
    if fields["division"] not in _DIVISIONS:
        raise UserError(f"The submission division must be one of {format_choices(_DIVISIONS)}. Received: "
                        f"{fields['division']!r}")
    if fields["status"] not in _STATUSES:
        raise UserError(f"The submission status must be one of {format_choices(_STATUSES)}. Received: "
                        f"{fields['status']!r}")
    if fields["platform"] is None:
        env = collect_environment()
        cpu = (env.get("cpu") or {}).get("model") if isinstance(env.get("cpu"), dict) else env.get("cpu")
        gpus = env.get("gpus") or []
        gpu = gpus[0].get("name") if gpus and isinstance(gpus[0], dict) else None
        fields["platform"] = ", ".join(str(p) for p in (cpu, gpu) if p) or "unknown"
    return fields


def _precision(dtype) -> str:
    return _PRECISIONS.get(np.dtype(dtype).name, "fp32")


class MLLogEvent:
    """Writes an MLPerf training log, ``:::MLLOG {json}`` lines, one per event.

    Use :meth:`init_start` before building the components, :meth:`describe` once they are built,
    :meth:`init_stop` after compiling; as a training event it writes ``run_start`` (before the
    first epoch), the epoch and evaluation lines, and :meth:`run_stop` ends the run. Lines are
    appended and flushed as they happen; :meth:`init_start` truncates the file.

    Args:
        path: the log file.
        recipe: the resolved recipe (for the benchmark name and hyperparameters).
        seed: the run seed.
        fields: the submission fields (:func:`submission_fields`; default: its defaults).
    """

    def __init__(self, path, recipe, seed: int, fields: Mapping | None = None):
        self.path = os.fspath(path)
        self.recipe, self.seed = recipe, seed
        self.fields = dict(fields) if fields is not None else submission_fields(recipe_name=recipe.name)
        self._epoch = 0
        self._samples = 0
        self._batch = int(recipe.config["batch_size"])

    def log(self, key: str, value=None, event_type: str = "POINT_IN_TIME", **metadata) -> None:
        """Append one ``:::MLLOG`` line."""
        from deep500lite.recipe.results import jsonable

        record = {"namespace": "", "time_ms": int(time.time() * 1000), "event_type": event_type, "key": key,
                  "value": jsonable(value), "metadata": jsonable(metadata)}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(":::MLLOG " + json.dumps(record, allow_nan=False) + "\n")

    def init_start(self) -> None:
        """Truncate the file; write ``init_start``, the submission fields and ``cache_clear``."""
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        open(self.path, "w").close()
        self.log("init_start", None, "INTERVAL_START")
        for key in ("org", "platform", "division", "status", "benchmark"):
            self.log(f"submission_{key}", self.fields[key])
        # deep500lite drops no operating-system cache (it needs root and slows every other process);
        # the value says so: False.
        self.log("cache_clear", False)

    def describe(self, parts) -> None:
        """Write the hyperparameters and the disclosures the ruleset requires (after building ``parts``)."""
        cfg = self.recipe.config
        opt = parts.optimizer
        micro = cfg.get("microbatches") or 1
        self.log("seed", self.seed)
        self.log("global_batch_size", self._batch)
        self.log("gradient_accumulation_steps", int(micro))
        self.log("micro_batch_size", max(1, self._batch // int(micro)))
        self.log("opt_name", type(opt).__name__)
        lr = getattr(opt, "learning_rate", None)
        if isinstance(lr, (int, float)) and not isinstance(lr, bool):
            self.log("opt_base_learning_rate", lr)
        self.log("train_samples", parts.info.get("train_samples"))
        self.log("eval_samples", parts.info.get("test_samples"))
        net = parts.executor.network
        floats = [np.asarray(v).dtype for v in net.fetch_tensors(net.parameters[:1])] or [np.dtype(np.float32)]
        precision = _precision(floats[0])
        for where in ("linear", "attn", "comm"):
            self.log(f"lowest_numerical_precision_in_{where}", precision)
        for kind in ("tensor", "pipeline", "context", "expert"):
            self.log(f"{kind}_parallelism", 1)
        self.log("config_filename", os.path.basename(self.recipe.path) if self.recipe.path else self.recipe.name)

    def init_stop(self, compile_seconds: float = 0.0) -> None:
        """Write ``init_stop`` (with the seconds compiled during initialization)."""
        self.log("init_stop", None, "INTERVAL_END", compile_seconds=float(compile_seconds))

    # ------------------------------------------------------------------ training events
    def before_training(self, trainer, stats):
        self.log("run_start", None, "INTERVAL_START")

    def before_epoch(self, trainer, stats, epoch):
        self._epoch = epoch + 1
        self.log("epoch_start", None, "INTERVAL_START", epoch_num=epoch + 1, samples_count=self._samples)

    def after_training_batch(self, trainer, stats, batch, outputs):
        if stats.steps:
            self._samples += int(stats.steps[-1].get("samples") or 0)

    def before_test_set(self, trainer, stats):
        if self._epoch == 0:  # the trainer's test before the first epoch: MLPerf logs evaluations of training
            return
        self.log("eval_start", None, "INTERVAL_START", epoch_num=self._epoch, samples_count=self._samples)

    def after_test_set(self, trainer, stats, result):
        if self._epoch == 0:
            return
        self.log("eval_stop", None, "INTERVAL_END", epoch_num=self._epoch, samples_count=self._samples)
        if result.get("test_accuracy") is not None:
            self.log("eval_accuracy", result["test_accuracy"] / 100.0, epoch_num=self._epoch,
                     samples_count=self._samples)

    def after_epoch(self, trainer, stats, epoch):
        self.log("epoch_stop", None, "INTERVAL_END", epoch_num=epoch + 1, samples_count=self._samples)

    def run_stop(self, passed: bool, compile_seconds: float = 0.0) -> None:
        """Write ``run_stop`` (``status``: ``success`` or ``aborted``; the seconds compiled after ``run_start``)."""
        self.log("run_stop", None, "INTERVAL_END", status="success" if passed else "aborted",
                 compile_seconds_in_run=float(compile_seconds))


def precompile_parts(parts, recipe) -> float:
    """Compile the executor's training and inference functions ahead, on zeros shaped like a batch.

    Returns:
        The seconds compiled (0.0 for an executor that does not compile ahead).
    """
    ex = parts.executor
    if not ex.is_compiled():
        return 0.0
    batch = int(recipe.config["batch_size"])
    feeds = {}
    for name, desc in ex.network.input_descriptors().items():
        if desc is None:
            return 0.0  # shapes unknown until a batch arrives: compiled on the first step instead
        shape = tuple(batch if d is None else int(d) for d in (desc.shape or ()))
        feeds[name] = np.zeros(shape, dtype=desc.dtype)
    return ex.precompile(feeds, getattr(parts.optimizer, "loss", None) or "loss")


# ------------------------------------------------------------------ the checker
class ComplianceReport:
    """The verdict of :func:`check_log`.

    Attributes:
        passed: every rule held.
        ruleset: the ruleset checked (``"6.1.0"``).
        rules: ``"common"`` (the ruleset's common rules) or ``"benchmark"`` (the checker's whole chain).
        messages: the checker's messages (empty when it passed).
    """

    def __init__(self, passed: bool, ruleset: str, rules: str, messages: list[str]):
        self.passed, self.ruleset, self.rules, self.messages = passed, ruleset, rules, messages

    def line(self) -> str:
        """One line for the console."""
        what = "common rules" if self.rules == "common" else "common, division and benchmark rules"
        verdict = "passed" if self.passed else f"FAILED ({len(self.messages)} messages)"
        return f"MLPerf compliance (mlperf_logging, training {self.ruleset}, {what}): {verdict}"


def _checker():
    try:
        from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser
    except ImportError as exc:
        raise FrameworkNotAvailableError("Checking an MLPerf log needs mlperf-logging, which is not installed: "
                                         "pip install 'deep500lite[mlperf]'") from exc
    return mlp_compliance, mlp_parser


def ruleset_benchmarks(ruleset: str = RULESET) -> list[str]:
    """The benchmark names the checker's training ``ruleset`` has rules for."""
    mlp_compliance, _ = _checker()
    folder = os.path.join(os.path.dirname(mlp_compliance.__file__), f"training_{ruleset}")
    if not os.path.isdir(folder):
        raise UserError(f"mlperf_logging has no training ruleset {ruleset!r}; it has "
                        f"{format_choices(sorted(mlp_compliance.rule_choices()))}. Received: {ruleset!r}")
    names = {f[len("open_"):-len(".yaml")] for f in os.listdir(folder) if f.startswith("open_") and f.endswith(".yaml")}
    names.discard("common")
    return sorted(names)


def check_log(path, ruleset: str = RULESET) -> ComplianceReport:
    """Check an MLPerf log with ``mlperf_logging``'s compliance checker (training usage).

    A log whose ``submission_benchmark`` is one of the ruleset's benchmarks gets the checker's
    whole chain (as ``python -m mlperf_logging.compliance_checker --usage training --ruleset
    RULESET`` runs it); any other the ruleset's ``common.yaml`` alone.

    Raises:
        FrameworkNotAvailableError: mlperf-logging is not installed.
        UserError: the file cannot be read, or the ruleset is unknown.
    """
    import logging

    mlp_compliance, mlp_parser = _checker()
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise UserError(f"MLPerf log '{path}' does not exist; give a file written by deep500lite run --mllog. "
                        f"Received: {path!r}")
    benchmarks = ruleset_benchmarks(ruleset)
    loglines, errors = mlp_parser.parse_file(path, ruleset=ruleset)
    benchmark = next((ll.value.get("value") for ll in loglines if ll.key == "submission_benchmark"), None)
    checker = mlp_compliance.make_checker("training", ruleset, False, False)
    config = f"training_{ruleset}/common.yaml"
    messages: list[str] = [f"line {line}: {err}" for line, err in errors]
    saved = list(mlp_compliance.enqueued_configs)
    records = []

    class _Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = _Keep(level=logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        if benchmark in benchmarks:
            checker.check_loglines(loglines, config)
            rules = "benchmark"
        else:
            checker.configured_checks(loglines, os.path.join(os.path.dirname(mlp_compliance.__file__), config))
            rules = "common"
        checker.log_messages()
    finally:
        root.removeHandler(handler)
        mlp_compliance.enqueued_configs[:] = saved  # the division's rules, queued by the common ones
    passed = not checker.has_messages() and not errors
    if not passed:
        messages += [m.strip() for m in records if m.strip()]
    return ComplianceReport(passed, ruleset, rules, messages)


def mlperf_score(seconds: Sequence[float | None]) -> float | None:
    """MLPerf's score of a time to accuracy over runs with different seeds: drop the fastest and the
    slowest run, take the mean of the rest.

    A run that never reached the target (None or infinity) counts as the slowest; with more than
    one such run there is no score (None). Fewer than three runs: None.
    """
    values = [math.inf if s is None else float(s) for s in seconds]
    if len(values) < 3 or sum(math.isinf(v) for v in values) > 1:
        return None
    kept = sorted(values)[1:-1]
    return float(sum(kept) / len(kept))
