"""Level 0: :class:`CppOp`, a compiled C++/CUDA operator loaded with :mod:`ctypes`.

The library is one built by :func:`~deep500lite.lv0.cppop.build.compile_custom_cppop` (or any
shared library built from a source that includes ``deep500lite/deep500lite.h`` and ends with
``D500_REGISTER_OP``). :class:`CppOp` runs it on numpy arrays or on raw pointers. Before calling a
CUDA member it asks the CUDA runtime linked into the library (``cudaGetDeviceCount``), so calling
one on a machine without a GPU raises :class:`~deep500lite.errors.DeviceError` instead of crashing.
"""

from __future__ import annotations

import ctypes
import operator
import os
from typing import Sequence

import numpy as np

from deep500lite.errors import CppOpError, DeviceError, UserError, UserTypeError
from deep500lite.lv0.operator import CustomOp
from deep500lite.lv0.tensordesc import TensorDescriptor

__all__ = ["CppOp", "check_descriptors", "ABI_VERSION", "MAX_DIMS"]

ABI_VERSION = 1
MAX_DIMS = 8
_INT_MAX = 2**31 - 1

# Status codes of the C entry points (d5_status_t in the header).
_OK, _ERR_EXCEPTION, _ERR_NOT_IMPLEMENTED, _ERR_ARITY, _ERR_CUDA, _ERR_NO_CUDA, _ERR_NULL = range(7)
_FORWARD, _BACKWARD, _FORWARD_CUDA, _BACKWARD_CUDA = range(4)
_MEMBER_NAMES = ("forward", "backward", "forward_cuda", "backward_cuda")

# tensortype_t codes -> (numpy kind, itemsize, C++ spelling).
_CODES = {
    1: ("i", 1, "int8_t"), 2: ("i", 2, "int16_t"), 3: ("i", 4, "int32_t"), 4: ("i", 8, "int64_t"),
    5: ("u", 1, "uint8_t"), 6: ("u", 2, "uint16_t"), 7: ("u", 4, "uint32_t"), 8: ("u", 8, "uint64_t"),
    9: ("f", 2, "half"), 10: ("f", 4, "float"), 11: ("f", 8, "double"), 13: ("b", 1, "bool"),
}
_DTYPE_CODES = {
    np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.int32): 3, np.dtype(np.int64): 4,
    np.dtype(np.uint8): 5, np.dtype(np.uint16): 6, np.dtype(np.uint32): 7, np.dtype(np.uint64): 8,
    np.dtype(np.float16): 9, np.dtype(np.float32): 10, np.dtype(np.float64): 11, np.dtype(np.bool_): 13,
}


def check_descriptors(name: str, input_descs, output_descs) -> tuple[list, list]:
    """The input and output descriptors as lists, checked: concrete, numeric and within the ABI's limits."""
    result = []
    for what, descs in (("input", input_descs), ("output", output_descs)):
        if isinstance(descs, TensorDescriptor) or not isinstance(descs, Sequence) or isinstance(descs, str):
            raise UserTypeError(
                f"{what}_descs of C++ operator '{name}' must be a list of d5.tensordesc(dtype, shape) "
                f"values. Received: {descs!r}"
            )
        for i, d in enumerate(descs):
            if not isinstance(d, TensorDescriptor):
                raise UserTypeError(
                    f"{what} descriptor {i} of C++ operator '{name}' must be a d5.tensordesc(dtype, shape). "
                    f"Received: {d!r}"
                )
            if not d.is_static:
                raise UserError(
                    f"{what} descriptor {i} of C++ operator '{name}' must have a concrete shape (C++ operators "
                    f"are created for one shape, e.g. d5.tensordesc(np.float32, [8, 3])). Received: {d}"
                )
            if len(d.shape) > MAX_DIMS:
                raise UserError(
                    f"{what} descriptor {i} of C++ operator '{name}' has {len(d.shape)} dimensions; C++ operators "
                    f"allow at most D500_MAX_DIMS={MAX_DIMS}. Received: {d}"
                )
            if any(s > _INT_MAX for s in d.shape):
                raise UserError(
                    f"{what} descriptor {i} of C++ operator '{name}' has a dimension above {_INT_MAX} "
                    f"(tensor_t sizes are int). Received: {d}"
                )
            if d.dtype.kind not in "biufc":
                raise UserTypeError(
                    f"{what} descriptor {i} of C++ operator '{name}' must have a numeric or bool dtype. "
                    f"Received: {d.dtype}"
                )
        result.append(list(descs))
    return result[0], result[1]



