/* Products of float32 activations with int4 and int8 matrices (native.h), row by row.

Batch invariance: each (token, row) result has its own accumulators, fed in the same order
whatever the tile it is computed in, so it does not depend on the pass width, on the rows a
thread takes or on the other tokens. Tiles of R rows by C tokens exist only to keep the
accumulators in registers; they are compile-time constants (the switch statements below).

Two builds of the same products, chosen by the CPU the library is compiled for:
- AVX-512 with BF16 and VNNI (Zen 4, Sapphire Rapids and later): an int4 group of 32 is
  looked up as bf16 values ((level - 8) * scale + zero, rounded) and multiplied with bf16
  activations by vdpbf16ps, 32 products per instruction with float32 sums. An int8 row is
  multiplied in integers by vpdpbusd: each activation row is split into two 8-bit parts with
  one scale (together ~16 bits, more than bf16's 8), integer sums are exact.
- AVX2 and FMA: everything in float32 (8 products per instruction).
*/
#include <immintrin.h>
#include <math.h>

#include "native.h"

#if defined(__AVX512BF16__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)

enum { INT4_TOKENS = 16, INT8_TOKENS = 8, MAX_ROWS = 4, ROW_BLOCK = 16 }; /* a tile's most tokens and rows */

/* ---- int4: bf16 products ---- */

/* A group's 16 possible weights, rounded to bf16, looked up by its 32 levels (even columns
   first, as the activations are laid out). */
static inline __attribute__((always_inline)) __m512bh int4_group(const Matrix *w, int n, int g) {
  const int G = w->cols / GROUP;
  const __m512 centred = _mm512_set_ps(7, 6, 5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8);
  __m512 values = _mm512_fmadd_ps(centred, _mm512_set1_ps(bf16_to_f32(w->scale[(size_t)n * G + g])),
                                  _mm512_set1_ps(bf16_to_f32(w->zero[(size_t)n * G + g])));
  __m512i table = _mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(values));
  __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(w->q + (size_t)n * w->cols / 2 + g * 16)));
  __m512i levels = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(bytes, _mm256_set1_epi16(15))),
                                      _mm256_srli_epi16(bytes, 4), 1);
  return (__m512bh)_mm512_permutexvar_epi16(levels, table);
}

static inline __attribute__((always_inline)) void int4_tile(const Matrix *w, const __m512bh *x, int R, int C,
                                                            int n, float *y, int ldy, int add) {
  const int G = w->cols / GROUP;
  __m512 acc[MAX_ROWS][INT4_TOKENS];
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) acc[r][t] = _mm512_setzero_ps();
  for (int g = 0; g < G; g++)
    for (int r = 0; r < R; r++) {
      __m512bh wv = int4_group(w, n + r, g);
      for (int t = 0; t < C; t++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], x[(size_t)t * G + g], wv);
    }
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) {
      float v = _mm512_reduce_add_ps(acc[r][t]), *out = y + (size_t)t * ldy + n + r;
      *out = add ? *out + v : v;
    }
}

/* ---- int8: integer products ---- */

/* Each token's row as two unsigned parts: x ~= scale * ((u1 - 128) + (u2 - 128) / 256). */
static void split_rows(const float *x, int T, int K, int padded, uint8_t *parts, float *scales) {
  for (int t = 0; t < T; t++) {
    const float *row = x + (size_t)t * K;
    uint8_t *u1 = parts + (size_t)2 * t * padded, *u2 = u1 + padded;
    float amax = 0;
    for (int k = 0; k < K; k++) amax = fabsf(row[k]) > amax ? fabsf(row[k]) : amax; /* not fmaxf: a libm call */
    float scale = amax > 0 ? amax / 127 : 1, inverse = 1 / scale;
    for (int k = 0; k < K; k++) {
      float q1 = nearbyintf(row[k] * inverse);
      float q2 = nearbyintf((row[k] - q1 * scale) * inverse * 256);
      q2 = q2 > 127 ? 127 : q2 < -127 ? -127 : q2;
      u1[k] = (uint8_t)(q1 + 128);
      u2[k] = (uint8_t)(q2 + 128);
    }
    for (int k = K; k < padded; k++) u1[k] = u2[k] = 0;
    scales[t] = scale;
  }
}

