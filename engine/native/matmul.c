/* Products of quantized activations (native.h's Acts, quantize.c) with matrices in their stored
formats.

Per 32 columns (a unit) of one row and one token: an integer dot product of the 8-bit levels
(formats.h) and activations in 8 int32 lanes of 4 columns each, converted to float and added up
with the weights' lane scales; after each block of 4 units (128 columns: the activations'
block), that sum is added with the block's 8 activation lane scales; at the end the weights'
mins times the activations' sums of each 16 columns come off, and the 8 lanes are summed in a
fixed tree. Integer sums are exact, and the float steps are the same, in the same order, for a
(row, token) whatever the route, tile, pass width, thread or other tokens: so a token's result
in a 13-token pass is bitwise its result in a one-token pass.

Two routes, chosen by the pass width:
- up to 4 tokens: each unit is read from the weights and multiplied with every token at once
  (nothing is stored); a decoding pass is bound by reading the weights, so nothing else may
  cost much. The next rows are prefetched while these are multiplied.
- wider: a block of rows is unpacked once (levels, lane scales, mins) into scratch, and every
  token of the pass is multiplied with it in tiles of up to ROWS rows by TOKENS tokens.

The integer dot: vpdpbusd (AVX-512 VNNI, on 256-bit registers, as fast per byte as 512-bit
ones on Zen 4) or maddubs + madd (AVX2; int8 weights are signed there, with a sign trick).
Float formats (F32, F16, BF16) are multiplied in float32 with FMA.
*/
#include "formats.h"

/* Tiles keep two accumulators per (row, token): the block's sum and the row's. */
#if VNNI
enum { ROWS = 4, TOKENS = 4, FUSED_ROWS_1 = 4, FUSED_ROWS_2 = 2, FUSED_ROWS_4 = 2 }; /* 32 registers */
#else
enum { ROWS = 2, TOKENS = 2, FUSED_ROWS_1 = 4, FUSED_ROWS_2 = 2, FUSED_ROWS_4 = 1 }; /* 16 registers */
#endif
enum { FUSED_ROWS = 4, FUSED_TOKENS = 4, BLOCK_BYTES = 192 << 10, BLOCK_UNITS = ACT_BLOCK / 32 };

static int is_float(int format) { return format == F32 || format == F16 || format == BF16; }

ALWAYS_INLINE __m256i dot32(__m256i levels, __m256i q, int sign) {
#if VNNI
  (void)sign;
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), levels, q);
#else
  const __m256i pairs = sign ? _mm256_maddubs_epi16(_mm256_abs_epi8(levels), _mm256_sign_epi8(q, levels))
                             : _mm256_maddubs_epi16(levels, q);
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
#endif
}

/* part += float(dot) * weight lane scales */
ALWAYS_INLINE __m256 step(__m256 part, __m256i dot, __m256 scales) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scales, part);
}

/* After the last unit of an activation block (BLOCK_UNITS units, or the row's end; u: any of them):
   acc += part * the block's activation lane scales. */
ALWAYS_INLINE __m256 fold(__m256 acc, __m256 part, const float *act_lanes, int u) {
  return _mm256_fmadd_ps(part, _mm256_load_ps(act_lanes + u / BLOCK_UNITS * 8), acc);
}

ALWAYS_INLINE float sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* After every unit: the mins times the activations' sums, 8 at a time; then the lanes' sum. */
ALWAYS_INLINE float finish(__m256 acc, const float *mins, const float *sums, int S) {
  for (int c = 0; c < S; c += 8) acc = _mm256_fnmadd_ps(_mm256_loadu_ps(mins + c), _mm256_load_ps(sums + c), acc);
  return sum8(acc);
}

ALWAYS_INLINE void put(float *out, float v, int add) { *out = add ? *out + v : v; }

/* ---- up to 4 tokens: rows read and multiplied unit by unit, nothing stored ---- */

/* Rows n..n+R-1 against tokens 0..C-1 (token T-1 stands in for those past T; their results are
   dropped). */
