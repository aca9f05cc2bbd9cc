"""Level 0: custom operators written in C++ or CUDA.

A C++ operator is a class written against the header ``deep500lite/deep500lite.h`` (shipped in
``deep500lite/include``; see ``docs/custom-operators.md``). :func:`compile_custom_cppop` builds it
into a shared library with the system compiler (``$CXX``, else ``c++``/``g++``/``clang++``; ``nvcc``
for CUDA), and :class:`CppOp` loads that library with :mod:`ctypes` and runs it on numpy arrays or on
raw pointers.

How a build works:

1. The compiler is found and asked for its version (once per process).
2. The cache key is a SHA-256 of the source, the header, the flags (definitions included) and the
   compiler's version string. The library is ``<build_dir>/<name>-<key>.so``; when it exists, it is
   loaded without compiling anything.
3. Otherwise the compiler writes the library into a fresh temporary folder inside ``build_dir``,
   and ``os.replace`` moves it into place, so concurrent builds of the same operator are safe.

The build directory is ``build_dir`` when given, else ``$DEEP500LITE_CACHE``, else
``~/.cache/deep500lite/ops``. Deleting it clears the cache.

CUDA: ``is_cuda=True`` compiles with ``nvcc`` (no GPU needed to compile). The CUDA runtime is linked
into the library, and :class:`CppOp` asks it (``cudaGetDeviceCount``) before calling a CUDA member,
so calling one on a machine without a GPU raises :class:`~deep500lite.errors.DeviceError` instead
of crashing.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import operator
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from deep500lite.errors import CompilationError, CppOpError  # noqa: F401 - defined in errors, re-exported here
from deep500lite.errors import DeviceError, UserError
from deep500lite.lv0.operator import CustomOp
from deep500lite.lv0.tensordesc import TensorDescriptor
from deep500lite.utils import atomic_write_text

__all__ = [
    "CppOp",
    "CompilationError",
    "CppOpError",
    "compile_custom_cppop",
    "compile_custom_cppop_inline",
    "include_dir",
    "default_build_dir",
]

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
# The C++ type DTYPE is defined as when the caller does not define it (float16 has no standard one).
_CTYPE_NAMES = {
    np.dtype(np.int8): "int8_t", np.dtype(np.int16): "int16_t", np.dtype(np.int32): "int32_t",
    np.dtype(np.int64): "int64_t", np.dtype(np.uint8): "uint8_t", np.dtype(np.uint16): "uint16_t",
    np.dtype(np.uint32): "uint32_t", np.dtype(np.uint64): "uint64_t", np.dtype(np.float32): "float",
    np.dtype(np.float64): "double", np.dtype(np.bool_): "bool",
}


def include_dir() -> str:
    """The folder to pass as ``-I`` so that ``#include <deep500lite/deep500lite.h>`` works."""
    return str(Path(__file__).resolve().parent.parent / "include")


def default_build_dir() -> str:
    """Where compiled operators are cached: ``$DEEP500LITE_CACHE``, else ``~/.cache/deep500lite/ops``."""
    env = os.environ.get("DEEP500LITE_CACHE")
    if env:
        return os.path.abspath(os.path.expanduser(env))
    return os.path.join(os.path.expanduser("~"), ".cache", "deep500lite", "ops")


def _header_path() -> str:
    return os.path.join(include_dir(), "deep500lite", "deep500lite.h")


# --------------------------------------------------------------------------------------------
# Argument checks


def _check_name(name) -> str:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*", name):
        raise ValueError(
            "The operator name must be a non-empty string of letters, digits, '_', '.' and '-' "
            f"(it names the library file). Received: name={name!r}"
        )
    return name