static inline __attribute__((always_inline)) void int8_tile(const Matrix *w, const uint8_t *parts, int padded,
                                                            const float *scales, int R, int C, int n, float *y,
                                                            int ldy, int add) {
  const int K = w->cols;
  __m512i acc[MAX_ROWS][2 * INT8_TOKENS]; /* [r][2t]: first part, [r][2t + 1]: second */
  for (int r = 0; r < R; r++)
    for (int j = 0; j < 2 * C; j++) acc[r][j] = _mm512_setzero_si512();
  for (int k = 0; k < K; k += 64) {
    __mmask64 live = K - k >= 64 ? ~0ULL : (1ULL << (K - k)) - 1;
    for (int r = 0; r < R; r++) {
      __m512i wv = _mm512_maskz_loadu_epi8(live, w->q + (size_t)(n + r) * K + k);
      for (int j = 0; j < 2 * C; j++)
        acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], _mm512_load_si512(parts + (size_t)j * padded + k), wv);
    }
  }
  for (int r = 0; r < R; r++) {
    const int32_t offset = 128 * w->row_sums[n + r];
    const float scale = bf16_to_f32(w->scale[n + r]);
    for (int t = 0; t < C; t++) {
      float high = (float)(_mm512_reduce_add_epi32(acc[r][2 * t]) - offset);
      float low = (float)(_mm512_reduce_add_epi32(acc[r][2 * t + 1]) - offset);
      float v = (high + low * (1.0f / 256)) * scales[t] * scale, *out = y + (size_t)t * ldy + n + r;
      *out = add ? *out + v : v;
    }
  }
}

/* ---- tiles ---- */

#define CASES_6(TILE, R)                                                                           \
    case 1: TILE(R, 1); break; case 2: TILE(R, 2); break; case 3: TILE(R, 3); break;               \
    case 4: TILE(R, 4); break; case 5: TILE(R, 5); break;
#define CASES_8(TILE, R)                                                                           \
    case 1: TILE(R, 1); break; case 2: TILE(R, 2); break; case 3: TILE(R, 3); break;               \
    case 4: TILE(R, 4); break; case 5: TILE(R, 5); break; case 6: TILE(R, 6); break;               \
    case 7: TILE(R, 7); break;
#define CASES_16(TILE, R)                                                                          \
    CASES_8(TILE, R) case 8: TILE(R, 8); break; case 9: TILE(R, 9); break;                         \
    case 10: TILE(R, 10); break; case 11: TILE(R, 11); break; case 12: TILE(R, 12); break;         \
    case 13: TILE(R, 13); break; case 14: TILE(R, 14); break; case 15: TILE(R, 15); break;
#define INT4_CASES(TILE, R) switch (C) { CASES_16(TILE, R) default: TILE(R, 16); break; }
#define INT8_CASES(TILE, R) switch (C) { CASES_8(TILE, R) default: TILE(R, 8); break; }

/* Rows n0..n1 against C tokens: R rows at a time while they fit, then one by one. */
#define ROWS(CASES, TILE, R)                                                                       \
  do {                                                                                             \
    int n = n0;                                                                                    \
    if ((R) == 4)                                                                                  \
      for (; n + 4 <= n1; n += 4) CASES(TILE, 4)                                                   \
    else if ((R) == 2)                                                                             \
      for (; n + 2 <= n1; n += 2) CASES(TILE, 2)                                                   \
    for (; n < n1; n++) CASES(TILE, 1)                                                             \
  } while (0)

static void int4_rows(const Matrix *w, const __m512bh *x, int C, int n0, int n1, float *y, int ldy, int add) {
#define INT4_TILE(R, C) int4_tile(w, x, R, C, n, y, ldy, add)
  ROWS(INT4_CASES, INT4_TILE, C <= 4 ? 4 : 1);
}

static void int8_rows(const Matrix *w, const uint8_t *parts, int padded, const float *scales, int C, int n0,
                      int n1, float *y, int ldy, int add) {
#define INT8_TILE(R, C) int8_tile(w, parts, padded, scales, R, C, n, y, ldy, add)
  ROWS(INT8_CASES, INT8_TILE, C <= 2 ? 4 : 1);
}

/* Prefill widths: the rows of a block are dequantized once into `block` (bf16 groups), then
   multiplied in tiles of up to 4 rows by 6 tokens, so that each weight and activation vector
   loaded feeds several products. A (row, token) result is the same sequence of vdpbf16ps over
   the same bf16 groups as in int4_tile, so it equals what a narrow pass computes. */
enum { GEMM_ROWS = 4, GEMM_TOKENS = 6 };

