/* The products of passes of up to 4 tokens (decoding, short verification): each 32-column
unit of a row is read from the weights and multiplied with every token at once, nothing is
stored; rows are taken a few at a time, interleaved block by block (independent chains for the
out-of-order core), and the rows after them are prefetched in one sequential stream. A decoding
pass is bound by reading the weights, so nothing else may cost much. The arithmetic is
product.h's, as the wide route's (matmul.c).
*/
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
  take_mins(acc, R, C, row_mins, sums, S);
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C && t < T; t++) put(y + (size_t)t * ldy + n + r, sum8(acc[r][t]), add);
}

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
  const size_t ahead = 2 * (size_t)R * p->row_bytes; /* the next rows: fetched while these are multiplied */
  /* Rows interleaved block by block (independent chains for the out-of-order core); 4 blocks
     make an activation block. */
  for (int j0 = 0; j0 < K; j0 += ACT_BLOCK) {
#pragma GCC unroll 4
    for (int j = j0; j < j0 + ACT_BLOCK; j += 32) {
      if (j >= K) break;
      prefetch_rows(p, format, n, R, j, ahead);
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

int narrow_rows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add) {
  int n = n0;
  if (T == 1)
    for (; n + FUSED_ROWS_1 <= n1; n += FUSED_ROWS_1) {
#define FUSED_1(F) fused_tile(p, F, K, a, 1, 1, n, FUSED_ROWS_1, y, ldy, add)
#define KFUSED_1(F) fused_ktile(p, F, K, a, 1, 1, n, FUSED_ROWS_1, y, ldy, add)
      BY_FORMAT(FUSED_1, KFUSED_1)
    }
  else if (T == 2)
    for (; n + FUSED_ROWS_2 <= n1; n += FUSED_ROWS_2) {
#define FUSED_2(F) fused_tile(p, F, K, a, 2, 2, n, FUSED_ROWS_2, y, ldy, add)
#define KFUSED_2(F) fused_ktile(p, F, K, a, 2, 2, n, FUSED_ROWS_2, y, ldy, add)
      BY_FORMAT(FUSED_2, KFUSED_2)
    }
  else if (T <= 4)
    for (; n + FUSED_ROWS_4 <= n1; n += FUSED_ROWS_4) {
#define FUSED_4(F) fused_tile(p, F, K, a, T, 4, n, FUSED_ROWS_4, y, ldy, add)
#define KFUSED_4(F) fused_ktile(p, F, K, a, T, 4, n, FUSED_ROWS_4, y, ldy, add)
      BY_FORMAT(FUSED_4, KFUSED_4)
    }
  else if (integer_scales(p->format)) /* other formats' wider passes go to the wide route (compile time) */
    for (; n + FUSED_ROWS_8 <= n1; n += FUSED_ROWS_8) {
#define KFUSED_8(F) fused_ktile(p, F, K, a, T, 8, n, FUSED_ROWS_8, y, ldy, add)
      switch (p->format) {
        case Q4_K: KFUSED_8(Q4_K); break; case Q5_K: KFUSED_8(Q5_K); break; default: KFUSED_8(Q6_K); break;
      }
    }
  return n;
}