ALWAYS_INLINE void fused_tile(const Part *p, int format, int K, const Acts *a, int T, int C, int n, int R, float *y,
                              int ldy, int add) {
  const int S = sums_per_row(K), L = lanes_per_row(K), per = block_columns(format), sign = signed_levels(format);
  float mins[FUSED_ROWS][S];
  __m256 acc[FUSED_ROWS][FUSED_TOKENS], part[FUSED_ROWS][FUSED_TOKENS];
  int token[FUSED_TOKENS];
  for (int t = 0; t < C; t++) token[t] = t < T ? t : T - 1;
  for (int r = 0; r < R; r++) {
    for (int t = 0; t < C; t++) acc[r][t] = part[r][t] = _mm256_setzero_ps();
    for (int i = K / 16; i < S; i++) mins[r][i] = 0;
  }
  const size_t ahead = 2 * (size_t)R * p->row_bytes; /* the next rows: fetched while these are multiplied */
  /* Rows interleaved block by block (independent chains for the out-of-order core); K-quant
     blocks hold 2 activation blocks, other formats' 4 blocks make one. */
  const int span = per > ACT_BLOCK ? per : ACT_BLOCK;
  for (int j0 = 0; j0 < K; j0 += span) {
#pragma GCC unroll 8
    for (int j = j0; j < j0 + span; j += per) {
      if (j >= K) break;
      { /* the rows lie one after another: one prefetch stream through them, as fast as they are read */
        const uint8_t *next = p->data + (size_t)n * p->row_bytes + ahead + (size_t)(j / per) * R * block_bytes(format);
        for (int line = 0; line < R * block_bytes(format); line += 64) _mm_prefetch((const char *)next + line, _MM_HINT_T0);
      }
      for (int r = 0; r < R; r++) {
        const uint8_t *b = block_at(p, format, n + r, j);
        Scales s;
        read_scales(p, format, b, n + r, K, j, &s, mins[r] + j / 16);
#pragma GCC unroll 8 /* k constant in each copy: the folds are known, the accumulators stay in registers */
        for (int k = 0; k < per / 32; k++) {
          const __m256i levels = read_levels(format, b, k);
          const __m256 scales = unit_scales(format, &s, k);
          for (int t = 0; t < C; t++) {
            const __m256i q = _mm256_load_si256((const __m256i *)(a->q + (size_t)token[t] * K + j + 32 * k));
            part[r][t] = step(part[r][t], dot32(levels, q, sign), scales);
          }
          if (per == 256 && k % BLOCK_UNITS == BLOCK_UNITS - 1) /* an activation block ends in a K-quant block */
            for (int t = 0; t < C; t++) {
              acc[r][t] = fold(acc[r][t], part[r][t], a->lanes + (size_t)token[t] * L, j / 32 + k);
              part[r][t] = _mm256_setzero_ps();
            }
        }
      }
    }
    if (per != 256) /* the activation block of these blocks ends */
      for (int r = 0; r < R; r++)
        for (int t = 0; t < C; t++) {
          acc[r][t] = fold(acc[r][t], part[r][t], a->lanes + (size_t)token[t] * L, j0 / 32);
          part[r][t] = _mm256_setzero_ps();
        }
  }
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C && t < T; t++)
      put(y + (size_t)t * ldy + n + r, finish(acc[r][t], mins[r], a->sums + (size_t)t * S, S), add);
}

/* Each format gets its own copy of fused_tile, with the format a constant. */
#define BY_FORMAT(CALL)                                                                            \
  switch (p->format) {                                                                             \
    case Q4_0: CALL(Q4_0); break; case Q4_1: CALL(Q4_1); break; case Q5_0: CALL(Q5_0); break;      \
    case Q5_1: CALL(Q5_1); break; case Q8_0: CALL(Q8_0); break; case Q4_K: CALL(Q4_K); break;      \
    case Q5_K: CALL(Q5_K); break; case Q6_K: CALL(Q6_K); break; case INT4: CALL(INT4); break;      \
    default: CALL(INT8); break;                                                                    \
  }

/* Rows n0..n1 in tiles of rows by all T <= 4 tokens; returns where it stopped (the rows left
   over, fewer than a tile, go to the block route). */
static int fused(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add) {
  int n = n0;
  if (T == 1)
    for (; n + FUSED_ROWS_1 <= n1; n += FUSED_ROWS_1) {
#define FUSED_1(F) fused_tile(p, F, K, a, 1, 1, n, FUSED_ROWS_1, y, ldy, add)
      BY_FORMAT(FUSED_1)
    }
  else if (T == 2)
    for (; n + FUSED_ROWS_2 <= n1; n += FUSED_ROWS_2) {
#define FUSED_2(F) fused_tile(p, F, K, a, 2, 2, n, FUSED_ROWS_2, y, ldy, add)
      BY_FORMAT(FUSED_2)
    }
  else
    for (; n + FUSED_ROWS_4 <= n1; n += FUSED_ROWS_4) {
#define FUSED_4(F) fused_tile(p, F, K, a, T, 4, n, FUSED_ROWS_4, y, ldy, add)
      BY_FORMAT(FUSED_4)
    }
  return n;
}

