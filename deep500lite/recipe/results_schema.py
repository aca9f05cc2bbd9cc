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

_NUMBER = {"type": ["number", "null"]}
_COUNT = {"type": "integer", "minimum": 0}
_TEXT = {"type": ["string", "null"]}

_SUMMARY = {
    "type": ["object", "null"],
    "required": ["n", "median", "ci_low", "ci_high"],
    "properties": {"n": _COUNT, "median": _NUMBER, "ci_low": _NUMBER, "ci_high": _NUMBER, "mean": _NUMBER,
                   "std": _NUMBER, "min": _NUMBER, "max": _NUMBER, "q1": _NUMBER, "q3": _NUMBER},
}

_STEP = {
    "type": "object",
    "required": ["global_step", "loss", "step_time"],
    "properties": {"epoch": _COUNT, "step": _COUNT, "global_step": _COUNT, "samples": _COUNT, "loss": _NUMBER,
                   "accuracy": _NUMBER, "data_time": _NUMBER, "step_time": _NUMBER, "compile_time": _NUMBER,
                   "forward_backward_time": _NUMBER, "optimizer_time": _NUMBER, "elapsed": _NUMBER,
                   "communication_time": _NUMBER, "compute_time": _NUMBER, "bytes_sent": _NUMBER},
}

_EPOCH = {
    "type": "object",
    "required": ["epoch", "global_step_end", "train_loss"],
    "properties": {"epoch": _COUNT, "steps": _COUNT, "samples": _COUNT, "train_loss": _NUMBER,
                   "train_accuracy": _NUMBER, "test_accuracy": _NUMBER, "test_loss": _NUMBER,
                   "global_step_end": _COUNT, "elapsed": _NUMBER},
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
                   "properties": {"name": {"type": "string"}, "file": _TEXT, "sha256": _TEXT,
                                  "config": {"type": "object"}, "metrics": {"type": "array"}}},
        "framework": _TEXT,
        "device": _TEXT,
        "executor_variant": _TEXT,
        "executor_options": {"type": ["object", "null"]},
        "compile_seconds": _NUMBER,
        "seeds": {"type": ["object", "null"]},
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
                "throughput": {"type": ["object", "null"], "properties": {"samples_per_second": _NUMBER}},
                "final_test_accuracy": _NUMBER, "final_train_accuracy": _NUMBER, "final_train_loss": _NUMBER,
                "final_test_loss": _NUMBER,
                "time_to_accuracy": {"type": ["object", "null"],
                                     "properties": {"target": _NUMBER, "seconds": _NUMBER}},
                "peak_memory_bytes": _NUMBER, "training_time": _NUMBER, "epochs_done": _COUNT,
                "steps_done": _COUNT,
            },
        },
        "metrics": {"type": "array", "items": {"type": "object", "required": ["metric"]}},
        "verdicts": {"type": "array", "items": _VERDICT},
        "passed": {"type": "boolean"},
        "error": _TEXT,
        "divergence": {"type": ["object", "null"],
                       "properties": {"outputs": _NUMBER, "gradients": _NUMBER, "reference": _TEXT}},
        "distributed": {"type": ["object", "null"]},
        "environment": {"type": ["object", "null"]},
        "started": _NUMBER, "finished": _NUMBER, "wall_time": _NUMBER,
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
