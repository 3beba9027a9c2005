/* The products of passes of up to 8 tokens (4 where there are only 16 registers; the K-quants
in narrow_k.c: decoding and verification), for formats of 32-column blocks here: each 32-column
unit of a row is read from the weights and multiplied with every token at once, nothing is
stored; rows are taken a few at a time, interleaved block by block (independent chains for the
out-of-order core), and the rows after them are prefetched in one sequential stream. A decoding
pass is bound by reading the weights, so nothing else may cost much. The arithmetic is
product.h's, as the wide route's (matmul.c).
*/
#include "narrow.h"

/* Rows n..n+R-1 against tokens 0..C-1 (token T-1 stands in for those past T; their results are
   dropped), for formats of 32-column blocks. */
ALWAYS_INLINE void fused_tile(const Part *p, int format, int K, const Acts *a, int T, int C, int n, int R, float *y,
                              int ldy, int add) {
  const int S = sums_per_row(K), L = lanes_per_row(K), sign = signed_levels(format);
  float mins[FUSED_ROWS][S];
  __m256 acc[FUSED_ROWS][TILE_TOKENS], part[FUSED_ROWS][TILE_TOKENS];
  int token[TILE_TOKENS];
  for (int t = 0; t < C; t++) token[t] = t < T ? t : T - 1;
  for (int r = 0; r < R; r++) {
    for (int t = 0; t < C; t++) acc[r][t] = part[r][t] = _mm256_setzero_ps();
    for (int i = K / 16; i < S; i++) mins[r][i] = 0;
  }
  /* Rows interleaved block by block (independent chains for the out-of-order core); 4 blocks
     make an activation block. */
  for (int j0 = 0; j0 < K; j0 += ACT_BLOCK) {
#pragma GCC unroll 4
    for (int j = j0; j < j0 + ACT_BLOCK; j += 32) {
      if (j >= K) break;
      prefetch_rows(p, format, n, R, C, j);
      for (int r = 0; r < R; r++) {
        const uint8_t *b = block_at(p, format, n + r, j);
        Scales s;
        read_scales(p, format, b, n + r, K, j, &s, mins[r] + j / 16);
        const __m256i levels = read_levels(format, b, 0);
        for (int t = 0; t < C; t++) {
          const __m256i q = _mm256_load_si256((const __m256i *)(a->q + (size_t)token[t] * K + j));
          part[r][t] = step(part[r][t], dot32(levels, q, sign), s.scale);
        }
      }
    }
    for (int r = 0; r < R; r++)
      for (int t = 0; t < C; t++) {
        acc[r][t] = fold(acc[r][t], part[r][t], a->lanes + (size_t)token[t] * L, j0 / 32);
        part[r][t] = _mm256_setzero_ps();
      }
  }
  finish_fused(acc, R, C, T, &mins[0][0], a, n, y, ldy, add);
}

/* Rows of the 8-token tile: 2, though their 32 float sums spill a little (0.94x the time of 1;
   the K-quant tile keeps fewer sums, FUSED_ROWS_8). */
enum { ROWS_8 = 2 };

int narrow_rows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add) {
  if (integer_scales(p->format)) return narrow_krows(p, K, a, T, y, ldy, n0, n1, add);
  int n = n0;
  if (T == 1)
    for (; n + FUSED_ROWS_1 <= n1; n += FUSED_ROWS_1) {
#define FUSED_1(F) fused_tile(p, F, K, a, 1, 1, n, FUSED_ROWS_1, y, ldy, add)
      BLOCK32_FORMAT(FUSED_1)
    }
  else if (T == 2)
    for (; n + FUSED_ROWS_2 <= n1; n += FUSED_ROWS_2) {
#define FUSED_2(F) fused_tile(p, F, K, a, 2, 2, n, FUSED_ROWS_2, y, ldy, add)
      BLOCK32_FORMAT(FUSED_2)
    }
  else if (T <= 4)
    for (; n + FUSED_ROWS_4 <= n1; n += FUSED_ROWS_4) {
#define FUSED_4(F) fused_tile(p, F, K, a, T, 4, n, FUSED_ROWS_4, y, ldy, add)
      BLOCK32_FORMAT(FUSED_4)
    }
  else if (FUSED_TOKENS > 4 && T <= 6) /* 32 registers: a draft reading lookup's path, a target's tree */
    for (; n + FUSED_ROWS_6 <= n1; n += FUSED_ROWS_6) {
#define FUSED_6(F) fused_tile(p, F, K, a, T, 6, n, FUSED_ROWS_6, y, ldy, add)
      BLOCK32_FORMAT(FUSED_6)
    }
  else if (FUSED_TOKENS > 4)
    for (; n + ROWS_8 <= n1; n += ROWS_8) {
#define FUSED_8(F) fused_tile(p, F, K, a, T, 8, n, ROWS_8, y, ldy, add)
      BLOCK32_FORMAT(FUSED_8)
    }
  return n; /* rows left over go to the wide route */
}