# --------------------------------------------------------------------------------------------
# Loading and running


class _TensorT(ctypes.Structure):
    _fields_ = [("dims", ctypes.c_int), ("sizes", ctypes.c_int * MAX_DIMS), ("type", ctypes.c_int)]


def _bind(lib, name, restype, argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


def _compatible(code: int, dtype: np.dtype) -> bool:
    if code == 0 or code not in _CODES:
        return True
    kind, size, _ = _CODES[code]
    if size != dtype.itemsize:
        return False
    if dtype == np.float16:
        return kind in "fiu"  # half is often stored as uint16_t
    integral = "iub"
    return kind == dtype.kind or (kind in integral and dtype.kind in integral)


class CppOp(CustomOp):
    """A compiled C++/CUDA operator, loaded with :mod:`ctypes`.

    Usually made by :func:`compile_custom_cppop`; the constructor loads an existing library.

    Numpy interface: :meth:`forward` and :meth:`backward` (the CPU members) and
    :meth:`forward_cuda` / :meth:`backward_cuda` (the CUDA members, through device copies).
    Raw-pointer interface, for frameworks that pass their own buffers without copies:
    :meth:`forward_ptrs` and :meth:`backward_ptrs`.

    Args:
        name: the operator's name.
        library_path: the shared library built from a source ending with ``D500_REGISTER_OP``.
        input_descriptors: input descriptors (concrete shapes).
        output_descriptors: output descriptors (concrete shapes).
        source_hash: the build's cache key (set by the compiler functions).
        from_cache: whether the library came from the build cache.

    Attributes:
        name: the operator's name.
        library_path: the loaded shared library.
        source_hash: SHA-256 of source, header, flags and compiler version (the cache key).
        from_cache: True when the library was found in the cache and nothing was compiled.
        compiled_with_cuda: whether the library was built by nvcc (and holds the CUDA runtime).
        has_backward: whether the class has a ``backward`` member.
    """

    def __init__(self, name: str, library_path, input_descriptors: Sequence[TensorDescriptor],
                 output_descriptors: Sequence[TensorDescriptor], *, source_hash: str | None = None,
                 from_cache: bool = False):
        self._handle = None
        inputs, outputs = check_descriptors(name, input_descriptors, output_descriptors)
        super().__init__(inputs, outputs)
        self.name = name
        self.library_path = os.fspath(library_path)
        self.source_hash = source_hash
        self.from_cache = from_cache
        self.source_path = None
        self.build_log = ""
        self.compile_command = None
        self._n_in, self._n_out = len(inputs), len(outputs)
        self._in_nonempty = [int(np.prod(d.shape)) > 0 for d in inputs]
        self._out_nonempty = [int(np.prod(d.shape)) > 0 for d in outputs]
        n_fwd, n_bwd = self._n_in + self._n_out, 2 * (self._n_in + self._n_out)
        self._ptr_types = [ctypes.c_void_p * max(n, 1) for n in (n_fwd, n_bwd, n_fwd, n_bwd)]
        self._lib = ctypes.CDLL(os.path.abspath(self.library_path))
        self._bind_entry_points()
        self._create()
        self._signatures = {m: self._check_signature(m) for m in range(4)}
        self.has_backward = self._signatures[_BACKWARD] is not None
        self._supports_cuda = bool(self._d5_supports_cuda(self._handle))
        self._cuda_devices = None

    # -- setup --------------------------------------------------------------------------------

    def _bind_entry_points(self):
        lib, vp, ci = self._lib, ctypes.c_void_p, ctypes.c_int
        try:
            version = _bind(lib, "d5_abi_version", ci, [])()
        except AttributeError:
            raise UserError(
                f"The library of C++ operator '{self.name}' has no deep500lite entry points: "
                "the source must include <deep500lite/deep500lite.h> and end with D500_REGISTER_OP(MyOp<DTYPE>). "
                f"Received: {self.library_path}"
            ) from None
        if version != ABI_VERSION or _bind(lib, "d5_tensor_struct_size", ci, [])() != ctypes.sizeof(_TensorT):
            raise UserError(
                f"The library of C++ operator '{self.name}' ({self.library_path}) was built against another "
                f"deep500lite header; this deep500lite expects ABI {ABI_VERSION}, so rebuild it. "
                f"Received: ABI {version}"
            )
        self._last_error = _bind(lib, "d5_last_error", ctypes.c_char_p, [])
        self._d5_create = _bind(lib, "d5_create", ci, [ctypes.POINTER(_TensorT), ci, ctypes.POINTER(_TensorT), ci,
                                                      ctypes.POINTER(vp)])
        self._d5_delete = _bind(lib, "d5_delete_op", ci, [vp])
        self._members = [_bind(lib, f"d5_{m}", ci, [vp, ctypes.POINTER(vp), ci]) for m in _MEMBER_NAMES]
        self._d5_signature = _bind(lib, "d5_signature", ci, [ci, ctypes.POINTER(ci), ci])
        self._d5_supports_cuda = _bind(lib, "d5_supports_cuda", ci, [vp])
        self._d5_report = _bind(lib, "d5_report", ci, [vp, vp, ctypes.POINTER(ctypes.c_int64)])
        self.compiled_with_cuda = bool(_bind(lib, "d5_compiled_with_cuda", ci, [])())
        self._d5_device_count = _bind(lib, "d5_cuda_device_count", ci, [ctypes.POINTER(ci)])
        if self.compiled_with_cuda:
            self._cuda_malloc = _bind(lib, "d5_cuda_malloc", ci, [ctypes.POINTER(vp), ctypes.c_size_t])
            self._cuda_free = _bind(lib, "d5_cuda_free", ci, [vp])
            self._cuda_memcpy = _bind(lib, "d5_cuda_memcpy", ci, [vp, vp, ctypes.c_size_t, ci])
            self._cuda_sync = _bind(lib, "d5_cuda_synchronize", ci, [])

    def _create(self):
        def descs(ds):
            arr = (_TensorT * max(len(ds), 1))()
            for t, d in zip(arr, ds):
                t.dims = len(d.shape)
                for i, s in enumerate(d.shape):
                    t.sizes[i] = s
                t.type = _DTYPE_CODES.get(d.dtype, 0)
            return arr

        self._in_descs, self._out_descs = descs(self.input_descriptors), descs(self.output_descriptors)
        handle = ctypes.c_void_p()
        rc = self._d5_create(self._in_descs, self._n_in, self._out_descs, self._n_out, ctypes.byref(handle))
        if rc != _OK:
            raise self._error(rc, "create_new_op")
        self._handle = handle

    def _check_signature(self, member: int):
        codes = (ctypes.c_int * 512)()
        arity = self._d5_signature(member, codes, len(codes))
        if arity < 0:
            return None
        ins, outs = self.input_descriptors, self.output_descriptors
        if member in (_FORWARD, _FORWARD_CUDA):
            roles = [(f"input {i}", d) for i, d in enumerate(ins)] + [(f"output {i}", d) for i, d in enumerate(outs)]
            order = "inputs, then outputs"
        else:
            roles = ([(f"gradient of output {i}", d) for i, d in enumerate(outs)]
                     + [(f"forward input {i}", d) for i, d in enumerate(ins)]
                     + [(f"forward output {i}", d) for i, d in enumerate(outs)]
                     + [(f"gradient of input {i}", d) for i, d in enumerate(ins)])
            order = "output gradients, forward inputs, forward outputs, input gradients"
        mname = _MEMBER_NAMES[member]
        if arity != len(roles):
            raise UserError(
                f"C++ operator '{self.name}': {mname}() takes {arity} pointer arguments, but the descriptors "
                f"({self._n_in} inputs, {self._n_out} outputs) need {len(roles)} ({order}). Make the member's "
                f"arguments match the descriptors, or change the descriptors. Received: {arity} pointer arguments"
            )
        for pos, (role, d) in enumerate(roles):
            if arity <= len(codes) and not _compatible(codes[pos], d.dtype):
                raise UserError(
                    f"C++ operator '{self.name}': argument {pos} of {mname}() ({role}) is a {_CODES[codes[pos]][2]} "
                    f"pointer, but that tensor is {d.dtype.name}. Compile with DTYPE matching the descriptors, "
                    f"or change the descriptors. Received: a {_CODES[codes[pos]][2]} pointer for a {d.dtype.name} "
                    "tensor"
                )
        return arity

    # -- errors -------------------------------------------------------------------------------

    def _error(self, rc: int, member: str) -> Exception:
        raw = self._last_error()
        detail = raw.decode("utf-8", "replace") if raw else f"status {rc}"
        message = f"C++ operator '{self.name}': {detail}"
        if rc == _ERR_NOT_IMPLEMENTED:
            return NotImplementedError(message)
        if rc in (_ERR_ARITY, _ERR_NULL) and member != "create_new_op":
            return UserError(message)
        return CppOpError(message, op_name=self.name, member=member)

    def _live_handle(self):
        if self._handle is None:
            raise UserError(f"C++ operator '{self.name}' was closed; compile or load it again.")
        return self._handle

    # -- queries ------------------------------------------------------------------------------

    def supports_cuda(self) -> bool:
        """Whether the class has CUDA members (``forward_cuda``) and does not turn them off."""
        return self._supports_cuda

    def supports_dtype(self, dtype) -> bool:
        """Whether the operator runs on ``dtype``: only the dtype it was compiled for.

        That is the dtype of the first input descriptor (of the first output when there are no inputs),
        the one ``DTYPE`` defaults to.
        """
        first = (self.input_descriptors or self.output_descriptors)
        return bool(first) and np.dtype(dtype) == first[0].dtype

    def cuda_device_count(self) -> int:
        """The number of CUDA devices the library's CUDA runtime sees (0 without a GPU or driver).

        Raises:
            UserError: the library was not built with ``is_cuda=True``.
        """
        if not self.compiled_with_cuda:
            raise UserError(f"C++ operator '{self.name}' was not compiled with is_cuda=True; it holds no CUDA runtime. "
                            "Compile it with is_cuda=True to use CUDA. Received: a library compiled without CUDA")
        count = ctypes.c_int(0)
        self._d5_device_count(ctypes.byref(count))
        return int(count.value)

    def report(self) -> int:
        """The value of the operator's ``report(nullptr)`` (Deep500's reporting hook; 0 by default)."""
        result = ctypes.c_int64(0)
        rc = self._d5_report(self._live_handle(), None, ctypes.byref(result))
        if rc != _OK:
            raise self._error(rc, "report")
        return int(result.value)

    def _require(self, member: int):
        if self._signatures[member] is None:
            raise NotImplementedError(
                f"C++ operator '{self.name}' has no {_MEMBER_NAMES[member]}() member function."
            )
        if member in (_FORWARD_CUDA, _BACKWARD_CUDA):
            if not self._supports_cuda:
                raise NotImplementedError(
                    f"C++ operator '{self.name}' does not support CUDA (supports_cuda() is false)."
                )
            if self.compiled_with_cuda:
                if self._cuda_devices is None:
                    count = ctypes.c_int(0)
                    rc = self._d5_device_count(ctypes.byref(count))
                    if rc != _OK or count.value == 0:
                        why = self._last_error().decode("utf-8", "replace") if rc != _OK else "no device found"
                        raise DeviceError(
                            f"C++ operator '{self.name}': {_MEMBER_NAMES[member]} needs a CUDA GPU, and the CUDA "
                            f"runtime sees none ({why}); call the CPU member or run where a GPU is visible. "
                            f"Received: {count.value} CUDA devices"
                        )
                    self._cuda_devices = int(count.value)

    # -- calls --------------------------------------------------------------------------------

    def _call(self, member: int, addresses: list[int]):
        n = len(addresses)
        ptrs = self._ptr_types[member](*addresses)
        rc = self._members[member](self._live_handle(), ptrs, n)
        if rc != _OK:
            raise self._error(rc, _MEMBER_NAMES[member])

    def _arrays(self, values, descs, role: str) -> list[np.ndarray]:
        out = []
        for i, (x, d) in enumerate(zip(values, descs)):
            a = x if type(x) is np.ndarray else np.asarray(x)
            if a.shape != d.shape:
                raise UserError(
                    f"C++ operator '{self.name}' {role} {i} must have shape {list(d.shape)} ({d}). "
                    f"Received: shape {list(a.shape)}"
                )
            if a.dtype != d.dtype:
                if not np.can_cast(a.dtype, d.dtype, "same_kind"):
                    raise UserTypeError(
                        f"C++ operator '{self.name}' {role} {i} must be {d.dtype.name} (or castable to it). "
                        f"Received: {a.dtype.name}"
                    )
                a = a.astype(d.dtype, order="C")
            elif not a.flags.c_contiguous:
                a = np.ascontiguousarray(a)
            out.append(a)
        return out

    def _seq(self, values, n: int, what: str):
        if type(values) is not list and type(values) is not tuple:
            values = [values] if isinstance(values, np.ndarray) or np.isscalar(values) else list(values)
        if len(values) != n:
            raise UserError(f"C++ operator '{self.name}' takes {n} {what}. Received: {len(values)}")
        return values

    def _pointers(self, values, nonempty: list[bool], what: str) -> list[int]:
        values = self._seq(values, len(nonempty), what)
        out = []
        for i, p in enumerate(values):
            if type(p) is not int:
                try:
                    p = operator.index(p)
                except TypeError:
                    raise UserTypeError(f"C++ operator '{self.name}': {what} {i} must be an integer address. "
                                        f"Received: {p!r}") from None
            if p <= 0 and (p < 0 or nonempty[i]):
                raise UserError(f"C++ operator '{self.name}': {what} {i} must be a valid non-NULL address. "
                                f"Received: {p}")
            out.append(p)
        return out

    @staticmethod
    def _result(arrays):
        return arrays[0] if len(arrays) == 1 else tuple(arrays)

    def forward(self, *inputs):
        """Run the C++ ``forward`` member on numpy arrays.

        Args:
            *inputs: one array per input descriptor, with its shape; arrays of another dtype of the same
                kind are converted (and every array is made C-contiguous).

        Returns:
            The output array, or a tuple of them (one per output descriptor).
        """
        self._require(_FORWARD)
        arrays = self._arrays(self._seq(inputs, self._n_in, "inputs"), self.input_descriptors, "input")
        outs = [np.empty(d.shape, d.dtype) for d in self.output_descriptors]
        self._call(_FORWARD, [a.ctypes.data for a in arrays + outs])
        return self._result(outs)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        """Run the C++ ``backward`` member on numpy arrays.

        Args:
            grads: the gradient of each output (a single array when there is one output).
            fwd_inputs: the inputs of the forward call.
            fwd_outputs: the outputs of the forward call.

        Returns:
            The gradient of each input: an array, or a tuple of them.
        """
        self._require(_BACKWARD)
        arrays = self._backward_arrays(grads, fwd_inputs, fwd_outputs)
        grad_ins = [np.empty(d.shape, d.dtype) for d in self.input_descriptors]
        self._call(_BACKWARD, [a.ctypes.data for a in arrays + grad_ins])
        return self._result(grad_ins)

    def _backward_arrays(self, grads, fwd_inputs, fwd_outputs):
        ins, outs = self.input_descriptors, self.output_descriptors
        return (self._arrays(self._seq(grads, self._n_out, "output gradients"), outs, "output gradient")
                + self._arrays(self._seq(fwd_inputs, self._n_in, "forward inputs"), ins, "forward input")
                + self._arrays(self._seq(fwd_outputs, self._n_out, "forward outputs"), outs, "forward output"))

    def forward_ptrs(self, input_ptrs: Sequence[int], output_ptrs: Sequence[int], cuda: bool = False) -> None:
        """Run ``forward`` (or ``forward_cuda``) on raw buffers, without copies.

        Each address must point to a C-contiguous buffer of its descriptor's shape and dtype (device
        memory when ``cuda``). Nothing checks the buffers themselves: this is the path frameworks use.
        With ``cuda=True`` on a library built by nvcc, the call is refused when the CUDA runtime sees no
        GPU. The CUDA members run on the default stream and are not synchronized.

        Args:
            input_ptrs: one address (int) per input.
            output_ptrs: one address per output.
            cuda: call the CUDA member.

        Raises:
            NotImplementedError: the class lacks the member.
            DeviceError: ``cuda`` and no CUDA device.
            CppOpError: the member threw a C++ exception or a kernel launch failed.
        """
        member = _FORWARD_CUDA if cuda else _FORWARD
        self._require(member)
        addresses = (self._pointers(input_ptrs, self.input_descriptors, "input pointers")
                     + self._pointers(output_ptrs, self.output_descriptors, "output pointers"))
        self._call(member, addresses)

    def backward_ptrs(self, grad_ptrs: Sequence[int], input_ptrs: Sequence[int], output_ptrs: Sequence[int],
                      grad_input_ptrs: Sequence[int], cuda: bool = False) -> None:
        """Run ``backward`` (or ``backward_cuda``) on raw buffers; see :meth:`forward_ptrs`.

        Args:
            grad_ptrs: addresses of the output gradients.
            input_ptrs: addresses of the forward inputs.
            output_ptrs: addresses of the forward outputs.
            grad_input_ptrs: addresses where the input gradients are written.
            cuda: call the CUDA member.
        """
        member = _BACKWARD_CUDA if cuda else _BACKWARD
        self._require(member)
        ins, outs = self._in_nonempty, self._out_nonempty
        addresses = (self._pointers(grad_ptrs, outs, "output gradient pointers")
                     + self._pointers(input_ptrs, ins, "input pointers")
                     + self._pointers(output_ptrs, outs, "output pointers")
                     + self._pointers(grad_input_ptrs, ins, "input gradient pointers"))
        self._call(member, addresses)

    def forward_cuda(self, *inputs):
        """Run ``forward_cuda`` on numpy arrays: copy to the GPU, run, synchronize, copy back.

        Needs a library built with ``is_cuda=True`` and a CUDA GPU.

        Returns:
            The output array, or a tuple of them.
        """
        self._require(_FORWARD_CUDA)
        arrays = self._arrays(self._seq(inputs, self._n_in, "inputs"), self.input_descriptors, "input")
        outs = [np.empty(d.shape, d.dtype) for d in self.output_descriptors]
        self._run_on_device(_FORWARD_CUDA, arrays, outs)
        return self._result(outs)

    def backward_cuda(self, grads, fwd_inputs, fwd_outputs):
        """Run ``backward_cuda`` on numpy arrays (through device copies); see :meth:`forward_cuda`."""
        self._require(_BACKWARD_CUDA)
        arrays = self._backward_arrays(grads, fwd_inputs, fwd_outputs)
        grad_ins = [np.empty(d.shape, d.dtype) for d in self.input_descriptors]
        self._run_on_device(_BACKWARD_CUDA, arrays, grad_ins)
        return self._result(grad_ins)

    def _run_on_device(self, member: int, host_in: list, host_out: list):
        if not self.compiled_with_cuda:
            raise UserError(
                f"C++ operator '{self.name}': running {_MEMBER_NAMES[member]} on numpy arrays needs a library "
                "compiled with is_cuda=True (it uses the CUDA runtime linked into it); use the pointer interface. "
                "Received: a library compiled without CUDA"
            )

        def check(rc, what):
            if rc != _OK:
                raise self._error(rc, what)

        buffers = []
        try:
            for a in host_in + host_out:
                p = ctypes.c_void_p()
                check(self._cuda_malloc(ctypes.byref(p), a.nbytes), "cudaMalloc")
                buffers.append(p.value)
            for p, a in zip(buffers, host_in):
                check(self._cuda_memcpy(p, a.ctypes.data, a.nbytes, 1), "cudaMemcpy")
            self._call(member, buffers)
            check(self._cuda_sync(), _MEMBER_NAMES[member])
            for p, a in zip(buffers[len(host_in):], host_out):
                check(self._cuda_memcpy(a.ctypes.data, p, a.nbytes, 0), "cudaMemcpy")
        finally:
            for p in buffers:
                self._cuda_free(p)

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Delete the C++ object (the library stays loaded). Safe to call twice."""
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            self._d5_delete(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: ctypes may be gone already
            pass

    def __repr__(self) -> str:
        ins = ", ".join(str(d) for d in self.input_descriptors)
        outs = ", ".join(str(d) for d in self.output_descriptors)
        return f"CppOp({self.name!r}, ({ins}) -> ({outs}), library={self.library_path!r})"
