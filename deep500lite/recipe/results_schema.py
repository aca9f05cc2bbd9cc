"""The JSON Schema of results files (``results.json``), the one place their shape is stated.

:data:`RESULTS_SCHEMA` (JSON Schema draft 2020-12) lists what every reader of a results file
(``deep500lite report``, ``compare``, ``run -n``'s aggregate) relies on: the sections, the
fields of each step and epoch record, the step-time summaries and the verdicts, each with its
type (numbers may be ``null``: results files write NaN and infinities as ``null``). Fields the
readers do not use (``environment``, ``components``, ...) may hold anything, and unknown
fields are allowed so that a newer writer with extra fields stays readable.
:func:`check_results` validates a parsed file with the ``jsonschema`` library
(:func:`deep500lite.utils.check_schema`): the first mismatch becomes one message naming the
file, the field's path and the value received.
"""

from __future__ import annotations

from deep500lite.errors import UserError
from deep500lite.utils import check_schema

__all__ = ["RESULTS_SCHEMA", "REQUIRED_SECTIONS", "check_results", "check_sections"]

# Numbers are bounded so that no reader's arithmetic (sums, squares, ratios in numpy) can overflow:
# a value is finite by JSON's rules, and |x| <= 1e100 here; durations are seconds from 0 to 1e9
# (31 years), counts and bytes >= 0, accuracies percentages from 0 to 100.
_NUMBER = {"type": ["number", "null"], "minimum": -1e100, "maximum": 1e100}
_SECONDS = {"type": ["number", "null"], "minimum": 0, "maximum": 1e9}
_AMOUNT = {"type": ["number", "null"], "minimum": 0, "maximum": 1e100}
_PERCENT = {"type": ["number", "null"], "minimum": 0, "maximum": 100}
_COUNT = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
_TEXT = {"type": ["string", "null"]}
_NAME = {"type": ["string", "null"], "minLength": 1, "maxLength": 4096}
_SEED = {"type": ["integer", "null"], "minimum": 0, "maximum": 2**64 - 1}

_SUMMARY = {
    "type": ["object", "null"],
    "required": ["n", "median", "ci_low", "ci_high"],
    "properties": {"n": _COUNT, "median": _SECONDS, "ci_low": _SECONDS, "ci_high": _SECONDS, "mean": _SECONDS,
                   "std": _SECONDS, "min": _SECONDS, "max": _SECONDS, "q1": _SECONDS, "q3": _SECONDS},
}

_STEP = {
    "type": "object",
    "required": ["global_step", "loss", "step_time"],
    "properties": {"epoch": _COUNT, "step": _COUNT, "global_step": _COUNT, "samples": _COUNT, "loss": _NUMBER,
                   "accuracy": _PERCENT, "data_time": _SECONDS, "step_time": _SECONDS, "compile_time": _SECONDS,
                   "forward_backward_time": _SECONDS, "optimizer_time": _SECONDS, "elapsed": _SECONDS,
                   "communication_time": _SECONDS, "compute_time": _SECONDS, "bytes_sent": _AMOUNT},
}

_EPOCH = {
    "type": "object",
    "required": ["epoch", "global_step_end", "train_loss"],
    "properties": {"epoch": _COUNT, "steps": _COUNT, "samples": _COUNT, "train_loss": _NUMBER,
                   "train_accuracy": _PERCENT, "test_accuracy": _PERCENT, "test_loss": _NUMBER,
                   "global_step_end": _COUNT, "elapsed": _SECONDS},
}

_VERDICT = {
    "type": "object",
    "required": ["metric", "measured", "required", "direction", "passed"],
    "properties": {"metric": {"type": "string"}, "measured": _NUMBER, "required": _NUMBER,
                   "direction": {"enum": ["higher", "lower"]}, "passed": {"type": ["boolean", "null"]},
                   "unit": {"type": "string"}, "note": {"type": "string"}},
}

