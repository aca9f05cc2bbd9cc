"""Level 0: building C++ and CUDA operators: compiler discovery, flags, compilation and the build cache.

A C++ operator is a class written against the header ``deep500lite/deep500lite.h`` (shipped in
``deep500lite/include``; see ``docs/custom-operators.md``). :func:`compile_custom_cppop` builds it
into a shared library with the system compiler (``$CXX``, else ``c++``/``g++``/``clang++``; ``nvcc``
for CUDA) and loads it as a :class:`~deep500lite.lv0.cppop.op.CppOp`.

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
into the library.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
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

from deep500lite.errors import CompilationError, UserError, UserTypeError
from deep500lite.lv0.cppop.op import ABI_VERSION, CppOp, check_descriptors
from deep500lite.lv0.tensordesc import TensorDescriptor
from deep500lite.utils import atomic_write_text, file_stem

__all__ = ["compile_custom_cppop", "compile_custom_cppop_inline", "include_dir", "default_build_dir"]

# The C++ type DTYPE is defined as when the caller does not define it (float16 has no standard one).
_CTYPE_NAMES = {
    np.dtype(np.int8): "int8_t", np.dtype(np.int16): "int16_t", np.dtype(np.int32): "int32_t",
    np.dtype(np.int64): "int64_t", np.dtype(np.uint8): "uint8_t", np.dtype(np.uint16): "uint16_t",
    np.dtype(np.uint32): "uint32_t", np.dtype(np.uint64): "uint64_t", np.dtype(np.float32): "float",
    np.dtype(np.float64): "double", np.dtype(np.bool_): "bool",
}


def include_dir() -> str:
    """The folder to pass as ``-I`` so that ``#include <deep500lite/deep500lite.h>`` works."""
    return str(Path(__file__).resolve().parent.parent.parent / "include")


def default_build_dir() -> str:
    """Where compiled operators are cached: ``$DEEP500LITE_CACHE``, else ``~/.cache/deep500lite/ops``."""
    env = os.environ.get("DEEP500LITE_CACHE")
    if env:
        return os.path.abspath(os.path.expanduser(env))
    return os.path.join(os.path.expanduser("~"), ".cache", "deep500lite", "ops")


def _header_path() -> str:
    return os.path.join(include_dir(), "deep500lite", "deep500lite.h")


def _alias_header_path() -> str:
    # Deep500's include path, <deep500/deep500.h>, which includes the header above.
    return os.path.join(include_dir(), "deep500", "deep500.h")


# --------------------------------------------------------------------------------------------
# Argument checks


def _check_name(name) -> str:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*", name):
        raise UserError(
            "The operator name must be a non-empty string of letters, digits, '_', '.' and '-' "
            f"(it names the library file). Received: name={name!r}"
        )
    return name



def _format_definitions(definitions) -> list[str]:
    if definitions is None:
        return []
    if not isinstance(definitions, Mapping):
        raise UserTypeError(
            "additional_definitions must be a dict of macro names to values, e.g. {'DTYPE': 'float'}. "
            f"Received: {definitions!r}"
        )
    flags = []
    for key, value in sorted(definitions.items(), key=lambda kv: str(kv[0])):
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise UserError("additional_definitions keys must be C identifiers (letters, digits and '_', not starting "
                            f"with a digit). Received: {key!r}")
        if value is None:
            flags.append(f"-D{key}")
        elif isinstance(value, bool):
            flags.append(f"-D{key}={int(value)}")
        elif isinstance(value, (str, int, float, np.integer, np.floating)):
            flags.append(f"-D{key}={value}")
        else:
            raise UserTypeError(
                f"additional_definitions['{key}'] must be a str, int, float, bool or None. Received: {value!r}"
            )
    return flags


