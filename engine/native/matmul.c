/* Products of quantized activations (native.h's Acts) with matrices in their stored formats.

A block of rows is unpacked once (unpack.c: levels, a scale per 4 columns, a min per 16), then
multiplied with every token of the pass in tiles of up to ROWS rows by TOKENS tokens, so that
a prefill reads and unpacks each weight once per pass and a decoding pass once per token.

Per 64 columns (32 in the AVX2 build) of one row and one token: integer dot products of the
8-bit levels and activations in 16 (8) int32 lanes of 4 columns each, converted to float and
added with the weights' scale times the activations' scale of each lane; the mins times the
activations' sums of each 16 columns come off at the end. Integer sums are exact; the float
steps are the same, in the same order, for a (row, token) whatever the tile it falls in, the
pass width, the rows a thread takes or the other tokens: so a token's result in a 13-token
pass is bitwise its result in a one-token pass.

Two builds, chosen by the CPU the library is compiled for:
- AVX-512 with VNNI (Zen 4, Ice Lake, Sapphire Rapids and later): vpdpbusd, 64 products each.
- AVX2: maddubs + madd (8-bit levels of Q8_0/INT8 are signed there, with a sign trick).
Float formats (F32, F16, BF16) are multiplied in float32 with FMA.
*/
#include <immintrin.h>

#include "native.h"

enum { ROWS = 4, TOKENS = 4, BLOCK_BYTES = 192 << 10 };

#define ALWAYS_INLINE static inline __attribute__((always_inline))

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)

enum { UNIT = 64 }; /* columns per integer step */

ALWAYS_INLINE void int_tile(const uint8_t *w, size_t ldw, const Acts *a, int t0, int R, int C, int mins,
                            float *y, int ldy, int add) {
  const int P = a->padded, S = sums_per_row(P);
  __m512 acc[ROWS][TOKENS];
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) acc[r][t] = _mm512_setzero_ps();
  for (int u = 0; u < P / UNIT; u++)
    for (int r = 0; r < R; r++) {
      const __m512i levels = _mm512_load_si512(w + r * ldw + UNIT * u);
      const __m512 scale = _mm512_load_ps((const float *)(w + r * ldw + P) + 16 * u);
      for (int t = 0; t < C; t++) {
        const size_t at = (size_t)(t0 + t) * P + UNIT * u;
        __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), levels, _mm512_load_si512(a->q + at));
        __m512 both = _mm512_mul_ps(scale, _mm512_load_ps(a->lanes + at / 4));
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), both, acc[r][t]);
      }
    }
  for (int c = 0; mins && c < S; c += 16)
    for (int r = 0; r < R; r++) {
      const __m512 min = _mm512_load_ps((const float *)(w + r * ldw + 2 * (size_t)P) + c);
      for (int t = 0; t < C; t++)
        acc[r][t] = _mm512_fnmadd_ps(min, _mm512_load_ps(a->sums + (size_t)(t0 + t) * S + c), acc[r][t]);
    }
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) {
      float v = _mm512_reduce_add_ps(acc[r][t]), *out = y + (size_t)(t0 + t) * ldy + r;
      *out = add ? *out + v : v;
    }
}

ALWAYS_INLINE void float_tile(const float *w, int ldw, const Acts *a, int t0, int R, int C, float *y, int ldy,
                              int add) {
  const int K = a->cols;
  __m512 acc[ROWS][TOKENS];
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) acc[r][t] = _mm512_setzero_ps();
  for (int k = 0; k < K; k += 16)
    for (int r = 0; r < R; r++) {
      const __m512 wv = _mm512_load_ps(w + (size_t)r * ldw + k);
      for (int t = 0; t < C; t++)
        acc[r][t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(a->x + (size_t)(t0 + t) * K + k), acc[r][t]);
    }
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) {
      float v = _mm512_reduce_add_ps(acc[r][t]), *out = y + (size_t)(t0 + t) * ldy + r;
      *out = add ? *out + v : v;
    }
}

#else /* AVX2 and FMA */

enum { UNIT = 32 };

ALWAYS_INLINE float sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

ALWAYS_INLINE void int_tile(const uint8_t *w, size_t ldw, const Acts *a, int t0, int R, int C, int mins,
                            float *y, int ldy, int add) {
  const int P = a->padded, S = sums_per_row(P), sign = !mins; /* signed levels have no mins */
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[ROWS][TOKENS];
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) acc[r][t] = _mm256_setzero_ps();
  for (int u = 0; u < P / UNIT; u++)
    for (int r = 0; r < R; r++) {
      const __m256i levels = _mm256_load_si256((const __m256i *)(w + r * ldw + UNIT * u));
      const __m256i magnitude = sign ? _mm256_abs_epi8(levels) : levels;
      const __m256 scale = _mm256_load_ps((const float *)(w + r * ldw + P) + 8 * u);
      for (int t = 0; t < C; t++) {
        const size_t at = (size_t)(t0 + t) * P + UNIT * u;
        __m256i q = _mm256_load_si256((const __m256i *)(a->q + at));
        if (sign) q = _mm256_sign_epi8(q, levels);
        __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, q), ones);
        __m256 both = _mm256_mul_ps(scale, _mm256_load_ps(a->lanes + at / 4));
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), both, acc[r][t]);
      }
    }
  for (int c = 0; mins && c < S; c += 8)
    for (int r = 0; r < R; r++) {
      const __m256 min = _mm256_load_ps((const float *)(w + r * ldw + 2 * (size_t)P) + c);
      for (int t = 0; t < C; t++)
        acc[r][t] = _mm256_fnmadd_ps(min, _mm256_load_ps(a->sums + (size_t)(t0 + t) * S + c), acc[r][t]);
    }
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) {
      float v = sum8(acc[r][t]), *out = y + (size_t)(t0 + t) * ldy + r;
      *out = add ? *out + v : v;
    }
}

