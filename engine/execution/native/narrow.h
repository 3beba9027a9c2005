/* What the narrow route's two files share (narrow.c: formats of 32-column blocks; narrow_k.c:
the K-quants, compiled apart so that the two build on two cores at once). */
#ifndef DRAFTLINE_NARROW_H
#define DRAFTLINE_NARROW_H

#include "product.h"

/* The blocks at column j of the R rows after these: one prefetch stream through them, as fast
   as they are read (the rows lie one after another). */
ALWAYS_INLINE void prefetch_rows(const Part *p, int format, int n, int R, int j, size_t ahead) {
  const uint8_t *next = p->data + (size_t)n * p->row_bytes + ahead + (size_t)(j / block_columns(format)) * R * block_bytes(format);
  for (int line = 0; line < R * block_bytes(format); line += 64) _mm_prefetch((const char *)next + line, _MM_HINT_T0);
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
