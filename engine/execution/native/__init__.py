"""The native decoder (decoder.c, matmul.c, amx.c, narrow.c, quantize.c, *.h): built on the user's machine, called via ctypes.

Every pass of a model it computes (prefill, decoding, verification) runs as one C call that
reads the matrices in their stored formats: a GGUF file's own blocks where the file is mapped
(engine/loading/formats/gguf_blocks.py), or the torch backend's int4/int8 (engine/execution/kernels.py);
decoder.c says why and how it stays exact. The library is compiled with the system's C
compiler for this CPU (-march=native, 6-7 s on two cores) when installing (`python -m
engine.execution.native`) or else at first use, and kept in the user's cache directory, keyed by its sources, the compiler, its flags and the CPU. `$CC` and `$CFLAGS` are
honoured; `DRAFTLINE_NATIVE=0` turns the decoder off, `DRAFTLINE_AMX=0` its AMX route,
`DRAFTLINE_REPACK=0` its repacking of K-quants (repack.py). Without a compiler, on a CPU without AVX2
and FMA, or after a failed build (remembered under the same key, so it is not retried at every
start), `load_library` returns None and the torch code runs every pass.

numpy only (the arrays a torch backend passes in are read through their `data_ptr`): a model
that runs here starts without importing torch.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from engine.loading.formats.gguf_blocks import BlockMatrix, BlockStack
from engine.execution.native.repack import Repacked
from engine.execution.rope import rope_tables
from engine.loading.user_cache import cache_dir, machine_key, write_atomically
from engine.loading.weights import LlamaConfig

log = logging.getLogger("draftline")

SOURCES = [Path(__file__).with_name(name)
           for name in ("decoder.c", "matmul.c", "amx.c", "narrow.c", "narrow_k.c", "panel_k.c", "panel_zmm.c",
                        "probe.c", "quantize.c", "formats.h", "native.h", "narrow.h", "product.h")]
_ABI = 4  # decoder.c's draftline_abi(): the structs and calls below mirror its own
# -ffp-contract=off: a product and a sum fused in one copy of a loop and not in another would
# round differently, and every copy of a kernel must compute alike (decoder.c).
_FLAGS = ["-O3", "-ffp-contract=off", "-shared", "-fPIC", "-pthread"]
_INT4, _INT8 = 100, 101  # native.h's formats besides ggml's type ids
TILE_TOKENS = 16  # native.h's TILE_T: tokens per AMX tile
_K_QUANTS = {12, 13, 14}  # Q4_K, Q5_K, Q6_K: the formats amx.c multiplies
_MAX_PARTS = 3


def _cpu_has_avx2_fma(compiler: str) -> bool:
    """From /proc/cpuinfo where there is one (Linux), else from what the compiler enables for
    -march=native (other systems, containers that hide /proc)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
        return {"avx2", "fma"} <= set(flags.split())
    except (OSError, StopIteration):
        pass
    macros = subprocess.run([compiler, "-march=native", "-dM", "-E", "-x", "c", os.devnull],
                            capture_output=True, text=True).stdout
    return "__AVX2__" in macros and "__FMA__" in macros


