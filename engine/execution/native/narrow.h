/* What the narrow route's two files share (narrow.c: formats of 32-column blocks; narrow_k.c:
the K-quants, compiled apart so that the two build on two cores at once). */
#ifndef DRAFTLINE_NARROW_H
#define DRAFTLINE_NARROW_H

#include "product.h"

/* For a tile of R rows from row n by C tokens, at column j: the blocks two tiles on, as one
   prefetch stream through them, as fast as the tile is read (the rows lie one after another).
   A one-token tile reads each line once, so it fetches into L2: into L1 (which two tiles on of
   rows 8,960 columns long, 40 KB, overflow) one-token passes of the 1.5B took 62-63 ms against
   55 on one thread. A wider tile reads each line C times: into L1, as fast or faster. */
ALWAYS_INLINE void prefetch_rows(const Part *p, int format, int n, int R, int C, int j) {
  const size_t ahead = 2 * (size_t)R * p->row_bytes;
  const uint8_t *next = p->data + (size_t)n * p->row_bytes + ahead + (size_t)(j / block_columns(format)) * R * block_bytes(format);
  for (int line = 0; line < R * block_bytes(format); line += 64) {
    if (C == 1)
      _mm_prefetch((const char *)next + line, _MM_HINT_T1);
    else
      _mm_prefetch((const char *)next + line, _MM_HINT_T0);
  }
}

/* A tile's results: mins off, lanes summed, the first T tokens' kept. */
ALWAYS_INLINE void finish_fused(__m256 acc[][TILE_TOKENS], int R, int C, int T, const float *mins, const Acts *a, int n,
                                float *y, int ldy, int add) {
  const int S = sums_per_row(a->cols);
  const float *row_mins[FUSED_ROWS], *sums[TILE_TOKENS];
  for (int r = 0; r < R; r++) row_mins[r] = mins + (size_t)r * S;
  for (int t = 0; t < C; t++) sums[t] = a->sums + (size_t)(t < T ? t : T - 1) * S;
  finish_tile(acc, R, C, C < T ? C : T, row_mins, sums, S, y + n, ldy, add);
}

/* narrow_rows for a K-quant part (narrow_k.c). */
int narrow_krows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add);

#endif