#: The sections every results file has (a file missing one is refused, naming them all).
REQUIRED_SECTIONS = ("format", "version", "recipe", "framework", "samples", "summaries", "verdicts", "passed")

#: The JSON Schema of a results file.
RESULTS_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "deep500lite results file",
    "type": "object",
    "required": list(REQUIRED_SECTIONS),
    "properties": {
        "format": {"const": "deep500lite-results"},
        "version": {"type": "integer", "minimum": 1},
        "recipe": {"type": "object", "required": ["name"],
                   "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 4096}, "file": _TEXT,
                                  "sha256": _TEXT, "config": {"type": "object"}, "metrics": {"type": "array"}}},
        "framework": _NAME,
        "device": _NAME,
        "executor_variant": _NAME,
        "executor_options": {"type": ["object", "null"]},
        "compile_seconds": _SECONDS,
        "seeds": {"type": ["object", "null"],
                  "additionalProperties": {"anyOf": [_SEED, {"type": "array", "items": _SEED}]}},
        "components": {"type": ["object", "null"]},
        "samples": {"type": "object", "required": ["steps", "epochs"],
                    "properties": {"steps": {"type": "array", "items": _STEP},
                                   "epochs": {"type": "array", "items": _EPOCH}}},
        "summaries": {
            "type": "object",
            "required": ["warmup_steps", "step_time"],
            "properties": {
                "warmup_steps": _COUNT, "step_time": _SUMMARY, "data_time": _SUMMARY,
                "forward_backward_time": _SUMMARY, "optimizer_time": _SUMMARY,
                "throughput": {"type": ["object", "null"], "properties": {"samples_per_second": _AMOUNT}},
                "final_test_accuracy": _PERCENT, "final_train_accuracy": _PERCENT, "final_train_loss": _NUMBER,
                "final_test_loss": _NUMBER,
                "time_to_accuracy": {"type": ["object", "null"],
                                     "properties": {"target": _PERCENT, "seconds": _SECONDS}},
                "peak_memory_bytes": _AMOUNT, "training_time": _SECONDS, "epochs_done": _COUNT,
                "steps_done": _COUNT,
            },
        },
        "metrics": {"type": "array", "items": {"type": "object", "required": ["metric"]}},
        "verdicts": {"type": "array", "items": _VERDICT},
        "passed": {"type": "boolean"},
        "error": _TEXT,
        "divergence": {"type": ["object", "null"],
                       "properties": {"outputs": _AMOUNT, "gradients": _AMOUNT, "reference": _TEXT}},
        "distributed": {"type": ["object", "null"]},
        "environment": {"type": ["object", "null"]},
        "started": _AMOUNT, "finished": _AMOUNT, "wall_time": _SECONDS,
    },
}


def check_sections(data, path: str) -> None:
    """Refuse a results file missing any of :data:`REQUIRED_SECTIONS`, naming every missing one.

    Raises:
        UserError: a section is missing.
    """
    if isinstance(data, dict):
        missing = [k for k in REQUIRED_SECTIONS if k not in data]
        if missing:
            raise UserError(f"Results file '{path}' lacks the section(s) {', '.join(missing)}; a results file written "
                            f"by `deep500lite run` has {', '.join(REQUIRED_SECTIONS)}. It may be truncated or written "
                            f"by something else. Received: the sections {', '.join(map(str, data)) or 'none'}")


def check_results(data, path: str) -> None:
    """Check a parsed results file against :data:`RESULTS_SCHEMA`.

    A file missing several sections is refused with all of them named at once (a file holding
    only ``format`` names every other section); any other mismatch names the field's path.

    Args:
        data: the parsed JSON.
        path: the file, for the message.

    Raises:
        UserError: the file does not have the shape of a results file.
    """
    check_sections(data, path)
    check_schema(data, RESULTS_SCHEMA, f"Results file '{path}' does not have the shape of a deep500lite results file")