def _check_descriptors(name: str, input_descs, output_descs) -> tuple[list, list]:
    result = []
    for what, descs in (("input", input_descs), ("output", output_descs)):
        if isinstance(descs, TensorDescriptor) or not isinstance(descs, Sequence) or isinstance(descs, str):
            raise TypeError(
                f"{what}_descs of C++ operator '{name}' must be a list of d5.tensordesc(dtype, shape) "
                f"values. Received: {descs!r}"
            )
        for i, d in enumerate(descs):
            if not isinstance(d, TensorDescriptor):
                raise TypeError(
                    f"{what} descriptor {i} of C++ operator '{name}' must be a d5.tensordesc(dtype, shape). "
                    f"Received: {d!r}"
                )
            if not d.is_static:
                raise ValueError(
                    f"{what} descriptor {i} of C++ operator '{name}' must have a concrete shape (C++ operators "
                    f"are created for one shape, e.g. d5.tensordesc(np.float32, [8, 3])). Received: {d}"
                )
            if len(d.shape) > MAX_DIMS:
                raise ValueError(
                    f"{what} descriptor {i} of C++ operator '{name}' has {len(d.shape)} dimensions; C++ operators "
                    f"allow at most D500_MAX_DIMS={MAX_DIMS}. Received: {d}"
                )
            if any(s > _INT_MAX for s in d.shape):
                raise ValueError(
                    f"{what} descriptor {i} of C++ operator '{name}' has a dimension above {_INT_MAX} "
                    f"(tensor_t sizes are int). Received: {d}"
                )
            if d.dtype.kind not in "biufc":
                raise TypeError(
                    f"{what} descriptor {i} of C++ operator '{name}' must have a numeric or bool dtype. "
                    f"Received: {d.dtype}"
                )
        result.append(list(descs))
    return result[0], result[1]


def _format_definitions(definitions) -> list[str]:
    if definitions is None:
        return []
    if not isinstance(definitions, Mapping):
        raise TypeError(
            "additional_definitions must be a dict of macro names to values, e.g. {'DTYPE': 'float'}. "
            f"Received: {definitions!r}"
        )
    flags = []
    for key, value in sorted(definitions.items(), key=lambda kv: str(kv[0])):
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"additional_definitions keys must be C identifiers. Received: {key!r}")
        if value is None:
            flags.append(f"-D{key}")
        elif isinstance(value, bool):
            flags.append(f"-D{key}={int(value)}")
        elif isinstance(value, (str, int, float, np.integer, np.floating)):
            flags.append(f"-D{key}={value}")
        else:
            raise TypeError(
                f"additional_definitions['{key}'] must be a str, int, float, bool or None. Received: {value!r}"
            )
    return flags


def _check_flags(extra_flags) -> list[str]:
    if isinstance(extra_flags, str) or not isinstance(extra_flags, Sequence) or not all(
            isinstance(f, str) for f in extra_flags):
        raise TypeError(f"extra_flags must be a list of strings, e.g. ['-march=native']. Received: {extra_flags!r}")
    return list(extra_flags)


# --------------------------------------------------------------------------------------------
# Compilers


@dataclasses.dataclass(frozen=True)
class _Compiler:
    argv: tuple[str, ...]
    is_nvcc: bool
    version: str


_lock = threading.Lock()
_VERSIONS: dict[tuple, str] = {}
_OPENMP: dict[tuple, bool] = {}


def _resolve_compiler(is_cuda: bool, compiler) -> _Compiler:
    if compiler is not None:
        if isinstance(compiler, str):
            argv = shlex.split(compiler)
        elif isinstance(compiler, Sequence) and all(isinstance(c, str) for c in compiler):
            argv = list(compiler)
        else:
            raise TypeError(f"compiler must be a command string or a list of strings. Received: {compiler!r}")
        if not argv:
            raise ValueError("compiler must not be empty. Received: compiler=''")
        origin = "compiler="
    elif is_cuda:
        candidates = ["nvcc"]
        for var in ("CUDA_HOME", "CUDA_PATH"):
            if os.environ.get(var):
                candidates.append(os.path.join(os.environ[var], "bin", "nvcc"))
        candidates.append("/usr/local/cuda/bin/nvcc")
        for c in candidates:
            if shutil.which(c):
                argv, origin = [c], "search"
                break
        else:
            raise UserError(
                "is_cuda=True needs the CUDA compiler nvcc, and none was found. Looked for: nvcc on PATH, "
                "$CUDA_HOME/bin/nvcc, $CUDA_PATH/bin/nvcc, /usr/local/cuda/bin/nvcc. Install the CUDA toolkit "
                "and put nvcc on PATH (or set CUDA_HOME), or pass compiler='/path/to/nvcc'."
            )
    elif os.environ.get("CXX"):
        argv, origin = shlex.split(os.environ["CXX"]), "$CXX"
    else:
        for c in ("c++", "g++", "clang++"):
            if shutil.which(c):
                argv, origin = [c], "search"
                break
        else:
            raise UserError(
                "No C++ compiler found to build a C++ operator. Looked for: $CXX (unset), c++, g++, clang++ on "
                "PATH. Install one (Debian/Ubuntu: apt install g++; conda: conda install gxx) or set CXX to the "
                "path of a C++17 compiler."
            )
    exe = shutil.which(argv[0])
    if exe is None:
        hint = ("install the CUDA toolkit and put nvcc on PATH" if is_cuda
                else "install g++ (Debian/Ubuntu: apt install g++) or set CXX to an installed C++17 compiler")
        source = "$CXX" if origin == "$CXX" else "compiler="
        raise UserError(f"The compiler {argv[0]!r} given by {source} was not found or is not executable: {hint}.")
    argv[0] = exe
    names_nvcc = any(os.path.basename(a).startswith("nvcc") for a in argv)
    if is_cuda and not names_nvcc:
        raise UserError(
            f"is_cuda=True compiles with nvcc, but compiler={compiler!r} is not nvcc. Pass compiler='nvcc' "
            "(or its path), or leave compiler unset to use the nvcc on PATH."
        )
    is_nvcc = is_cuda or names_nvcc
    return _Compiler(tuple(argv), is_nvcc, _compiler_version(argv))