ALWAYS_INLINE void float_tile(const float *w, int ldw, const Acts *a, int t0, int R, int C, float *y, int ldy,
                              int add) {
  const int K = a->cols;
  __m256 acc[ROWS][TOKENS];
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) acc[r][t] = _mm256_setzero_ps();
  for (int k = 0; k < K; k += 8)
    for (int r = 0; r < R; r++) {
      const __m256 wv = _mm256_load_ps(w + (size_t)r * ldw + k);
      for (int t = 0; t < C; t++)
        acc[r][t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(a->x + (size_t)(t0 + t) * K + k), acc[r][t]);
    }
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) {
      float v = sum8(acc[r][t]), *out = y + (size_t)(t0 + t) * ldy + r;
      *out = add ? *out + v : v;
    }
}

#endif

/* Tiles of every shape up to ROWS x TOKENS, each compiled with its shape as constants. */
#define BY_TOKENS(TILE, R)                                                                         \
  switch (C) {                                                                                     \
    case 1: TILE(R, 1); break; case 2: TILE(R, 2); break; case 3: TILE(R, 3); break;               \
    default: TILE(R, 4); break;                                                                    \
  }
#define BY_SHAPE(TILE)                                                                             \
  switch (R) {                                                                                     \
    case 1: BY_TOKENS(TILE, 1) break; case 2: BY_TOKENS(TILE, 2) break;                            \
    case 3: BY_TOKENS(TILE, 3) break; default: BY_TOKENS(TILE, 4) break;                           \
  }

static void int_tiles(const uint8_t *w, size_t ldw, const Acts *a, int t0, int R, int C, int mins, float *y,
                      int ldy, int add) {
#define INT_TILE(R, C) int_tile(w, ldw, a, t0, R, C, mins, y, ldy, add)
  BY_SHAPE(INT_TILE)
}

static void float_tiles(const float *w, int ldw, const Acts *a, int t0, int R, int C, float *y, int ldy, int add) {
#define FLOAT_TILE(R, C) float_tile(w, ldw, a, t0, R, C, y, ldy, add)
  BY_SHAPE(FLOAT_TILE)
}

size_t matmul_scratch(int cols) {
  const size_t row = unpacked_row_bytes(F32, cols); /* the largest unpacked row */
  return (row * ROWS > BLOCK_BYTES ? row * ROWS : BLOCK_BYTES) + row + 64;
}

/* Rows n0..n1 of one part. A narrow pass unpacks one tile of rows at a time; a wide one a block
   that fits BLOCK_BYTES, which all of its tokens then pass over. */
static void part_product(const Part *p, int cols, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add,
                         void *scratch) {
  const size_t ldw = unpacked_row_bytes(p->format, cols);
  int block = ROWS;
  if (T > TOKENS && BLOCK_BYTES / ldw > ROWS) block = (int)(BLOCK_BYTES / ldw) / ROWS * ROWS;
  const int floats = is_float_format(p->format), mins = !floats && !has_signed_levels(p->format);
  for (int b0 = n0; b0 < n1; b0 += block) {
    const int rows = b0 + block < n1 ? block : n1 - b0;
    unpack_rows(p, cols, b0, rows, scratch);
    for (int t0 = 0; t0 < T; t0 += TOKENS) {
      const int C = T - t0 < TOKENS ? T - t0 : TOKENS;
      for (int r = 0; r < rows; r += ROWS) {
        const int R = rows - r < ROWS ? rows - r : ROWS;
        if (floats)
          float_tiles((const float *)scratch + (size_t)r * ldw / 4, (int)(ldw / 4), a, t0, R, C, y + b0 + r, ldy, add);
        else
          int_tiles((const uint8_t *)scratch + r * ldw, ldw, a, t0, R, C, mins, y + b0 + r, ldy, add);
      }
    }
  }
}

void matmul(const Matrix *w, const Acts *x, int T, float *y, int ldy, int n0, int n1, int add, void *scratch) {
  int base = 0;
  for (int i = 0; i < w->n_parts; i++) {
    const Part *p = &w->parts[i];
    const int a = n0 > base ? n0 : base, b = n1 < base + p->rows ? n1 : base + p->rows;
    if (a < b) part_product(p, w->cols, x, T, y + base, ldy, a - base, b - base, add, scratch);
    base += p->rows;
  }
}
