"""K-quant matrices repacked at load into the order of the products' panels, wherever AMX tiles
do not take the wide passes: sixteen-row panels where AVX-512 VNNI runs (panel_zmm.c), four-row
ones with AVX2 (panel_k.c). The library says which (draftline_packed_bytes: 0 where none).

Why: the panels multiply a token's activations with all their rows at once, no lane of a row
ever summed, but building one from the file's blocks costs transposes (about six tokens'
products for sixteen rows), so from the file they pay only in wider passes. Repacked once, near
the file's size, a panel loads with no transposes, and passes of every width (plain decoding,
verification, prefill) run on them.
The repacked bytes replace the file's pages in the process (those are dropped from its
mapping), in one buffer of anonymous memory the kernel may back with huge pages, so a pass
walks 2 MB pages rather than 4 KB ones. `DRAFTLINE_REPACK=0` keeps the file's blocks.
"""
from __future__ import annotations

import contextlib
import ctypes
import mmap
from concurrent.futures import ThreadPoolExecutor

import numpy as np

PACKED = 1000  # native.h: PACKED + a K-quant's id is its repacked form
_HUGE = 2 << 20
_ROWS = 16
_MADV_DONTNEED = 4
_PIECE = 4 << 20


def _piece_rows(part) -> int:
    """Rows repacked at a time: about _PIECE bytes of the file, in whole sixteens."""
    return max(_ROWS, _PIECE // max(1, part.row_bytes) // _ROWS * _ROWS)


class Repacked:
    """The repacked parts of `matrices` (the decoder's ctypes _Matrix structs, changed in place to
    point at them). `nbytes`: their memory. The pages of the blocks they replace are dropped from
    the process where they are a file's (`mapped`: their addresses; dropping a copy's would zero it). Nothing is repacked unless `wanted` (DRAFTLINE_REPACK)."""

    def __init__(self, lib: ctypes.CDLL, matrices: list, threads: int, mapped: set[int], wanted: bool = True) -> None:
        self.nbytes = 0
        self._packed: dict[int, tuple[int, int]] = {}  # a repacked part's file address: its format, its panels
        self._memory: mmap.mmap | None = None
        if not wanted or lib.draftline_amx(-1) or not hasattr(mmap, "MAP_PRIVATE"):  # (POSIX: no Windows)
            return
        jobs = []  # (part, cols, offset, bytes)
        for matrix in matrices:
            for i in range(matrix.n_parts):
                part = matrix.parts[i]
                size = lib.draftline_packed_bytes(part.format, part.rows, matrix.cols)
                if size:
                    jobs.append((part, matrix.cols, self.nbytes, size))
                    self.nbytes += size
        if not jobs:
            return
        # private: shared anonymous memory is shmem, which gets no huge pages by default
        self._memory = mmap.mmap(-1, self.nbytes + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        address = ctypes.addressof(ctypes.c_char.from_buffer(self._memory))
        start = -address % _HUGE
        if hasattr(mmap, "MADV_HUGEPAGE"):
            with contextlib.suppress(OSError):  # a kernel without transparent huge pages
                self._memory.madvise(mmap.MADV_HUGEPAGE, start, self.nbytes // _HUGE * _HUGE or _HUGE)
        base = address + start

        libc = ctypes.CDLL(None, use_errno=True)

        def repack(piece: tuple) -> None:
            """Rows r0..r1 of a part repacked, then their file pages dropped at once: the process
            never holds much more than the file's size (peak RSS)."""
            part, cols, offset, _, r0, r1 = piece
            lib.draftline_repack(ctypes.byref(part), cols, r0, r1, base + offset)  # the part's panels from its start
            source = part.data + r0 * part.row_bytes
            first = -(-source // mmap.PAGESIZE) * mmap.PAGESIZE  # the whole pages they alone cover
            last = (part.data + r1 * part.row_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
            if last > first and part.data in mapped:
                libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), _MADV_DONTNEED)

        pieces = [(*job, r0, min(r0 + _piece_rows(job[0]), job[0].rows)) for job in jobs
                  for r0 in range(0, job[0].rows, _piece_rows(job[0]))]
        with ThreadPoolExecutor(max(1, threads)) as pool:
            list(pool.map(repack, pieces))
        for part, _, offset, _ in jobs:
            self._packed[part.data] = (PACKED + part.format, base + offset)
            part.format, part.data, part.row_bytes = PACKED + part.format, base + offset, 0

    def point(self, matrix) -> None:
        """A matrix made later of repacked blocks (a head cut to a prefix of its rows, which the
        panels' masked stores leave out) is pointed at the panels."""
        for i in range(matrix.n_parts):
            part = matrix.parts[i]
            if part.data in self._packed:
                part.format, part.data = self._packed[part.data]
                part.row_bytes = 0

    def holds(self, data: np.ndarray) -> bool:
        """Whether a matrix part's blocks (at data) were repacked."""
        return data.ctypes.data in self._packed