def _compiler_version(argv: list[str]) -> str:
    stat = os.stat(argv[0])
    key = (tuple(argv), stat.st_mtime_ns, stat.st_size)
    with _lock:
        if key in _VERSIONS:
            return _VERSIONS[key]
    try:
        proc = subprocess.run([*argv, "--version"], capture_output=True, text=True, errors="replace", timeout=120)
    except OSError as exc:
        raise UserError(f"Could not run the compiler {shlex.join(argv)}: {exc}") from exc
    if proc.returncode != 0:
        raise UserError(
            f"'{shlex.join(argv)} --version' failed (exit {proc.returncode}); is it a C++ compiler? "
            f"Output: {(proc.stdout + proc.stderr).strip()[:500]}"
        )
    version = (proc.stdout + proc.stderr).strip()
    with _lock:
        _VERSIONS[key] = version
    return version


def _base_flags(comp: _Compiler) -> list[str]:
    if comp.is_nvcc:
        return ["-x", "cu", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", f"-I{include_dir()}"]
    return ["-x", "c++", "-O3", "-fPIC", "-shared", "-std=c++17", f"-I{include_dir()}"]


def _openmp_flags(comp: _Compiler) -> list[str]:
    return ["-Xcompiler", "-fopenmp"] if comp.is_nvcc else ["-fopenmp"]


def _link_flags(comp: _Compiler) -> list[str]:
    # Report an operator that never defines create_new_op at build time, not at load time.
    if not sys.platform.startswith("linux"):
        return []
    return ["-Xlinker", "--no-undefined"] if comp.is_nvcc else ["-Wl,--no-undefined"]


_OPENMP_PROBE = """
#include <omp.h>
extern "C" int d5_probe(int n) {
    int s = 0;
    #pragma omp parallel for reduction(+:s)
    for (int i = 0; i < n; ++i) s += i;
    return s + omp_get_max_threads() * 0;
}
"""


def _supports_openmp(comp: _Compiler, build_dir: str) -> bool:
    """Whether the compiler builds and links an OpenMP shared library (result cached on disk)."""
    key = hashlib.sha256(json.dumps([comp.argv, comp.version]).encode()).hexdigest()[:20]
    with _lock:
        if key in _OPENMP:
            return _OPENMP[key]
    marker = os.path.join(build_dir, f"openmp-{key}.txt")
    try:
        with open(marker, encoding="utf-8") as f:
            value = f.read().strip() == "1"
    except OSError:
        with tempfile.TemporaryDirectory(prefix=".probe-", dir=build_dir) as tmp:
            src = os.path.join(tmp, "probe.cu" if comp.is_nvcc else "probe.cpp")
            with open(src, "w", encoding="utf-8") as f:
                f.write(_OPENMP_PROBE)
            cmd = [*comp.argv, *_base_flags(comp), *_openmp_flags(comp), src, "-o",
                   os.path.join(tmp, "probe.so"), *_link_flags(comp)]
            proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
            value = proc.returncode == 0
        atomic_write_text(marker, "1\n" if value else "0\n")
    with _lock:
        _OPENMP[key] = value
    return value


# --------------------------------------------------------------------------------------------
# Build


_GCC_ERROR = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)?\s+(?:fatal\s+)?error:\s*(?P<msg>.*)$")
_NVCC_ERROR = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\):\s+(?:catastrophic\s+)?error:?\s*(?P<msg>.*)$")
_UNDEFINED = re.compile(r"undefined reference to [`'](?P<sym>[^'`]+)'")


