/* The narrow route (narrow.c) for the K-quants, whose sums stay integers through each
activation block (product.h): tiles for passes of 1, 2, 3, 4, 6 and 8 tokens, each compiled with
its shape as constants (a pass of 5 runs in the 6-token tile, 7 in the 8-token one). */
#include "narrow.h"

/* The same for the K-quants, in integers through each activation block (product.h). */
ALWAYS_INLINE void fused_ktile(const Part *p, int format, int K, const Acts *a, int T, int C, int n, int R, float *y,
                               int ldy, int add) {
  const int S = sums_per_row(K), L = lanes_per_row(K);
  float mins[FUSED_ROWS][S];
  __m256 acc[FUSED_ROWS][TILE_TOKENS];
  __m256i ia[FUSED_ROWS][TILE_TOKENS];
  int token[TILE_TOKENS];
  for (int t = 0; t < C; t++) token[t] = t < T ? t : T - 1;
  for (int r = 0; r < R; r++) {
    for (int t = 0; t < C; t++) acc[r][t] = _mm256_setzero_ps(), ia[r][t] = _mm256_setzero_si256();
    for (int i = K / 16; i < S; i++) mins[r][i] = 0;
  }
  const size_t ahead = 2 * (size_t)R * p->row_bytes;
  for (int j = 0; j < K; j += 256) {
    prefetch_rows(p, format, n, R, j, ahead);
    for (int r = 0; r < R; r++) {
      const uint8_t *b = block_at(p, format, n + r, j);
      Scales s;
      read_scales(p, format, b, n + r, K, j, &s, mins[r] + j / 16);
#pragma GCC unroll 8 /* k constant in each copy: the folds are known, the sums stay in registers */
      for (int k = 0; k < 8; k++) {
        const __m256i levels = read_levels(format, b, k), ints = unit_ints(s.ints + 2 * k);
        for (int t = 0; t < C; t++) {
          const __m256i q = _mm256_load_si256((const __m256i *)(a->q + (size_t)token[t] * K + j + 32 * k));
          ia[r][t] = idot(ia[r][t], levels, q, ints);
        }
        if (k % BLOCK_UNITS == BLOCK_UNITS - 1)
          for (int t = 0; t < C; t++) {
            acc[r][t] = ifold(acc[r][t], ia[r][t], s.d, a->lanes + (size_t)token[t] * L, j / 32 + k);
            ia[r][t] = _mm256_setzero_si256();
          }
      }
    }
  }
  finish_fused(acc, R, C, T, &mins[0][0], a, n, y, ldy, add);
}

int narrow_krows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add) {
  int n = n0;
#define KTILES(C, ROWS_PER)                                                                        \
  for (; n + ROWS_PER <= n1; n += ROWS_PER) {                                                      \
    switch (p->format) {                                                                           \
      case Q4_K: fused_ktile(p, Q4_K, K, a, T, C, n, ROWS_PER, y, ldy, add); break;                \
      case Q5_K: fused_ktile(p, Q5_K, K, a, T, C, n, ROWS_PER, y, ldy, add); break;                \
      default: fused_ktile(p, Q6_K, K, a, T, C, n, ROWS_PER, y, ldy, add); break;                  \
    }                                                                                              \
  }
  if (T == 1) KTILES(1, FUSED_ROWS_1)
  else if (T == 2) KTILES(2, FUSED_ROWS_2)
  else if (T == 3) KTILES(3, FUSED_ROWS_3)
  else if (T == 4) KTILES(4, FUSED_ROWS_4)
  else if (T <= 6) KTILES(6, FUSED_ROWS_6)
  else KTILES(8, FUSED_ROWS_8)
  return n;
}
