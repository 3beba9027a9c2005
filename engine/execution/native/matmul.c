/* Products of quantized activations (native.h's Acts, quantize.c) with matrices in their stored
formats (formats.h): the entry point, `matmul`, and the route of passes wider than FUSED_TOKENS.

Two routes, chosen by the pass width alone, with the same arithmetic (product.h), so that a
token's result in a 13-token pass is bitwise its result in a one-token pass:
- up to FUSED_TOKENS (8; 4 with 16 registers): narrow.c and narrow_k.c read each unit from the
  weights and multiply it at once;
- wider (here): a block of rows is unpacked once (levels, lane scales, mins) into scratch, and
  every token of the pass is multiplied with it in tiles of up to ROWS rows by TOKENS tokens.
Float formats (F32, F16, BF16) are multiplied here in float32 with FMA, for every width.
*/
#include "product.h"

/* ---- wider passes: a block of rows unpacked once, then tiles ---- */

/* An unpacked row (32-byte aligned): levels [K], then
   - formats of 32-column blocks: lane scales [K / 4] floats, mins [sums_per_row(K)];
   - K-quants: product.h's unpacked_ints and the rest;
   float formats: values [K]. */
static size_t scales_bytes(int format, int K) { return integer_scales(format) ? (size_t)K / 4 + (size_t)K / 32 : (size_t)K; }

static size_t unpacked_bytes(int format, int K) {
  if (is_float(format)) return 4 * (size_t)K;
  const size_t mins = integer_scales(format) ? 0 : 4 * (size_t)sums_per_row(K);
  return ((size_t)K + scales_bytes(format, K) + mins + 31) / 32 * 32;
}

ALWAYS_INLINE float *unpacked_mins(const uint8_t *row, int format, int K) {
  return (float *)(row + K + scales_bytes(format, K));
}

ALWAYS_INLINE void unpack_row(const Part *p, int format, int K, int row, uint8_t *out) {
  float *lanes = (float *)(out + K), *mins = unpacked_mins(out, format, K);
  const int per = block_columns(format);
  for (int j = 0; j < K; j += per) {
    const uint8_t *b = block_at(p, format, row, j);
    Scales s;
    read_scales(p, format, b, row, K, j, &s, mins + j / 16);
    if (integer_scales(format)) {
      memcpy(unpacked_ints(out, K) + j / 16, s.ints, sizeof s.ints);
      memcpy(unpacked_mints(out, K) + j / 16, s.mints, sizeof s.mints);
      unpacked_d(out, K)[j / 256] = s.d, unpacked_dmin(out, K)[j / 256] = s.dmin;
    }
    for (int k = 0; k < per / 32; k++) {
      _mm256_store_si256((__m256i *)(out + j + 32 * k), read_levels(format, b, k));
      if (!integer_scales(format)) _mm256_store_ps(lanes + (j + 32 * k) / 4, s.scale);
    }
  }
  for (int i = K / 16; i < sums_per_row(K) && !integer_scales(format); i++) mins[i] = 0;
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

/* A tile's results, its rows' mins `mins` bytes into each unpacked row. */
ALWAYS_INLINE void finish_unpacked(__m256 acc[][TILE_TOKENS], const uint8_t *w, size_t ldw, size_t mins, const Acts *a,
                                   int t0, int R, int C, float *y, int ldy, int add) {
  const int S = sums_per_row(a->cols);
  const float *row_mins[ROWS], *sums[TILE_TOKENS];
  for (int r = 0; r < R; r++) row_mins[r] = (const float *)(w + r * ldw + mins);
  for (int t = 0; t < C; t++) sums[t] = a->sums + (size_t)(t0 + t) * S;
  finish_tile(acc, R, C, C, row_mins, sums, S, y + (size_t)t0 * ldy, ldy, add);
}

ALWAYS_INLINE void int_tile(const uint8_t *w, size_t ldw, const Acts *a, int t0, int R, int C, int sign, float *y,
                            int ldy, int add) {
  const int K = a->cols, L = lanes_per_row(K);
  __m256 acc[ROWS][TILE_TOKENS];
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
  finish_unpacked(acc, w, ldw, 2 * (size_t)K, a, t0, R, C, y, ldy, add);
}

/* The integer sums I of one activation block (units u0..u0 + BLOCK_UNITS - 1) of a K-quant tile. */
ALWAYS_INLINE void block_sums(const uint8_t *w, size_t ldw, const Acts *a, int t0, int R, int C, int u0,
                              __m256i sums[][TILE_TOKENS]) {
  const int K = a->cols;
  Sums2 ia[ROWS][TILE_TOKENS];
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) ia[r][t] = zero2();
  for (int u = u0; u < u0 + BLOCK_UNITS; u += 2)
    for (int r = 0; r < R; r++) {
      const Units2 levels = load2(w + r * ldw + 32 * u), ints = ints2(unpacked_ints(w + r * ldw, K) + 2 * u);
      for (int t = 0; t < C; t++) ia[r][t] = idot2(ia[r][t], levels, load2(a->kq + (size_t)(t0 + t) * K + 32 * u), ints);
    }
  for (int r = 0; r < R; r++)
    for (int t = 0; t < C; t++) sums[r][t] = sum2(ia[r][t]);
}