def _compilation_error(name: str, source_path: str, cmd: list[str], output: str, is_cuda: bool) -> CompilationError:
    errors = []
    for raw in output.splitlines():
        m = _GCC_ERROR.match(raw) or _NVCC_ERROR.match(raw)
        if m:
            errors.append((m.group("file"), int(m.group("line")), m.group("msg").strip()))
    undefined = _UNDEFINED.findall(output)
    line = None
    if errors:
        file, lineno, msg = errors[0]
        summary = f"{file}:{lineno}: error: {msg}"
        same = [e for e in errors if _same_file(e[0], source_path)]
        line = same[0][1] if same else None
    elif undefined:
        summary = f"link error: undefined reference to '{undefined[0]}'"
    else:
        first = next((ln.strip() for ln in output.splitlines() if ln.strip()), "(no output)")
        summary = first
    parts = [f"Compiling C++ operator '{name}' from {source_path} failed: {summary}"]
    quoted = []
    for file, lineno, _ in errors:
        if (file, lineno) in quoted or len(quoted) >= 5:
            continue
        text = _source_line(file, lineno)
        if text is not None:
            quoted.append((file, lineno))
            parts.append(f"  {os.path.basename(file)}:{lineno} | {text}")
    if any("create_new_op" in s for s in undefined):
        parts.append("Hint: the source must define the factory D500_EXPORTED void *create_new_op("
                     "deep500lite::tensor_t *, int, deep500lite::tensor_t *, int).")
    if source_path.endswith(".cu") and not is_cuda:
        parts.append("Hint: this is a CUDA source (.cu): pass is_cuda=True to compile it with nvcc.")
    parts.append(f"Command: {shlex.join(cmd)}")
    parts.append("Compiler output:\n" + output.rstrip())
    return CompilationError("\n".join(parts), source_path=source_path, line=line, command=cmd,
                            compiler_output=output)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.basename(a) == os.path.basename(b)


def _source_line(file: str, lineno: int) -> str | None:
    try:
        with open(file, encoding="utf-8", errors="replace") as f:
            for i, text in enumerate(f, 1):
                if i == lineno:
                    return text.rstrip("\n")
    except OSError:
        return None
    return None


