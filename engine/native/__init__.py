"""The native decoder (decoder.c, matmul.c): built on the user's machine, called through ctypes.

Every pass of an int4/int8 model on the CPU (prefill, decoding, verification) runs as one C
call instead of ~1,600 torch ops; decoder.c says why and how it stays exact. The library is
compiled at first use with the system's C compiler for this CPU (-march=native, ~2 s) and kept
in the user's cache directory, keyed by its sources, the compiler and the CPU. Without a
compiler, or on a CPU without AVX2 and FMA, `load_library` returns None and the torch code
runs every pass.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import platform
import shutil
import subprocess
from functools import cache
from pathlib import Path

import torch

from engine.kernels import Int4Weight, Int8Weight, Weight
from engine.user_cache import cache_dir, machine_key, write_atomically

log = logging.getLogger("draftline")

SOURCES = [Path(__file__).with_name(name) for name in ("decoder.c", "matmul.c", "native.h")]
# -ffp-contract=off: a product and a sum fused in one copy of a loop and not in another would
# round differently, and every copy of a kernel must compute alike (decoder.c).
_FLAGS = ["-O3", "-ffp-contract=off", "-shared", "-fPIC", "-pthread"]
_INT4, _INT8 = 0, 1


def _cpu_has_avx2_fma() -> bool:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return {"avx2", "fma"} <= set(flags.split())


def _compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def build(target: Path, arch: list[str]) -> ctypes.CDLL:
    """Compile the decoder with the instruction-set flags `arch` into `target` (written
    atomically) and load it. Raises OSError when that fails."""
    compiler = _compiler()
    if compiler is None:
        raise OSError("no C compiler found")

    def compile_to(tmp: Path) -> None:
        sources = [str(p) for p in SOURCES if p.suffix == ".c"]
        result = subprocess.run([compiler, *_FLAGS, *arch, "-o", str(tmp), *sources, "-lm"],
                                capture_output=True, text=True)
        if result.returncode:
            raise OSError(f"{compiler} failed: {result.stderr.strip()[:500]}")
    write_atomically(target, compile_to)
    return _load(target)


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.draftline_forward.restype = ctypes.c_int
    lib.draftline_forward.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    return lib


def library_path(compiler: str) -> Path:
    """Where the library built by `compiler` for this CPU from these sources is kept."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    key = hashlib.blake2b(b"".join(p.read_bytes() for p in SOURCES) + version.encode() + " ".join(_FLAGS).encode()
                          + machine_key(0).encode(), digest_size=12).hexdigest()
    return cache_dir("native") / f"decoder-{key}.so"


@cache
def load_library() -> ctypes.CDLL | None:
    """The decoder compiled for this machine (built now if needed, ~2 s; built again if the
    kept file does not load), or None where it cannot run here (the reason is logged once)."""
    if platform.machine() not in ("x86_64", "AMD64") or not _cpu_has_avx2_fma():
        log.info("native decoder: needs an x86-64 CPU with AVX2 and FMA; using torch kernels")
        return None
    compiler = _compiler()
    if compiler is None:
        log.info("native decoder: no C compiler found; using torch kernels")
        return None
    target = library_path(compiler)
    if target.exists():
        try:
            return _load(target)
        except OSError as e:
            log.info("native decoder: building %s again (%s)", target.name, e)
    try:
        return build(target, ["-march=native"])
    except OSError as e:
        log.warning("native decoder unavailable (%s); using torch kernels", e)
        return None


class _Matrix(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int32), ("rows", ctypes.c_int32), ("cols", ctypes.c_int32),
                ("q", ctypes.c_void_p), ("scale", ctypes.c_void_p), ("zero", ctypes.c_void_p),
                ("row_sums", ctypes.c_void_p)]


class _Layer(ctypes.Structure):
    _fields_ = [("attn_norm", ctypes.c_void_p), ("ffn_norm", ctypes.c_void_p), ("bqkv", ctypes.c_void_p),
                ("wqkv", _Matrix), ("wo", _Matrix), ("w_gate_up", _Matrix), ("w_down", _Matrix)]


class _Model(ctypes.Structure):
    _fields_ = [("n_layers", ctypes.c_int32), ("dim", ctypes.c_int32), ("n_heads", ctypes.c_int32),
                ("n_kv_heads", ctypes.c_int32), ("head_dim", ctypes.c_int32), ("ffn_dim", ctypes.c_int32),
                ("max_len", ctypes.c_int32), ("eps", ctypes.c_float), ("layers", ctypes.POINTER(_Layer)),
                ("norm", ctypes.c_void_p), ("head", _Matrix), ("k_cache", ctypes.c_void_p),
                ("v_cache", ctypes.c_void_p), ("cos", ctypes.c_void_p), ("sin", ctypes.c_void_p)]