/* ---- wider passes: a block of rows unpacked once, then tiles ---- */

/* An unpacked row: levels [K], lane scales [K / 4], mins [sums_per_row(K)]; float formats:
   values [K]. */
static size_t unpacked_bytes(int format, int K) {
  return is_float(format) ? 4 * (size_t)K : 2 * (size_t)K + 4 * (size_t)sums_per_row(K);
}

ALWAYS_INLINE void unpack_row(const Part *p, int format, int K, int row, uint8_t *out) {
  float *lanes = (float *)(out + K), *mins = (float *)(out + 2 * (size_t)K);
  const int per = block_columns(format);
  for (int j = 0; j < K; j += per) {
    const uint8_t *b = block_at(p, format, row, j);
    Scales s;
    read_scales(p, format, b, row, K, j, &s, mins + j / 16);
    for (int k = 0; k < per / 32; k++) {
      _mm256_store_si256((__m256i *)(out + j + 32 * k), read_levels(format, b, k));
      _mm256_store_ps(lanes + (j + 32 * k) / 4, unit_scales(format, &s, k));
    }
  }
  for (int i = K / 16; i < sums_per_row(K); i++) mins[i] = 0;
}

static void unpack_float_row(const Part *p, int K, int row, float *out) {
  const uint8_t *b = p->data + (size_t)row * p->row_bytes;
  if (p->format == F32) memcpy(out, b, 4 * (size_t)K);
  for (int j = 0; j < K && p->format != F32; j++) {
    const uint16_t h = (uint16_t)(b[2 * j] | b[2 * j + 1] << 8);
    out[j] = p->format == F16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
}

static void unpack_rows(const Part *p, int K, int r0, int rows, uint8_t *out) {
  const size_t ldw = unpacked_bytes(p->format, K);
  for (int r = 0; r < rows; r++) {
    if (is_float(p->format)) {
      unpack_float_row(p, K, r0 + r, (float *)(out + r * ldw));
      continue;
    }
#define UNPACK(F) unpack_row(p, F, K, r0 + r, out + r * ldw)
    BY_FORMAT(UNPACK)
  }
}

ALWAYS_INLINE void int_tile(const uint8_t *w, size_t ldw, const Acts *a, int t0, int R, int C, int sign, float *y,
                            int ldy, int add) {
  const int K = a->cols, S = sums_per_row(K), L = lanes_per_row(K);
  __m256 acc[ROWS][TOKENS];
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) acc[r][t] = _mm256_setzero_ps();
  for (int u0 = 0; u0 < K / 32; u0 += BLOCK_UNITS) { /* an activation block */
    const int u1 = u0 + BLOCK_UNITS < K / 32 ? u0 + BLOCK_UNITS : K / 32;
    __m256 part[ROWS][TOKENS];
    for (int r = 0; r < R; r++)
      for (int t = 0; t < C; t++) part[r][t] = _mm256_setzero_ps();
    for (int u = u0; u < u1; u++)
      for (int r = 0; r < R; r++) {
        const __m256i levels = _mm256_load_si256((const __m256i *)(w + r * ldw + 32 * u));
        const __m256 scales = _mm256_load_ps((const float *)(w + r * ldw + K) + 8 * u);
        for (int t = 0; t < C; t++) {
          const __m256i q = _mm256_load_si256((const __m256i *)(a->q + (size_t)(t0 + t) * K + 32 * u));
          part[r][t] = step(part[r][t], dot32(levels, q, sign), scales);
        }
      }
    for (int r = 0; r < R; r++)
      for (int t = 0; t < C; t++) acc[r][t] = fold(acc[r][t], part[r][t], a->lanes + (size_t)(t0 + t) * L, u1 - 1);
  }
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++)
      put(y + (size_t)(t0 + t) * ldy + r,
          finish(acc[r][t], (const float *)(w + r * ldw + 2 * (size_t)K), a->sums + (size_t)(t0 + t) * S, S), add);
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
    for (int t = 0; t < C; t++) put(y + (size_t)(t0 + t) * ldy + r, sum8(acc[r][t]), add);
}

/* Tiles of every shape up to ROWS x TOKENS, each compiled with its shape as constants. */
#if VNNI
#define BY_TOKENS(TILE, R)                                                                         \
  switch (C) {                                                                                     \
    case 1: TILE(R, 1); break; case 2: TILE(R, 2); break; case 3: TILE(R, 3); break;               \
    default: TILE(R, 4); break;                                                                    \
  }
#else
#define BY_TOKENS(TILE, R)                                                                         \
  switch (C) {                                                                                     \
    case 1: TILE(R, 1); break; default: TILE(R, 2); break;                                         \
  }