static inline __attribute__((always_inline)) void gemm_tile(const __m512bh *block, int G, const __m512bh *x, int R,
                                                            int C, int n, float *y, int ldy, int add) {
  __m512 acc[GEMM_ROWS][GEMM_TOKENS];
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) acc[r][t] = _mm512_setzero_ps();
  for (int g = 0; g < G; g++)
    for (int r = 0; r < R; r++) {
      __m512bh wv = block[(size_t)r * G + g];
      for (int t = 0; t < C; t++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], x[(size_t)t * G + g], wv);
    }
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) {
      float v = _mm512_reduce_add_ps(acc[r][t]), *out = y + (size_t)t * ldy + n + r;
      *out = add ? *out + v : v;
    }
}

static void int4_gemm(const Matrix *w, const __m512bh *x, int T, int n0, int n1, float *y, int ldy, int add,
                      __m512bh *block) {
  const int G = w->cols / GROUP;
  for (int b0 = n0; b0 < n1; b0 += ROW_BLOCK) {
    const int rows = b0 + ROW_BLOCK < n1 ? ROW_BLOCK : n1 - b0;
    for (int r = 0; r < rows; r++)
      for (int g = 0; g < G; g++) block[(size_t)r * G + g] = int4_group(w, b0 + r, g);
    for (int t0 = 0; t0 < T; t0 += GEMM_TOKENS) {
      const int C = T - t0 < GEMM_TOKENS ? T - t0 : GEMM_TOKENS;
      const __m512bh *xc = x + (size_t)t0 * G;
      float *yc = y + (size_t)t0 * ldy;
      for (int r = 0; r < rows; r += GEMM_ROWS) {
        const __m512bh *rc = block + (size_t)r * G;
#define GEMM_TILE(R, C) gemm_tile(rc, G, xc, R, C, b0 + r, yc, ldy, add)
        if (rows - r >= GEMM_ROWS) {
          switch (C) { CASES_6(GEMM_TILE, GEMM_ROWS) default: GEMM_TILE(GEMM_ROWS, 6); break; }
        } else {
#define GEMM_TILE_ONE(R, C) gemm_tile(rc, G, xc, R, C, one, yc, ldy, add)
          for (int one = b0 + r; one < b0 + rows; one++) {
            rc = block + (size_t)(one - b0) * G;
            switch (C) { CASES_6(GEMM_TILE_ONE, 1) default: GEMM_TILE_ONE(1, 6); break; }
          }
        }
      }
    }
  }
}

/* int4 activations: bf16, each group of 32 as (even columns, odd columns). */
static void to_bf16_groups(const float *x, int T, int K, __m512bh *out) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int t = 0; t < T; t++)
    for (int g = 0; g < K / GROUP; g++) {
      const float *src = x + (size_t)t * K + g * GROUP;
      __m512 lo = _mm512_loadu_ps(src), hi = _mm512_loadu_ps(src + 16);
      out[(size_t)t * (K / GROUP) + g] =
          _mm512_cvtne2ps_pbh(_mm512_permutex2var_ps(lo, odd, hi), _mm512_permutex2var_ps(lo, even, hi));
    }
}

void matmul(const Matrix *w, const float *x, int T, float *y, int ldy, int n0, int n1, int add, void *scratch) {
  const int K = w->cols, padded = (K + 63) / 64 * 64;
  if (w->format == INT4) {
    to_bf16_groups(x, T, K, scratch);
    if (T > INT4_TOKENS) { /* the block of dequantized rows follows the activations */
      int4_gemm(w, scratch, T, n0, n1, y, ldy, add, (__m512bh *)((char *)scratch + ((size_t)2 * T * K + 63) / 64 * 64));
      return;
    }
  } else {
    split_rows(x, T, K, padded, scratch, (float *)((uint8_t *)scratch + (size_t)2 * T * padded));
  }
  /* blocks of rows small enough to stay in cache while every chunk of tokens passes over them */
  for (int b0 = n0; b0 < n1; b0 += ROW_BLOCK) {
    const int b1 = b0 + ROW_BLOCK < n1 ? b0 + ROW_BLOCK : n1;
    if (w->format == INT4)
      for (int t0 = 0; t0 < T; t0 += INT4_TOKENS) {
        int C = T - t0 < INT4_TOKENS ? T - t0 : INT4_TOKENS;
        int4_rows(w, (const __m512bh *)scratch + (size_t)t0 * (K / GROUP), C, b0, b1, y + (size_t)t0 * ldy, ldy, add);
      }
    else
      for (int t0 = 0; t0 < T; t0 += INT8_TOKENS) {
        int C = T - t0 < INT8_TOKENS ? T - t0 : INT8_TOKENS;
        int8_rows(w, (const uint8_t *)scratch + (size_t)2 * t0 * padded, padded,
                  (const float *)((uint8_t *)scratch + (size_t)2 * T * padded) + t0, C, b0, b1,
                  y + (size_t)t0 * ldy, ldy, add);
      }
  }
}

