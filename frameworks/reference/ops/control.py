"""Control-flow kernels of the reference executor: ``Loop`` as ONNX defines it.

``onnx.reference``'s ``Loop`` differs from ONNX's definition in two ways that real models reach:
a loop given a trip count and no condition (a ``for`` loop, as torch exports ``for i in
range(n)``) runs no iteration at all there, and scan outputs of two or more axes are
concatenated along their first axis (``np.vstack``) instead of stacked along a new one
(``user_defined_vals[i] = user_defined_val`` in ONNX's definition; ONNX Runtime stacks).
:class:`Loop` here keeps ``onnx.reference``'s body evaluation and fixes both.
"""

from __future__ import annotations

import numpy as np
from onnx.reference.ops.op_loop import Loop as _ReferenceLoop

from deep500lite.lv1.control_flow import loop_trip_plan

__all__ = ["Loop"]


class Loop(_ReferenceLoop):
    """ONNX ``Loop``: the body runs while ``i < M`` (M given) and the condition holds (see module docs)."""

    op_domain = ""

    def _run(self, M, cond, *args, context=None, body=None, attributes=None, bindings=None):
        body = self.body
        names_in, names_out = body.input_names, body.output_names
        values = dict(context or {})
        carried = names_in[2:]
        for name, value in zip(carried, args):
            values[name] = value
        limit, watch = loop_trip_plan(M, cond is not None)
        going = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
        stacks: list[list] = [[] for _ in range(self.K)]
        i = 0
        while going and (limit is None or i < limit):
            if names_in and names_in[0]:
                values[names_in[0]] = np.array(i, dtype=np.int64 if M is None else np.asarray(M).dtype)
            if len(names_in) > 1 and names_in[1]:
                values[names_in[1]] = np.array(going)
            outputs = self._run_body(values, attributes=attributes, bindings=bindings)
            for k in range(self.K):
                stacks[k].append(np.asarray(outputs[-self.K + k]))
            for name, out in zip(carried, names_out[1:1 + self.N]):
                values[name] = outputs[self.output_index[out]]
            if watch:
                going = bool(np.asarray(outputs[self.output_index[names_out[0]]]).reshape(-1)[0])
            i += 1
        results = [values[name] for name in carried]
        results += [np.stack(s) if s else np.empty((0,), np.float32) for s in stacks]
        return self._check_and_fix_outputs(tuple(results))