def _build(name: str, source_path: str, flags: list[str], comp: _Compiler, build_dir: str,
           is_cuda: bool, force: bool = False) -> tuple[str, str, bool, str]:
    """Compile (or find in the cache) and return (library path, key, from_cache, compiler output)."""
    with open(source_path, "rb") as f:
        source = f.read()
    with open(_header_path(), "rb") as f:
        header = f.read()
    key = hashlib.sha256(json.dumps({
        "abi": ABI_VERSION,
        "source": hashlib.sha256(source).hexdigest(),
        "header": hashlib.sha256(header).hexdigest(),
        "compiler": list(comp.argv),
        "version": comp.version,
        "flags": flags,
    }, sort_keys=True).encode()).hexdigest()
    library = os.path.join(build_dir, f"{name}-{key[:24]}.so")
    if os.path.exists(library) and not force:
        return library, key, True, ""
    with tempfile.TemporaryDirectory(prefix=f".build-{name}-", dir=build_dir) as tmp:
        out = os.path.join(tmp, os.path.basename(library))
        cmd = [*comp.argv, *flags, source_path, "-o", out, *_link_flags(comp)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        except OSError as exc:
            raise UserError(f"Could not run the compiler {comp.argv[0]}: {exc}") from exc
        output = proc.stdout + proc.stderr
        if proc.returncode != 0 or not os.path.exists(out):
            raise _compilation_error(name, source_path, cmd, output, is_cuda)
        os.replace(out, library)
    return library, key, False, output


def compile_custom_cppop(name: str, path, input_descs: Sequence[TensorDescriptor],
                         output_descs: Sequence[TensorDescriptor], additional_definitions: Mapping = {},
                         is_cuda: bool = False, compiler=None, extra_flags: Sequence[str] = (),
                         build_dir=None) -> "CppOp":
    """Compile a C++ (or CUDA) operator source file and load it as an operator.

    The build runs ``<compiler> -O3 -fPIC -shared -std=c++17 -I<deep500lite include> [-fopenmp]
    -D<definitions> <extra_flags> <path>``; OpenMP is added when a one-time probe shows the
    compiler supports it. ``DTYPE`` is defined as the C++ type of the first input descriptor
    (``float`` for float32, ``double`` for float64, ...) unless ``additional_definitions`` defines it.

    Args:
        name: the operator's name (letters, digits, ``_.-``); it names the library file.
        path: the ``.cpp`` (or ``.cu``) file.
        input_descs: one ``d5.tensordesc(dtype, shape)`` per input, with concrete shapes.
        output_descs: one descriptor per output, with concrete shapes.
        additional_definitions: macros to define, e.g. ``{"DTYPE": "float", "BETA": 2}`` (the dict
            is not modified).
        is_cuda: compile with ``nvcc`` (the source may contain kernels, compiled as CUDA whatever its
            extension).
        compiler: the compiler command (overrides ``$CXX`` and the search).
        extra_flags: more compiler flags, e.g. ``["-march=native"]`` or ``["-arch=sm_90"]``.
        build_dir: the cache folder (default: ``$DEEP500LITE_CACHE`` or ``~/.cache/deep500lite/ops``).

    Returns:
        A :class:`CppOp`.

    Raises:
        UserError: the file is missing or no compiler was found (the message says what was looked for).
        CompilationError: the compiler rejected the source (the message quotes the error and the line).
        ValueError, TypeError: bad descriptors (e.g. a ``None`` dimension) or arguments.
        CppOpError: ``create_new_op`` threw a C++ exception.

    Example:
        >>> op = d5.compile_custom_cppop("swish", "swish.cpp", [d5.tensordesc(np.float32, [1024])],
        ...                              [d5.tensordesc(np.float32, [1024])])
        >>> y = op.forward(np.ones(1024, np.float32))
    """
    name = _check_name(name)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be the path of a .cpp or .cu file. Received: {path!r}")
    source_path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(source_path):
        raise UserError(
            f"The source file of C++ operator '{name}' was not found: {source_path} "
            f"(given as {os.fspath(path)!r}, relative to {os.getcwd()})."
        )
    inputs, outputs = _check_descriptors(name, input_descs, output_descs)
    if additional_definitions is not None and not isinstance(additional_definitions, Mapping):
        _format_definitions(additional_definitions)  # raises the TypeError
    definitions = dict(additional_definitions or {})
    first = (inputs or outputs or [None])[0]
    if "DTYPE" not in definitions and first is not None and first.dtype in _CTYPE_NAMES:
        definitions["DTYPE"] = _CTYPE_NAMES[first.dtype]
    define_flags = _format_definitions(definitions)
    extra = _check_flags(extra_flags)
    if not isinstance(is_cuda, (bool, np.bool_)):
        raise TypeError(f"is_cuda must be True or False. Received: {is_cuda!r}")
    comp = _resolve_compiler(bool(is_cuda), compiler)
    folder = os.path.abspath(os.fspath(build_dir)) if build_dir is not None else default_build_dir()
    os.makedirs(folder, exist_ok=True)
    flags = _base_flags(comp)
    if _supports_openmp(comp, folder):
        flags += _openmp_flags(comp)
    flags += define_flags + extra
    library, key, cached, log = _build(name, source_path, flags, comp, folder, bool(is_cuda))
    try:
        op = CppOp(name, library, inputs, outputs, source_hash=key, from_cache=cached)
    except OSError:
        if not cached:
            raise
        # A cached library that no longer loads (e.g. truncated by a full disk): build it again.
        library, key, cached, log = _build(name, source_path, flags, comp, folder, bool(is_cuda), force=True)
        op = CppOp(name, library, inputs, outputs, source_hash=key, from_cache=False)
    op.source_path = source_path
    op.build_log = log
    op.compile_command = [*comp.argv, *flags, source_path]
    return op


def compile_custom_cppop_inline(name: str, source: str, input_descs: Sequence[TensorDescriptor],
                                output_descs: Sequence[TensorDescriptor], additional_definitions: Mapping = {},
                                is_cuda: bool = False, compiler=None, extra_flags: Sequence[str] = (),
                                build_dir=None) -> "CppOp":
    """Compile C++ (or CUDA) source code given as a string; see :func:`compile_custom_cppop`.

    The code is written to ``<build_dir>/src/<name>-<hash>.cpp`` (``.cu`` when ``is_cuda``), the
    file that compiler messages refer to.

    Args:
        name: the operator's name.
        source: the C++ source code.
        input_descs: input descriptors, with concrete shapes.
        output_descs: output descriptors, with concrete shapes.
        additional_definitions: macros to define (not modified).
        is_cuda: compile with ``nvcc``.
        compiler: the compiler command.
        extra_flags: more compiler flags.
        build_dir: the cache folder.

    Returns:
        A :class:`CppOp`.
    """
    name = _check_name(name)
    if not isinstance(source, str) or not source.strip():
        raise TypeError(f"source must be a non-empty string of C++ code. Received: {source!r:.80}")
    folder = os.path.abspath(os.fspath(build_dir)) if build_dir is not None else default_build_dir()
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]
    path = os.path.join(folder, "src", f"{name}-{digest}.{'cu' if is_cuda else 'cpp'}")
    if not os.path.exists(path):
        atomic_write_text(path, source)
    return compile_custom_cppop(name, path, input_descs, output_descs, additional_definitions, is_cuda=is_cuda,
                                compiler=compiler, extra_flags=extra_flags, build_dir=folder)


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
        inputs, outputs = _check_descriptors(name, input_descriptors, output_descriptors)
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
                f"The library of C++ operator '{self.name}' ({self.library_path}) has no deep500lite entry points: "
                "the source must include <deep500lite/deep500lite.h> and end with D500_REGISTER_OP(MyOp<DTYPE>)."
            ) from None
        if version != ABI_VERSION or _bind(lib, "d5_tensor_struct_size", ci, [])() != ctypes.sizeof(_TensorT):
            raise UserError(
                f"The library of C++ operator '{self.name}' ({self.library_path}) was built against another "
                f"deep500lite header (ABI {version}, this deep500lite expects {ABI_VERSION}); rebuild it."
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
                f"({self._n_in} inputs, {self._n_out} outputs) need {len(roles)} ({order})."
            )
        for pos, (role, d) in enumerate(roles):
            if arity <= len(codes) and not _compatible(codes[pos], d.dtype):
                raise UserError(
                    f"C++ operator '{self.name}': argument {pos} of {mname}() ({role}) is a {_CODES[codes[pos]][2]} "
                    f"pointer, but that tensor is {d.dtype.name}. Compile with DTYPE matching the descriptors, "
                    "or change the descriptors."
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
            return ValueError(message)
        return CppOpError(message, op_name=self.name, member=member)

    def _live_handle(self):
        if self._handle is None:
            raise ValueError(f"C++ operator '{self.name}' was closed; compile or load it again.")
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
            raise UserError(f"C++ operator '{self.name}' was not compiled with is_cuda=True; it holds no CUDA runtime.")
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
                            f"runtime sees none ({why})."
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
                raise ValueError(
                    f"C++ operator '{self.name}' {role} {i} must have shape {list(d.shape)} ({d}). "
                    f"Received: shape {list(a.shape)}"
                )
            if a.dtype != d.dtype:
                if not np.can_cast(a.dtype, d.dtype, "same_kind"):
                    raise TypeError(
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
            raise ValueError(f"C++ operator '{self.name}' takes {n} {what}. Received: {len(values)}")
        return values

    def _pointers(self, values, nonempty: list[bool], what: str) -> list[int]:
        values = self._seq(values, len(nonempty), what)
        out = []
        for i, p in enumerate(values):
            if type(p) is not int:
                try:
                    p = operator.index(p)
                except TypeError:
                    raise TypeError(f"C++ operator '{self.name}': {what} {i} must be an integer address. "
                                    f"Received: {p!r}") from None
            if p <= 0 and (p < 0 or nonempty[i]):
                raise ValueError(f"C++ operator '{self.name}': {what} {i} must be a valid non-NULL address. "
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
                "compiled with is_cuda=True (it uses the CUDA runtime linked into it); use the pointer interface."
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