#endif
#if VNNI
#define BY_SHAPE(TILE)                                                                             \
  switch (R) {                                                                                     \
    case 1: BY_TOKENS(TILE, 1) break; case 2: BY_TOKENS(TILE, 2) break;                            \
    case 3: BY_TOKENS(TILE, 3) break; default: BY_TOKENS(TILE, 4) break;                           \
  }
#else
#define BY_SHAPE(TILE)                                                                             \
  switch (R) {                                                                                     \
    case 1: BY_TOKENS(TILE, 1) break; default: BY_TOKENS(TILE, 2) break;                           \
  }
#endif

static void int_tiles(const uint8_t *w, size_t ldw, const Acts *a, int t0, int R, int C, int sign, float *y,
                      int ldy, int add) {
#define SIGNED_TILE(R, C) int_tile(w, ldw, a, t0, R, C, 1, y, ldy, add)
#define INT_TILE(R, C) int_tile(w, ldw, a, t0, R, C, 0, y, ldy, add)
  if (sign) BY_SHAPE(SIGNED_TILE)
  else BY_SHAPE(INT_TILE)
}

static void float_tiles(const float *w, int ldw, const Acts *a, int t0, int R, int C, float *y, int ldy, int add) {
#define FLOAT_TILE(R, C) float_tile(w, ldw, a, t0, R, C, y, ldy, add)
  BY_SHAPE(FLOAT_TILE)
}

size_t matmul_scratch(int cols) {
  const size_t row = unpacked_bytes(F32, cols); /* the largest unpacked row */
  return (row * ROWS > BLOCK_BYTES ? row * ROWS : BLOCK_BYTES) + row + 64;
}

/* Rows n0..n1 of one part, for T > 1 (or a float format): blocks that fit BLOCK_BYTES, each
   unpacked once and multiplied with every token. */
static void blocks(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add,
                   uint8_t *scratch) {
  const size_t ldw = unpacked_bytes(p->format, K);
  const int block = BLOCK_BYTES / ldw > ROWS ? (int)(BLOCK_BYTES / ldw) / ROWS * ROWS : ROWS;
  const int sign = !is_float(p->format) && signed_levels(p->format);
  for (int b0 = n0; b0 < n1; b0 += block) {
    const int rows = b0 + block < n1 ? block : n1 - b0;
    unpack_rows(p, K, b0, rows, scratch);
    for (int t0 = 0; t0 < T; t0 += TOKENS) {
      const int C = T - t0 < TOKENS ? T - t0 : TOKENS;
      for (int r = 0; r < rows; r += ROWS) {
        const int R = rows - r < ROWS ? rows - r : ROWS;
        if (is_float(p->format))
          float_tiles((const float *)(scratch + r * ldw), (int)(ldw / 4), a, t0, R, C, y + b0 + r, ldy, add);
        else
          int_tiles(scratch + r * ldw, ldw, a, t0, R, C, sign, y + b0 + r, ldy, add);
      }
    }
  }
}

void matmul(const Matrix *w, const Acts *x, int T, float *y, int ldy, int n0, int n1, int add, void *scratch) {
  int base = 0;
  for (int i = 0; i < w->n_parts; i++) {
    const Part *p = &w->parts[i];
    const int a = n0 > base ? n0 : base, b = n1 < base + p->rows ? n1 : base + p->rows;
    int done = a - base;
    if (a < b && T <= FUSED_TOKENS && !is_float(p->format)) done = fused(p, w->cols, x, T, y + base, ldy, done, b - base, add);
    if (done < b - base) blocks(p, w->cols, x, T, y + base, ldy, done, b - base, add, scratch);
    base += p->rows;
  }
}

void dequantize_row(const Matrix *w, int row, float *out) {
  int part = 0;
  while (part < w->n_parts - 1 && row >= w->parts[part].rows) row -= w->parts[part++].rows;
  const Part *p = &w->parts[part];
  const int K = w->cols;
  if (is_float(p->format)) {
    unpack_float_row(p, K, row, out);
    return;
  }
  uint8_t unpacked[unpacked_bytes(p->format, K)] __attribute__((aligned(32)));
  unpack_rows(p, K, row, 1, unpacked);
  const float *lanes = (const float *)(unpacked + K), *mins = (const float *)(unpacked + 2 * (size_t)K);
  for (int j = 0; j < K; j++) {
    const int level = signed_levels(p->format) ? (int8_t)unpacked[j] : unpacked[j];
    out[j] = lanes[j / 4] * (float)level - mins[j / 16];
  }
}