def _pointer(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _usable(w: object) -> bool:
    """A matrix the C code reads as it is: int4 with its plain layout, or int8, row-major,
    with rows a whole number of 32-column blocks."""
    if isinstance(w, Int4Weight):
        return w.q is not None and all(t.is_contiguous() for t in (w.q, w.scale, w.zero))
    if isinstance(w, Int8Weight):
        return w.q.is_contiguous() and w.scale.is_contiguous() and w.shape[1] % 32 == 0
    return False


class NativeDecoder:
    """Runs the passes of one TorchLlama (engine/backends/torch_llama.py) in C, on the weights
    and KV cache the model owns (it keeps only fp32 rotary tables and int8 row sums)."""

    def __init__(self, lib: ctypes.CDLL, model) -> None:
        c = model.config
        self.lib = lib
        self.cos, self.sin = (t.float().contiguous() for t in (model.cos, model.sin))
        self._row_sums: list[torch.Tensor] = []  # of the int8 matrices, kept alive here
        self._layers = (_Layer * len(model.layers))(*[
            _Layer(layer.attn_norm.data_ptr(), layer.ffn_norm.data_ptr(), _pointer(layer.bqkv),
                   *(self._matrix(getattr(layer, m)) for m in ("wqkv", "wo", "w_gate_up", "w_down")))
            for layer in model.layers])
        self._struct = _Model(c.n_layers, c.hidden_size, c.n_heads, c.n_kv_heads, c.dim_per_head,
                              model.layers[0].w_down.shape[1], model.max_len, c.rms_eps, self._layers,
                              model.norm.data_ptr(), self._matrix(model.head), model.k_cache.data_ptr(),
                              model.v_cache.data_ptr(), self.cos.data_ptr(), self.sin.data_ptr())

    @staticmethod
    def supports(model) -> bool:
        """Whether decoder.c computes this model: RMSNorm, SwiGLU, no biases but Q/K/V's,
        no q/k norm, bf16 vectors, quantized matrices; CPU."""
        c, family = model.config, model.family
        if model.device.type != "cpu" or model.dtype != torch.bfloat16 or family.norm != "rms" or family.mlp != "swiglu":
            return False
        if (c.dim_per_head % 8 or c.dim_per_head > 256 or c.n_heads % c.n_kv_heads
                or c.n_heads // c.n_kv_heads > 8):  # decoder.c's MAX_HEAD_DIM and MAX_GROUP
            return False
        extras = ("attn_norm_bias", "ffn_norm_bias", "bo", "q_norm", "k_norm", "b_up", "b_down")
        if any(getattr(layer, name) is not None for layer in model.layers for name in extras):
            return False
        matrices = [model.head] + [getattr(layer, m) for layer in model.layers
                                   for m in ("wqkv", "wo", "w_gate_up", "w_down")]
        return all(_usable(w) for w in matrices)

    def _matrix(self, w: Weight) -> _Matrix:
        if isinstance(w, Int4Weight):
            return _Matrix(_INT4, w.shape[0], w.shape[1], w.q.data_ptr(), w.scale.data_ptr(), w.zero.data_ptr(), None)
        # the integer products offset the activations by 128 and take it back with these
        sums = w.q.sum(1, dtype=torch.int32)
        self._row_sums.append(sums)
        return _Matrix(_INT8, w.shape[0], w.shape[1], w.q.data_ptr(), w.scale.data_ptr(), None, sums.data_ptr())

    def set_head(self, head: Weight) -> None:
        self._struct.head = self._matrix(head)

    def forward(self, x: torch.Tensor, start: int, positions: torch.Tensor, local: torch.Tensor,
                logits: bool, threads: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [n, hidden] at cache positions start..start+n (rotary `positions`; `local` [n, n]
        bool: which new tokens each may attend to). Returns the final normed hidden states
        (float32) and float32 logits [n, head rows] (None unless `logits`)."""
        n = len(x)
        x = x.to(torch.float32, copy=True)  # the C code writes the normed states into it
        pos = positions.to(torch.int32).contiguous()
        mask = local.to(torch.uint8).contiguous()
        out = torch.empty(n, self._struct.head.rows) if logits else None
        if self.lib.draftline_forward(ctypes.byref(self._struct), n, start, pos.data_ptr(), mask.data_ptr(),
                                      x.data_ptr(), _pointer(out), threads):
            raise MemoryError("native decoder: out of memory")
        return x, out


def decoder_for(model) -> NativeDecoder | None:
    """The native decoder for `model`, or None where the torch code must run its passes."""
    if not NativeDecoder.supports(model):
        return None
    lib = load_library()
    return None if lib is None else NativeDecoder(lib, model)