/* The same as int_tile for the K-quants' unpacked rows, in integers through each activation block. */
ALWAYS_INLINE void int_ktile(const uint8_t *w, size_t ldw, const Acts *a, int t0, int R, int C, float *y, int ldy,
                             int add) {
  const int K = a->cols;
  float acc[PAIRS8] = {0};
  int token[TILE_TOKENS];
  for (int t = 0; t < C; t++) token[t] = t0 + t;
  for (int b = 0; b < K / ACT_BLOCK; b++) { /* K is a multiple of 256 */
    __m256i ia[ROWS][TILE_TOKENS];
    block_sums(w, ldw, a, t0, R, C, b * BLOCK_UNITS, ia);
    const int16_t *mints[ROWS];
    float d[8] = {0}, dmin[8] = {0};
    for (int r = 0; r < R; r++) {
      const uint8_t *row = w + r * ldw;
      mints[r] = unpacked_mints(row, K) + 8 * b, d[r] = unpacked_d(row, K)[b / 2], dmin[r] = unpacked_dmin(row, K)[b / 2];
    }
    const size_t at = (size_t)(t0 / TILE_T) * blocks_per_row(K) + b; /* the tile's group and block */
    kblock(acc, ia, mints, d, dmin, a, token, a->block_qsums + at * 4 * TILE_T + t0 % TILE_T,
           a->block_scales + at * TILE_T + t0 % TILE_T, R, C, b);
  }
  kput(acc, R, C, C, y + (size_t)t0 * ldy, ldy, add);
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

static void int_tiles(const uint8_t *w, size_t ldw, int format, const Acts *a, int t0, int R, int C, float *y,
                      int ldy, int add) {
#define SIGNED_TILE(R, C) int_tile(w, ldw, a, t0, R, C, 1, y, ldy, add)
#define INT_TILE(R, C) int_tile(w, ldw, a, t0, R, C, 0, y, ldy, add)
#define KQUANT_TILE(R, C) int_ktile(w, ldw, a, t0, R, C, y, ldy, add)
  if (integer_scales(format)) BY_SHAPE(KQUANT_TILE)
  else if (signed_levels(format)) BY_SHAPE(SIGNED_TILE)
  else BY_SHAPE(INT_TILE)
}

static void float_tiles(const float *w, int ldw, const Acts *a, int t0, int R, int C, float *y, int ldy, int add) {
#define FLOAT_TILE(R, C) float_tile(w, ldw, a, t0, R, C, y, ldy, add)
  BY_SHAPE(FLOAT_TILE)
}

size_t matmul_scratch(int cols) {
  const size_t f32 = unpacked_bytes(F32, cols), folded = amx_folded_bytes(Q6_K, cols);
  const size_t row = f32 > folded ? f32 : folded; /* the largest unpacked row */
  return (row * AMX_ROWS > BLOCK_BYTES ? row * AMX_ROWS : BLOCK_BYTES) + row + 64;
}

/* Rows n0..n1 of one part, for T > 1 (or a float format): blocks that fit BLOCK_BYTES, each
   unpacked once and multiplied with every token: K-quants in AMX tiles where passes of T
   tokens take them (amx.c; they read whole tiles of rows, past a block's last), else in tiles
   of registers. */
static void blocks(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add,
                   uint8_t *scratch) {
  const int amx = a->tiles && integer_scales(p->format), folded = amx && amx_folds(p->format, T);
  const int tile = amx ? AMX_ROWS : ROWS;
  const size_t ldw = folded ? amx_folded_bytes(p->format, K) : unpacked_bytes(p->format, K);
  const int block = BLOCK_BYTES / ldw > (size_t)tile ? (int)(BLOCK_BYTES / ldw) / tile * tile : tile;
  for (int b0 = n0; b0 < n1; b0 += block) {
    const int rows = b0 + block < n1 ? block : n1 - b0;
    if (folded) amx_fold_rows(p, K, b0, rows, scratch);
    else unpack_rows(p, K, b0, rows, scratch);
    if (amx) {
      amx_ktiles(scratch, ldw, p->format, a, T, rows, y + b0, ldy, add);
      continue;
    }
    for (int r = 0; r < rows; r += ROWS) { /* a tile's rows stay in L1 while the tokens pass */
      const int R = rows - r < ROWS ? rows - r : ROWS;
      for (int t0 = 0; t0 < T; t0 += TOKENS) {
        const int C = T - t0 < TOKENS ? T - t0 : TOKENS;
        if (is_float(p->format))
          float_tiles((const float *)(scratch + r * ldw), (int)(ldw / 4), a, t0, R, C, y + b0 + r, ldy, add);
        else
          int_tiles(scratch + r * ldw, ldw, p->format, a, t0, R, C, y + b0 + r, ldy, add);
      }
    }
  }
}

void matmul(const Matrix *w, const Acts *x, int T, float *y, int ldy, int n0, int n1, int add, void *scratch) {
  int base = 0;
  for (int i = 0; i < w->n_parts; i++) {
    const Part *p = &w->parts[i];
    const int a = n0 > base ? n0 : base, b = n1 < base + p->rows ? n1 : base + p->rows;
    if (p->format > PACKED) { /* every width on the repacked panels */
      if (a < b) packed_rows(p, w->cols, x, T, y + base, ldy, a - base, b - base, add);
      base += p->rows;
      continue;
    }
    const int tiles = x->tiles && integer_scales(p->format);
    const int panel = T >= PANEL_FROM && integer_scales(p->format) && !tiles;
    const int narrow = T <= FUSED_TOKENS && !is_float(p->format) && !tiles;
    int done = a - base;
    if (a < b && panel) done = panel_rows(p, w->cols, x, T, y + base, ldy, done, b - base, add);
    if (done < b - base && narrow) done = narrow_rows(p, w->cols, x, T, y + base, ldy, done, b - base, add);
    if (done < b - base) blocks(p, w->cols, x, T, y + base, ldy, done, b - base, add, scratch);
    base += p->rows;
  }
}

int acts_forms(const Matrix *w) {
  int forms = 0;
  for (int i = 0; i < w->n_parts; i++) {
    const int format = w->parts[i].format;
    forms |= integer_scales(format) || format > PACKED ? BLOCKS : is_float(format) ? 0 : LANES;
  }
  return forms;
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
  const float *lanes = (const float *)(unpacked + K), *mins = unpacked_mins(unpacked, p->format, K);
  for (int j = 0; j < K; j++) {
    const int level = signed_levels(p->format) ? (int8_t)unpacked[j] : unpacked[j];
    if (integer_scales(p->format)) { /* gguf-py's order: (d * sc) * level - dmin * m */
      const float d = unpacked_d(unpacked, K)[j / 256], dmin = unpacked_dmin(unpacked, K)[j / 256];
      out[j] = d * (float)unpacked_ints(unpacked, K)[j / 16] * (float)level -
               dmin * (float)unpacked_mints(unpacked, K)[j / 16];
    } else {
      out[j] = lanes[j / 4] * (float)level - mins[j / 16];
    }
  }
}