#else /* AVX2 and FMA: float32 products */

enum { CHUNK = 4 }; /* tokens per pass over a row */

static inline float sum8(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_movehdup_ps(a));
  return _mm_cvtss_f32(a);
}

/* A group of 32 weights as four vectors of 8, each group's scale and zero applied. */
static inline void int4_group(const Matrix *w, int n, int g, __m256 out[4]) {
  const int G = w->cols / GROUP;
  const __m128i low4 = _mm_set1_epi8(15);
  __m128i b = _mm_loadu_si128((const __m128i *)(w->q + (size_t)n * w->cols / 2 + g * 16));
  __m128i lo = _mm_and_si128(b, low4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low4);
  float scale = bf16_to_f32(w->scale[(size_t)n * G + g]);
  __m256 fs = _mm256_set1_ps(scale), fz = _mm256_set1_ps(bf16_to_f32(w->zero[(size_t)n * G + g]) - 8 * scale);
  __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)}; /* even columns, then odd */
  for (int j = 0; j < 4; j++) out[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[j])), fs, fz);
}

static inline void int8_group(const Matrix *w, int n, int g, __m256 out[4]) {
  __m256i b = _mm256_loadu_si256((const __m256i *)(w->q + (size_t)n * w->cols + g * GROUP));
  __m128i b0 = _mm256_castsi256_si128(b), b1 = _mm256_extracti128_si256(b, 1);
  __m128i parts[4] = {b0, _mm_srli_si128(b0, 8), b1, _mm_srli_si128(b1, 8)};
  for (int j = 0; j < 4; j++) out[j] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[j]));
}

/* Rows against C (<= CHUNK) tokens, four accumulators per token; x is laid out as the
   weights come out of int4_group / int8_group. */
static inline __attribute__((always_inline)) void rows(const Matrix *w, const float *x, int C, int n0, int n1,
                                                       float *y, int ldy, int add) {
  const int K = w->cols, G = K / GROUP;
  for (int n = n0; n < n1; n++) {
    __m256 acc[CHUNK][4];
    for (int t = 0; t < C; t++)
      for (int j = 0; j < 4; j++) acc[t][j] = _mm256_setzero_ps();
    for (int g = 0; g < G; g++) {
      __m256 wv[4];
      if (w->format == INT4) int4_group(w, n, g, wv);
      else int8_group(w, n, g, wv);
      for (int t = 0; t < C; t++)
        for (int j = 0; j < 4; j++)
          acc[t][j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + (size_t)t * K + g * GROUP + 8 * j), wv[j], acc[t][j]);
    }
    const float scale = w->format == INT8 ? bf16_to_f32(w->scale[n]) : 1.0f;
    for (int t = 0; t < C; t++) {
      float v = sum8(_mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][1]), _mm256_add_ps(acc[t][2], acc[t][3]))) * scale;
      float *out = y + (size_t)t * ldy + n;
      *out = add ? *out + v : v;
    }
  }
}

void matmul(const Matrix *w, const float *x, int T, float *y, int ldy, int n0, int n1, int add, void *scratch) {
  if (n0 >= n1) return;
  const int K = w->cols;
  if (w->format == INT4) { /* each group of 32 as (even columns, odd columns), as the nibbles come */
    float *xp = scratch;
    for (int t = 0; t < T; t++)
      for (int g = 0; g < K; g += GROUP)
        for (int i = 0; i < GROUP / 2; i++) {
          xp[(size_t)t * K + g + i] = x[(size_t)t * K + g + 2 * i];
          xp[(size_t)t * K + g + GROUP / 2 + i] = x[(size_t)t * K + g + 2 * i + 1];
        }
    x = xp;
  }
  for (int t0 = 0; t0 < T; t0 += CHUNK) {
    const float *xc = x + (size_t)t0 * K;
    float *yc = y + (size_t)t0 * ldy;
    switch (T - t0 < CHUNK ? T - t0 : CHUNK) {
      case 1: rows(w, xc, 1, n0, n1, yc, ldy, add); break;
      case 2: rows(w, xc, 2, n0, n1, yc, ldy, add); break;
      case 3: rows(w, xc, 3, n0, n1, yc, ldy, add); break;
      default: rows(w, xc, CHUNK, n0, n1, yc, ldy, add); break;
    }
  }
}

#endif