def _compiler() -> str | None:
    """$CC where set (the first word: a path or a name on PATH), else cc, gcc or clang."""
    named = shlex.split(os.environ.get("CC", ""))[:1]
    return shutil.which(named[0]) if named else (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang"))


def _flags() -> list[str]:
    """The user's $CFLAGS, then the flags exactness and linking need (last, so they win)."""
    return [*shlex.split(os.environ.get("CFLAGS", "")), *_FLAGS]


def build(target: Path, arch: list[str]) -> ctypes.CDLL:
    """Compile the decoder with the instruction-set flags `arch` into `target` (written
    atomically) and load it. Raises OSError when that fails."""
    compiler = _compiler()
    if compiler is None:
        raise OSError("no C compiler found")

    def compile_to(tmp: Path) -> None:
        sources = [p for p in SOURCES if p.suffix == ".c"]
        with tempfile.TemporaryDirectory() as scratch:  # each source compiled on its own core
            objects = [Path(scratch) / f"{p.stem}.o" for p in sources]
            jobs = [subprocess.Popen([compiler, *arch, *_flags(), "-c", "-o", str(o), str(p)], stderr=subprocess.PIPE,
                                     text=True) for p, o in zip(sources, objects)]
            failed = [error for job, error in [(job, job.communicate()[1]) for job in jobs] if job.returncode]
            if not failed:
                linked = subprocess.run([compiler, *arch, *_flags(), "-o", str(tmp), *map(str, objects), "-lm"],
                                        capture_output=True, text=True)
                failed = [linked.stderr] if linked.returncode else []
            if failed:
                raise OSError(f"{compiler} failed: {' '.join(failed).strip()[:500]}")
    write_atomically(target, compile_to)
    return _load(target)


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    if lib.draftline_abi() != _ABI:
        raise OSError(f"{path.name}: ABI {lib.draftline_abi()}, expected {_ABI}")
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.draftline_forward.restype = i
    lib.draftline_forward.argtypes = [p, i, i, p, p, p, p, i, i, p, i]
    lib.draftline_matmul.restype = i
    lib.draftline_matmul.argtypes = [p, i, p, p]
    lib.draftline_rows.argtypes = [p, p, i, p]
    lib.draftline_scratch_bytes.restype = ctypes.c_size_t
    lib.draftline_scratch_bytes.argtypes = [p, i, i, i]
    lib.draftline_amx.restype = i
    lib.draftline_amx.argtypes = [i]
    lib.draftline_tiles_from.restype = i
    lib.draftline_int8_peak.restype = lib.draftline_read_rate.restype = ctypes.c_double
    lib.draftline_int8_peak.argtypes = [ctypes.c_long]
    lib.draftline_packed_bytes.restype = ctypes.c_size_t
    lib.draftline_packed_bytes.argtypes = [i, i, i]
    lib.draftline_repack.argtypes = [p, i, i, i, p]
    lib.draftline_read_rate.argtypes = [p, ctypes.c_size_t]
    if _off("DRAFTLINE_AMX"):
        lib.draftline_amx(0)
    return lib


def _off(variable: str) -> bool:
    return os.environ.get(variable, "1").strip().lower() in ("0", "off", "no", "false")


def library_path(compiler: str) -> Path:
    """Where the library built by `compiler` for this CPU from these sources is kept."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    key = hashlib.blake2b(b"".join(p.read_bytes() for p in SOURCES) + version.encode() + " ".join(_flags()).encode()
                          + machine_key(0).encode(), digest_size=12).hexdigest()
    return cache_dir("native") / f"decoder-{key}.so"


@cache
def load_library() -> ctypes.CDLL | None:
    """The decoder compiled for this machine (built now if needed; built again if the
    kept file does not load), or None where it cannot or should not run here (the reason is
    logged once)."""
    if _off("DRAFTLINE_NATIVE"):
        log.info("native decoder: off (DRAFTLINE_NATIVE); using torch kernels")
        return None
    compiler = _compiler()
    if compiler is None:
        log.info("native decoder: no C compiler found; using torch kernels")
        return None
    if platform.machine() not in ("x86_64", "AMD64") or not _cpu_has_avx2_fma(compiler):
        log.info("native decoder: needs an x86-64 CPU with AVX2 and FMA; using torch kernels")
        return None
    target = library_path(compiler)
    failed = target.with_suffix(".failed")
    if failed.exists():
        log.warning("native decoder: the build for this machine failed before (%s; delete it to retry); "
                    "using torch kernels", failed)
        return None
    if target.exists():
        try:
            return _load(target)
        except OSError as e:
            log.info("native decoder: building %s again (%s)", target.name, e)
    try:
        lib = build(target, ["-march=native"])
        log.info("native decoder: built %s", target)
        return lib
    except OSError as e:
        with contextlib.suppress(OSError):  # an unwritable cache: it is tried again next start
            failed.write_text(f"{e}\n")
        log.warning("native decoder unavailable (%s); using torch kernels", e)
        return None


# canonical tensors decoder.c computes (engine/loading/architectures.py): RMSNorm, SwiGLU, Q/K/V biases
_COMPUTED = {"embed", "lm_head", "norm", "attn_norm", "ffn_norm", "wq", "wk", "wv", "wo", "bq", "bk", "bv",
             "w_gate", "w_up", "w_down"}


def computes(c: LlamaConfig, names: set[str]) -> bool:
    """Whether decoder.c computes a model with this configuration and these tensors (canonical
    names): RMSNorm, SwiGLU, no biases but Q/K/V's, no q/k norm, head dims a multiple of 16 up
    to 256 (decoder.c's MAX_HEAD_DIM), at most 8 query heads per KV head (MAX_GROUP), rows a
    whole number of 32-column blocks."""
    from engine.loading.architectures import FAMILIES

    family = FAMILIES[c.family]
    if family.norm != "rms" or family.mlp != "swiglu" or family.qk_norm:
        return False
    if any(name.rpartition(".")[2] not in _COMPUTED for name in names):
        return False
    return (c.head_dim % 16 == 0 and c.head_dim <= 256 and c.n_heads % c.n_kv_heads == 0
            and c.n_heads // c.n_kv_heads <= 8 and c.hidden_size % 32 == 0 and c.intermediate_size % 32 == 0)


class _Part(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int32), ("rows", ctypes.c_int32), ("row_bytes", ctypes.c_int64),
                ("data", ctypes.c_void_p), ("scale", ctypes.c_void_p), ("zero", ctypes.c_void_p)]


class _Matrix(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_int32), ("cols", ctypes.c_int32), ("n_parts", ctypes.c_int32),
                ("parts", _Part * _MAX_PARTS)]


class _Layer(ctypes.Structure):
    _fields_ = [("attn_norm", ctypes.c_void_p), ("ffn_norm", ctypes.c_void_p), ("bqkv", ctypes.c_void_p),
                ("wqkv", _Matrix), ("wo", _Matrix), ("w_gate_up", _Matrix), ("w_down", _Matrix)]


class _Model(ctypes.Structure):
    _fields_ = [("n_layers", ctypes.c_int32), ("dim", ctypes.c_int32), ("n_heads", ctypes.c_int32),
                ("n_kv_heads", ctypes.c_int32), ("head_dim", ctypes.c_int32), ("ffn_dim", ctypes.c_int32),
                ("max_len", ctypes.c_int32), ("rotary_pairs", ctypes.c_int32), ("eps", ctypes.c_float),
                ("layers", ctypes.POINTER(_Layer)), ("norm", ctypes.c_void_p), ("head", _Matrix),
                ("k_cache", ctypes.c_void_p), ("v_cache", ctypes.c_void_p), ("cos", ctypes.c_void_p),
                ("sin", ctypes.c_void_p)]


def _pointer(t) -> int | None:
    """The address of a numpy array's or a torch tensor's first element."""
    if t is None:
        return None
    return t.ctypes.data if isinstance(t, np.ndarray) else t.data_ptr()


def _contiguous(t) -> bool:
    return t.flags.c_contiguous if isinstance(t, np.ndarray) else t.is_contiguous()


def _part(w) -> _Part:
    """The C description of one matrix (its memory stays the model's)."""
    if isinstance(w, BlockMatrix):
        return _Part(w.ggml_type, w.shape[0], w.data.strides[0], w.data.ctypes.data, None, None)
    if w.format == "int4":
        return _Part(_INT4, w.shape[0], w.shape[1] // 2, _pointer(w.q), _pointer(w.scale), _pointer(w.zero))
    return _Part(_INT8, w.shape[0], w.shape[1], _pointer(w.q), _pointer(w.scale), None)


def _parts(w: object) -> list | None:
    """The parts of a matrix the C code reads as it is, or None: GGUF blocks (stacked or not),
    int4 with its plain layout, or int8 (engine/execution/kernels.py), row-major, in whole 32-column blocks."""
    if isinstance(w, BlockStack):
        return w.parts if len(w.parts) <= _MAX_PARTS and w.shape[1] % 32 == 0 else None
    if isinstance(w, BlockMatrix):
        return [w] if w.shape[1] % 32 == 0 and w.data.strides[1] == 1 else None
    kind = getattr(w, "format", None)
    if kind == "int4":
        usable = w.q is not None and all(_contiguous(t) for t in (w.q, w.scale, w.zero))
        return [w] if usable else None
    if kind == "int8":
        return [w] if _contiguous(w.q) and _contiguous(w.scale) and w.shape[1] % 32 == 0 else None
    return None


def c_matrix(w) -> _Matrix:
    parts = _parts(w)
    return _Matrix(w.shape[0], w.shape[1], len(parts), (_Part * _MAX_PARTS)(*[_part(p) for p in parts]))


def _floats(x) -> np.ndarray:
    """float32 rows as a C-contiguous numpy array (a CPU torch tensor is read as one)."""
    if not isinstance(x, np.ndarray):
        x = x.detach().float().cpu().numpy()
    return np.ascontiguousarray(x, dtype=np.float32)


def product(lib: ctypes.CDLL, w, x) -> np.ndarray:
    """x @ w.T in float32 as the decoder computes it (each token's row quantized on its own),
    on one thread: an output head outside a pass, and the tests' view of each format."""
    x = _floats(x)
    out = np.empty((len(x), w.shape[0]), dtype=np.float32)
    matrix = c_matrix(w)
    if lib.draftline_matmul(ctypes.byref(matrix), len(x), x.ctypes.data, out.ctypes.data):
        raise MemoryError("native decoder: out of memory")
    return out


def rows(lib: ctypes.CDLL, w, ids) -> np.ndarray:
    """Rows of a matrix as float32, as the products see its weights."""
    return _rows(lib, c_matrix(w), ids)


def _rows(lib: ctypes.CDLL, matrix: _Matrix, ids) -> np.ndarray:
    index = np.ascontiguousarray(np.asarray(ids), dtype=np.int64).reshape(-1)
    out = np.empty((len(index), matrix.cols), dtype=np.float32)
    lib.draftline_rows(ctypes.byref(matrix), index.ctypes.data, len(index), out.ctypes.data)
    return out


_LAYER_MATRICES = ("wqkv", "wo", "w_gate_up", "w_down")


def _matrices(model) -> list:
    """The matrices every pass multiplies: the head, then each layer's."""
    return [model.head] + [getattr(layer, m) for layer in model.layers for m in _LAYER_MATRICES]


def _mapped_blocks(model) -> set[int]:
    """The addresses of a model's matrix parts that lie in a mapped file."""
    return {p.data.ctypes.data for w in _matrices(model) for p in (_parts(w) or [])
            if isinstance(p, BlockMatrix) and p.mapped}


@dataclass(frozen=True)
class Stopped:
    """A pass that its stop flag ended after `layers` layers: its positions' keys and values in
    those layers are written, and `residual` is their stream after them."""
    layers: int
    residual: np.ndarray


class NativeDecoder:
    """Runs the passes of one model in C (engine/execution/backends/native_llama.py, or a quantized
    TorchLlama), on the weights and bf16 KV cache the model owns; it keeps the rotary tables,
    and float32 copies of a torch model's bf16 vectors."""

    def __init__(self, lib: ctypes.CDLL, model) -> None:
        c = model.config
        self.lib = lib
        self.build = Path(lib._name).stem  # the library's key: its sources, compiler and CPU
        # float32 tables, not the model's (bf16 for the torch kernels)
        self.cos, self.sin = rope_tables(model.max_len, c.head_dim, c.rope_theta, c.rope_scaling)
        self._vectors: list[np.ndarray] = []  # float32 norms and biases, kept alive here
        self._copied = 0  # bytes of them that are copies
        self._layers = (_Layer * len(model.layers))(*[
            _Layer(self._vector(layer.attn_norm), self._vector(layer.ffn_norm), self._vector(layer.bqkv),
                   *(c_matrix(getattr(layer, m)) for m in _LAYER_MATRICES))
            for layer in model.layers])
        self._struct = _Model(c.n_layers, c.hidden_size, c.n_heads, c.n_kv_heads, c.head_dim,
                              model.layers[0].w_down.shape[1], model.max_len, int(model.rotary_pairs), c.rms_eps,
                              self._layers, self._vector(model.norm), c_matrix(model.head),
                              _pointer(model.k_cache), _pointer(model.v_cache), _pointer(self.cos),
                              _pointer(self.sin))
        self.repacked = Repacked(lib, [self._struct.head] + [getattr(layer, m) for layer in self._layers
                                                             for m in _LAYER_MATRICES],
                                 len(os.sched_getaffinity(0)), _mapped_blocks(model), not _off("DRAFTLINE_REPACK"))
        self.scratch_bytes = 0  # the largest pass's so far
        self._embedding: tuple[object, _Matrix] | None = None  # (the matrix, its C description)
        mlp = self._layers[0].w_gate_up  # most of a pass's weights
        self._tiled = all(mlp.parts[i].format in _K_QUANTS for i in range(mlp.n_parts))

    def point_at_cache(self, model) -> None:
        """Passes read and write the model's KV cache arrays of now (it switched caches)."""
        self._struct.k_cache, self._struct.v_cache = _pointer(model.k_cache), _pointer(model.v_cache)

    def _vector(self, t) -> int | None:
        if t is None:
            return None
        v = _floats(t)  # the model's own array where it is float32 already (the native backend's)
        self._vectors.append(v)
        self._copied += 0 if v is t else v.nbytes
        return v.ctypes.data

    @property
    def own_bytes(self) -> int:
        """What it keeps besides the model's tensors: rotary tables and float32 copies of
        vectors (a torch model's are bf16); the repacked matrices are `repacked.nbytes`."""
        return self.cos.nbytes + self.sin.nbytes + self._copied

    @staticmethod
    def supports(model) -> bool:
        """Whether decoder.c computes this model (`computes`) on its matrices as they are."""
        names = {name for layer in model.layers for name, w in vars(layer).items() if w is not None}
        names = {"wq" if n == "wqkv" else "w_up" if n == "w_gate_up" else "bq" if n == "bqkv" else n for n in names}
        if not computes(model.config, names):
            return False
        return all(_parts(w) is not None for w in _matrices(model))

    def tiles_from(self) -> int:
        """The pass width from which this model's products run on AMX tiles (amx.c), whose
        time is flat up to TILE_TOKENS tokens; 0 where they do not run (no AMX here, or not
        K-quants)."""
        return self.lib.draftline_tiles_from() if self._tiled else 0

    def set_head(self, head) -> None:
        matrix = c_matrix(head)
        self.repacked.point(matrix)  # a prefix of a repacked head's rows stays on its panels
        self._struct.head = matrix

    def head_logits(self, features, head) -> np.ndarray:
        return product(self.lib, head, features)

    def embed(self, embedding, ids) -> np.ndarray:
        """float32 input vectors [n, hidden]: rows of the embedding, as the products see it.
        Its C description is made once: every pass looks its tokens up."""
        if self._embedding is None or self._embedding[0] is not embedding:
            self._embedding = (embedding, c_matrix(embedding))
        return _rows(self.lib, self._embedding[1], ids)

    def forward(self, x, start: int, positions: np.ndarray, local: np.ndarray, logits: bool, threads: int,
                stop: ctypes.c_int | None = None, states: bool = True, first_layer: int = 0
                ) -> tuple[np.ndarray | None, np.ndarray | None] | Stopped:
        """x [n, hidden] at cache positions start..start+n (rotary `positions`; `local` [n, n]
        bool: which new tokens each may attend to). Returns the final normed hidden states
        (float32; None where neither `states` nor `logits` asked for them: such a pass skips
        the last layer past its keys and values) and float32 logits [n, head rows] (None
        unless `logits`); or `Stopped` where `stop` was set while it ran (the pass ended after
        the layer in flight). `first_layer`: go on with a stopped pass, x its residual."""
        n = len(x)
        x = np.array(_floats(x), copy=True)  # the C code writes the normed states into it
        pos = np.ascontiguousarray(positions, dtype=np.int32)
        mask = np.ascontiguousarray(local, dtype=np.uint8)
        out = np.empty((n, self._struct.head.rows), dtype=np.float32) if logits else None
        model = ctypes.byref(self._struct)
        self.scratch_bytes = max(self.scratch_bytes, self.lib.draftline_scratch_bytes(model, n, start, threads))
        done = self.lib.draftline_forward(model, n, start, pos.ctypes.data, mask.ctypes.data, x.ctypes.data,
                                          _pointer(out), int(states), threads,
                                          None if stop is None else ctypes.byref(stop), first_layer)
        if done < 0:
            raise MemoryError("native decoder: out of memory")
        return Stopped(done, x) if done else (x if states or logits else None, out)


def decoder_for(model) -> NativeDecoder | None:
    """The native decoder for `model`, or None where the torch code must run its passes."""
    if not NativeDecoder.supports(model):
        return None
    lib = load_library()
    return None if lib is None else NativeDecoder(lib, model)
