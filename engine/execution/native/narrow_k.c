/* The narrow route (narrow.c) for the K-quants, whose sums stay integers through each
activation block (product.h): tiles for passes of 1, 2, 3, 4, 6 and 8 tokens, each compiled with
its shape as constants (a pass of 5 runs in the 6-token tile, 7 in the 8-token one). */
#include "narrow.h"

/* Rows n..n+R-1 against tokens 0..C-1 (token T-1 stands in for those past T; their results are
   dropped), in integers through each activation block. */
ALWAYS_INLINE void fused_ktile(const Part *p, int format, int K, const Acts *a, int T, int C, int n, int R, float *y,
                               int ldy, int add) {
  float acc[PAIRS8] = {0};
  int token[TILE_TOKENS];
  for (int t = 0; t < C; t++) token[t] = t < T ? t : T - 1;
  for (int j = 0; j < K; j += 256) {
    prefetch_rows(p, format, n, R, C, j);
    Scales s[FUSED_ROWS];
    const uint8_t *b[FUSED_ROWS];
    float d[8] = {0}, dmin[8] = {0};
    for (int r = 0; r < R; r++) {
      b[r] = block_at(p, format, n + r, j);
      read_scales(p, format, b[r], n + r, K, j, &s[r], NULL);
      d[r] = s[r].d, dmin[r] = s[r].dmin;
    }
#pragma GCC unroll 2
    for (int half = 0; half < 2; half++) { /* an activation block: 4 units */
      __m256i ia[FUSED_ROWS][TILE_TOKENS];
      const int16_t *mints[FUSED_ROWS];
      for (int r = 0; r < R; r++) {
        mints[r] = s[r].mints + 8 * half;
        for (int t = 0; t < C; t++) ia[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 4 /* k constant in each copy: the levels' reads are known */
        for (int k = 4 * half; k < 4 * half + 4; k++) {
          const __m256i levels = read_levels(format, b[r], k), ints = format_unit_ints(format, s[r].ints + 2 * k);
          for (int t = 0; t < C; t++) {
            const __m256i q = _mm256_load_si256((const __m256i *)(a->kq + (size_t)token[t] * K + j + 32 * k));
            ia[r][t] = idot(ia[r][t], levels, q, ints);
          }
        }
      }
      const int b = j / ACT_BLOCK + half;
      kblock(acc, ia, mints, d, dmin, a, token, a->block_qsums + (size_t)b * 4 * TILE_T,
             a->block_scales + (size_t)b * TILE_T, R, C, b); /* tokens 0..C-1: group 0 */
    }
  }
  kput(acc, R, C, C < T ? C : T, y + n, ldy, add);
}

/* Tiles of C tokens by R rows from row n on, while whole tiles fit; returns where they stopped. */
ALWAYS_INLINE int ktiles(const Part *p, int K, const Acts *a, int T, int C, int R, float *y, int ldy, int n, int n1,
                         int add) {
  for (; n + R <= n1; n += R) {
#define KTILE(F) fused_ktile(p, F, K, a, T, C, n, R, y, ldy, add)
    K_FORMAT(KTILE)
  }
  return n;
}

int narrow_krows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add) {
  if (T == 1) return ktiles(p, K, a, 1, 1, FUSED_ROWS_1, y, ldy, n0, n1, add);
  if (T == 2) return ktiles(p, K, a, 2, 2, FUSED_ROWS_2, y, ldy, n0, n1, add);
  if (T == 3) return ktiles(p, K, a, 3, 3, FUSED_ROWS_3, y, ldy, n0, n1, add);
  if (T == 4) return ktiles(p, K, a, 4, 4, FUSED_ROWS_4, y, ldy, n0, n1, add);
  if (T <= 6) return ktiles(p, K, a, T, 6, FUSED_ROWS_6, y, ldy, n0, n1, add);
  return ktiles(p, K, a, T, 8, FUSED_ROWS_8, y, ldy, n0, n1, add);
}