def _check_flags(extra_flags) -> list[str]:
    if isinstance(extra_flags, str) or not isinstance(extra_flags, Sequence) or not all(
            isinstance(f, str) for f in extra_flags):
        raise UserTypeError("extra_flags must be a list of strings, e.g. ['-march=native']. "
                            f"Received: {extra_flags!r}")
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
            raise UserTypeError(f"compiler must be a command string or a list of strings. Received: {compiler!r}")
        if not argv:
            raise UserError("compiler must not be empty: give a command such as 'g++' or ['clang++', '-v']. "
                            f"Received: compiler={compiler!r}")
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
                "and put nvcc on PATH (or set CUDA_HOME), or pass compiler='/path/to/nvcc'. "
                "Received: compiler=None, is_cuda=True"
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
                "path of a C++17 compiler. Received: compiler=None, CXX unset"
            )
    exe = shutil.which(argv[0])
    if exe is None:
        hint = ("install the CUDA toolkit and put nvcc on PATH" if is_cuda
                else "install g++ (Debian/Ubuntu: apt install g++) or set CXX to an installed C++17 compiler")
        source = "$CXX" if origin == "$CXX" else "compiler="
        given = f"CXX={os.environ['CXX']!r}" if origin == "$CXX" else f"compiler={compiler!r}"
        raise UserError(f"The compiler {argv[0]!r} given by {source} was not found or is not executable: {hint}. "
                        f"Received: {given}")
    argv[0] = exe
    names_nvcc = any(os.path.basename(a).startswith("nvcc") for a in argv)
    if is_cuda and not names_nvcc:
        raise UserError(
            "is_cuda=True compiles with nvcc, but the given compiler is not nvcc. Pass compiler='nvcc' "
            f"(or its path), or leave compiler unset to use the nvcc on PATH. Received: compiler={compiler!r}"
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
        raise UserError(f"Could not run the compiler ({exc}); give an executable C++ compiler (compiler= or $CXX). "
                        f"Received: {shlex.join(argv)}") from exc
    if proc.returncode != 0:
        raise UserError(
            f"'{shlex.join(argv)} --version' failed (exit {proc.returncode}); is it a C++ compiler? Give a C++17 "
            f"compiler (compiler= or $CXX). Received: {shlex.join(argv)}, which printed: "
            f"{(proc.stdout + proc.stderr).strip()[:500]}"
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


def _file_digest(path: str) -> str:
    from deep500lite.input_files import read_input_bytes

    return hashlib.sha256(read_input_bytes(path, "C++ operator source file", limit=256 * 2**20)).hexdigest()


def _run_compiler(cmd: list[str], live_output: bool) -> tuple[int, str]:
    """Run the compiler; with ``live_output`` its output is printed line by line as it comes."""
    if not live_output:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        return proc.returncode, proc.stdout + proc.stderr
    print(shlex.join(cmd), flush=True)
    lines = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line)
    return proc.returncode, "".join(lines)


def _build(name: str, source_path: str, flags: list[str], comp: _Compiler, build_dir: str,
           is_cuda: bool, force: bool = False, other_sources: Sequence[str] = (),
           live_output: bool = False) -> tuple[str, str, bool, str]:
    """Compile (or find in the cache) and return (library path, key, from_cache, compiler output)."""
    key = hashlib.sha256(json.dumps({
        "abi": ABI_VERSION,
        "source": _file_digest(source_path),
        "others": [[os.path.basename(p), _file_digest(p)] for p in other_sources],
        "header": _file_digest(_header_path()),
        "alias_header": _file_digest(_alias_header_path()),
        "compiler": list(comp.argv),
        "version": comp.version,
        "flags": flags,
    }, sort_keys=True).encode()).hexdigest()
    library = os.path.join(build_dir, f"{file_stem(name)}-{key[:24]}.so")
    if os.path.exists(library) and not force:
        if live_output:
            print(f"C++ operator '{name}': up to date, loaded from the build cache: {library}", flush=True)
        return library, key, True, ""
    with tempfile.TemporaryDirectory(prefix=f".build-{file_stem(name)}-", dir=build_dir) as tmp:
        out = os.path.join(tmp, os.path.basename(library))
        cmd = [*comp.argv, *flags, source_path, *other_sources, "-o", out, *_link_flags(comp)]
        try:
            returncode, output = _run_compiler(cmd, live_output)
        except OSError as exc:
            raise UserError(f"Could not run the compiler ({exc}); give an executable C++ compiler (compiler= or "
                            f"$CXX). Received: {comp.argv[0]}") from exc
        if returncode != 0 or not os.path.exists(out):
            raise _compilation_error(name, source_path, cmd, output, is_cuda)
        os.replace(out, library)
    return library, key, False, output


def _deep500_options(live_output, additional_cmake_options, rendered_wrapper=None) -> bool:
    """Check the options of Deep500's signature that have no CMake behind them here; return live_output."""
    if not isinstance(live_output, (bool, np.bool_)):
        raise UserTypeError(f"live_output must be True or False. Received: {live_output!r}")
    if additional_cmake_options:
        raise UserError(
            "additional_cmake_options has no effect in deep500lite, which calls the compiler directly instead of "
            "CMake: pass compiler flags as extra_flags=[...] and macros as additional_definitions={...}. "
            f"Received: additional_cmake_options={list(additional_cmake_options)!r}")
    if rendered_wrapper is not None:
        raise UserError(
            "rendered_wrapper is not supported: deep500lite needs no per-framework wrapper file, the same library "
            "runs on every framework (d5fw.custom_op(op)). Leave it None. "
            f"Received: rendered_wrapper={rendered_wrapper!r:.60}")
    return bool(live_output)


def _check_other_files(other_files) -> list[str]:
    if other_files is None:
        return []
    if isinstance(other_files, (str, os.PathLike)) or not isinstance(other_files, Sequence):
        raise UserTypeError("other_files must be a list of paths of .cpp/.cu files compiled into the same library. "
                            f"Received: {other_files!r}")
    paths = []
    for f in other_files:
        if not isinstance(f, (str, os.PathLike)):
            raise UserTypeError(f"other_files must contain paths. Received: {f!r}")
        path = os.path.abspath(os.fspath(f))
        if not os.path.isfile(path):
            raise UserError(f"A file in other_files was not found: {path}; give existing .cpp or .cu files "
                            f"(relative paths start at {os.getcwd()}). Received: {os.fspath(f)!r}")
        paths.append(path)
    return paths


def _is_positional_list(value) -> bool:
    return isinstance(value, (list, tuple)) and not isinstance(value, Mapping)


def compile_custom_cppop(name: str, path, input_descs: Sequence[TensorDescriptor],
                         output_descs: Sequence[TensorDescriptor], additional_definitions: Mapping = {},
                         is_cuda: bool | None = None, compiler=None, extra_flags: Sequence[str] = (),
                         build_dir=None, *, other_files: Sequence = (), live_output: bool = False,
                         additional_cmake_options: Sequence[str] = (), output_folder=None) -> "CppOp":
    """Compile a C++ (or CUDA) operator source file and load it as an operator.

    The build runs ``<compiler> -O3 -fPIC -shared -std=c++17 -I<deep500lite include> [-fopenmp]
    -D<definitions> <extra_flags> <path> <other_files>``; OpenMP is added when a one-time probe
    shows the compiler supports it. ``DTYPE`` is defined as the C++ type of the first input
    descriptor (``float`` for float32, ``double`` for float64, ...) unless
    ``additional_definitions`` defines it. Both ``#include <deep500lite/deep500lite.h>`` and
    Deep500's ``#include <deep500/deep500.h>`` (namespace ``deep500``) work.

    Deep500's signature, ``compile_custom_cppop(operator_name, main_file, input_tensors,
    output_tensors, other_files=[], live_output=False, additional_cmake_options=[],
    additional_definitions={}, output_folder='')``, is accepted too: by keyword, or positionally
    when the fifth argument is a list (``other_files``). Unlike Deep500, the operator is compiled
    here, not when a framework wraps it; ``d5fw.custom_op`` accepts the result either way.

    Args:
        name: the operator's name (letters, digits, ``_.-``); it names the library file.
        path: the ``.cpp`` (or ``.cu``) file.
        input_descs: one ``d5.tensordesc(dtype, shape)`` per input, with concrete shapes.
        output_descs: one descriptor per output, with concrete shapes.
        additional_definitions: macros to define, e.g. ``{"DTYPE": "float", "BETA": 2}`` (the dict
            is not modified).
        is_cuda: compile with ``nvcc`` (the source may contain kernels, compiled as CUDA whatever its
            extension). Default: True when ``path`` ends in ``.cu`` (as Deep500 decided).
        compiler: the compiler command (overrides ``$CXX`` and the search).
        extra_flags: more compiler flags, e.g. ``["-march=native"]`` or ``["-arch=sm_90"]``.
        build_dir: the cache folder (default: ``$DEEP500LITE_CACHE`` or ``~/.cache/deep500lite/ops``).
        other_files: more ``.cpp``/``.cu`` files compiled into the same library (Deep500).
        live_output: print the compiler command and its output as it compiles (Deep500).
        additional_cmake_options: Deep500's CMake options; deep500lite has no CMake step, so only
            an empty list is accepted (use ``extra_flags``).
        output_folder: Deep500's name for ``build_dir`` (``''`` means the default).

    Returns:
        A :class:`CppOp`.

    Raises:
        UserError: the file is missing or no compiler was found (the message says what was looked for).
        CompilationError: the compiler rejected the source (the message quotes the error and the line).
        UserError, UserTypeError: bad descriptors (e.g. a ``None`` dimension) or arguments.
        CppOpError: ``create_new_op`` threw a C++ exception.

    Example:
        >>> op = d5.compile_custom_cppop("swish", "swish.cpp", [d5.tensordesc(np.float32, [1024])],
        ...                              [d5.tensordesc(np.float32, [1024])])
        >>> y = op.forward(np.ones(1024, np.float32))
    """
    if _is_positional_list(additional_definitions):
        # Deep500's positional order: other_files, live_output, additional_cmake_options,
        # additional_definitions, output_folder.
        if not all(isinstance(f, (str, os.PathLike)) and os.path.isfile(f) for f in additional_definitions):
            raise UserTypeError(
                "additional_definitions must be a dict of macro names to values, e.g. {'DTYPE': 'float'}; a list "
                "in that position is read as Deep500's other_files, which must be existing .cpp/.cu files. "
                f"Received: {additional_definitions!r}")
        other_files = list(other_files or ()) + list(additional_definitions)
        live_output = bool(live_output) or bool(is_cuda)
        additional_cmake_options = list(additional_cmake_options or ()) + list(compiler or ())
        additional_definitions = {} if extra_flags in ((), [], None) else extra_flags
        output_folder = build_dir if output_folder is None else output_folder
        is_cuda, compiler, extra_flags, build_dir = None, None, (), None
    live = _deep500_options(live_output, additional_cmake_options)
    if output_folder not in (None, ""):
        if build_dir is not None:
            raise UserError("Give the build folder once: build_dir or Deep500's output_folder, not both. "
                            f"Received: build_dir={build_dir!r}, output_folder={output_folder!r}")
        build_dir = output_folder
    name = _check_name(name)
    if not isinstance(path, (str, os.PathLike)):
        raise UserTypeError(f"path must be the path of a .cpp or .cu file. Received: {path!r}")
    source_path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(source_path):
        raise UserError(
            f"The source file of C++ operator '{name}' was not found: {source_path}; give the path of an "
            f"existing .cpp or .cu file (relative paths start at {os.getcwd()}). Received: {os.fspath(path)!r}"
        )
    others = _check_other_files(other_files)
    if is_cuda is None:
        is_cuda = any(p.endswith(".cu") for p in [source_path, *others])
    inputs, outputs = check_descriptors(name, input_descs, output_descs)
    if additional_definitions is not None and not isinstance(additional_definitions, Mapping):
        _format_definitions(additional_definitions)  # raises the UserTypeError
    definitions = dict(additional_definitions or {})
    first = (inputs or outputs or [None])[0]
    if "DTYPE" not in definitions and first is not None and first.dtype in _CTYPE_NAMES:
        definitions["DTYPE"] = _CTYPE_NAMES[first.dtype]
    define_flags = _format_definitions(definitions)
    extra = _check_flags(extra_flags)
    if not isinstance(is_cuda, (bool, np.bool_)):
        raise UserTypeError(f"is_cuda must be True or False. Received: {is_cuda!r}")
    comp = _resolve_compiler(bool(is_cuda), compiler)
    folder = os.path.abspath(os.fspath(build_dir)) if build_dir is not None else default_build_dir()
    os.makedirs(folder, exist_ok=True)
    flags = _base_flags(comp)
    if _supports_openmp(comp, folder):
        flags += _openmp_flags(comp)
    flags += define_flags + extra
    library, key, cached, log = _build(name, source_path, flags, comp, folder, bool(is_cuda),
                                       other_sources=others, live_output=live)
    try:
        op = CppOp(name, library, inputs, outputs, source_hash=key, from_cache=cached)
    except OSError:
        if not cached:
            raise
        # A cached library that no longer loads (e.g. truncated by a full disk): build it again.
        library, key, cached, log = _build(name, source_path, flags, comp, folder, bool(is_cuda), force=True,
                                           other_sources=others, live_output=live)
        op = CppOp(name, library, inputs, outputs, source_hash=key, from_cache=False)
    op.source_path = source_path
    op.build_log = log
    op.compile_command = [*comp.argv, *flags, source_path, *others]
    return op


def compile_custom_cppop_inline(name: str, source: str, input_descs: Sequence[TensorDescriptor],
                                output_descs: Sequence[TensorDescriptor], additional_definitions: Mapping = {},
                                is_cuda: bool = False, compiler=None, extra_flags: Sequence[str] = (),
                                build_dir=None, output_folder=None, *, live_output: bool = False,
                                additional_cmake_options: Sequence[str] = (),
                                rendered_wrapper: str | None = None) -> "CppOp":
    """Compile C++ (or CUDA) source code given as a string; see :func:`compile_custom_cppop`.

    The code is written to ``<build_dir>/src/<name>-<hash>.cpp`` (``.cu`` when ``is_cuda``), the
    file that compiler messages refer to.

    Deep500's signature, ``compile_custom_cppop_inline(operator_name, code, input_tensors,
    output_tensors, live_output=False, is_cuda=False, additional_cmake_options=[],
    additional_definitions={}, rendered_wrapper=None, output_folder='')``, is accepted too: by
    keyword, or positionally when the fifth argument is a bool (``live_output``).

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
        output_folder: Deep500's name for ``build_dir`` (``''`` means the default).
        live_output: print the compiler command and its output as it compiles (Deep500).
        additional_cmake_options: Deep500's CMake options; only an empty list is accepted.
        rendered_wrapper: Deep500's per-framework wrapper; only ``None`` is accepted.

    Returns:
        A :class:`CppOp`.
    """
    if isinstance(additional_definitions, (bool, np.bool_)):
        # Deep500's positional order: live_output, is_cuda, additional_cmake_options,
        # additional_definitions, rendered_wrapper, output_folder.
        live_output = bool(live_output) or bool(additional_definitions)
        additional_cmake_options = list(additional_cmake_options or ()) + list(compiler or ())
        additional_definitions = {} if extra_flags in ((), [], None) else extra_flags
        rendered_wrapper = build_dir if rendered_wrapper is None else rendered_wrapper
        compiler, extra_flags, build_dir = None, (), None
    live = _deep500_options(live_output, additional_cmake_options, rendered_wrapper)
    if output_folder not in (None, ""):
        if build_dir is not None:
            raise UserError("Give the build folder once: build_dir or Deep500's output_folder, not both. "
                            f"Received: build_dir={build_dir!r}, output_folder={output_folder!r}")
        build_dir = output_folder
    name = _check_name(name)
    if not isinstance(source, str) or not source.strip():
        raise UserTypeError(f"source must be a non-empty string of C++ code. Received: {source!r:.80}")
    if not isinstance(is_cuda, (bool, np.bool_)):
        raise UserTypeError(f"is_cuda must be True or False. Received: {is_cuda!r}")
    folder = os.path.abspath(os.fspath(build_dir)) if build_dir is not None else default_build_dir()
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]
    path = os.path.join(folder, "src", f"{file_stem(name)}-{digest}.{'cu' if is_cuda else 'cpp'}")
    if not os.path.exists(path):
        atomic_write_text(path, source)
    return compile_custom_cppop(name, path, input_descs, output_descs, additional_definitions, is_cuda=bool(is_cuda),
                                compiler=compiler, extra_flags=extra_flags, build_dir=folder, live_output=live)
