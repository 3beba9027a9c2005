/* The arithmetic every route of the products shares (narrow.c, narrow_k.c, matmul.c, amx.c), so that
a (row, token) rounds alike whichever computes it.

Formats of 32-column blocks, per 32 columns (a unit) of one row and one token: an integer dot
product of the 8-bit levels (formats.h) and activations in 8 int32 lanes of 4 columns each
(vpdpbusd with AVX-512 VNNI, on 256-bit registers; maddubs + madd with AVX2, where int8
weights are signed, with a sign trick), converted to float and added up with the weights' lane
scales; after each block of BLOCK_UNITS units (the activations' block, quantize.c), that sum is
added with the block's 8 activation lane scales; at the end the weights' mins times the
activations' sums of each 16 columns come off, and the 8 lanes are summed in a fixed tree.
The K-quants (Q4_K, Q5_K, Q6_K), whose scales and mins are integers (formats.h), and whose
activations have one scale per block, stay in integers for a whole activation block instead:
I, the levels times the activations times the integer scales, and M, the integer mins times
the activations' 16-column sums. Per unit: the levels times the activations in 16-bit column
pairs (maddubs: at most 2 * 63 * 127, no saturation), times the unit's integer scales, added to
8 int32 lanes (vpdpwssd; madd + add with AVX2), the lanes summed after the block; on the AMX
route (amx.c), TDPBUSDs over rows with the integer scales folded in, 16 tokens at a time.
Either way the same integers, and then the same float steps per (row, token): acc += I * (d * s), then
acc -= M * (dmin * s), each one fused multiply-add, s the token's block scale (kfold).
Integer sums are exact, and the float steps are the same, in the same order, whatever the
route, tile, pass width, thread or other tokens. */
#ifndef DRAFTLINE_PRODUCT_H
#define DRAFTLINE_PRODUCT_H

#include "formats.h"

/* Tiles (rows x tokens) sized to the registers: ROWS x TOKENS in the wide route (matmul.c);
   FUSED_ROWS_n rows for a pass of n tokens in the narrow route, which takes passes of up to
   FUSED_TOKENS tokens. */
#if VNNI /* 32 registers */
enum { ROWS = 4, TOKENS = 4, FUSED_TOKENS = 8, PANEL_FROM = FUSED_TOKENS + 1 };
enum { FUSED_ROWS_1 = 4, FUSED_ROWS_2 = 2, FUSED_ROWS_3 = 4, FUSED_ROWS_4 = 3, FUSED_ROWS_6 = 2, FUSED_ROWS_8 = 1 };
#else /* 16 registers */
enum { ROWS = 2, TOKENS = 2, FUSED_TOKENS = 4, PANEL_FROM = 2 };
enum { FUSED_ROWS_1 = 4, FUSED_ROWS_2 = 2, FUSED_ROWS_3 = 1, FUSED_ROWS_4 = 1, FUSED_ROWS_6 = 1, FUSED_ROWS_8 = 1 };
#endif
enum { FUSED_ROWS = 4, TILE_TOKENS = 8, BLOCK_BYTES = 192 << 10, BLOCK_UNITS = ACT_BLOCK / 32 };

ALWAYS_INLINE int is_float(int format) { return format == F32 || format == F16 || format == BF16; }

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

/* K-quants: ia += 16-bit sums of column pairs * integer scales, into int32 lanes. */
ALWAYS_INLINE __m256i scaled_add(__m256i ia, __m256i pairs, __m256i ints) {
#if VNNI
  return _mm256_dpwssd_epi32(ia, pairs, ints);
#else
  return _mm256_add_epi32(ia, _mm256_madd_epi16(pairs, ints));
#endif
}

/* K-quants: ia += (levels . q per column pair) * the unit's integer scales. */
ALWAYS_INLINE __m256i idot(__m256i ia, __m256i levels, __m256i q, __m256i ints) {
  return scaled_add(ia, _mm256_maddubs_epi16(levels, q), ints);
}

/* K-quant sums two units at a time: in 512-bit registers where AVX-512BW multiplies bytes (at
   full width on Intel's server cores, in two halves on Zen 4), the halves added at the end of
   an activation block; else unit after unit in one 256-bit sum. Integers either way: the same
   sums. */
#if VNNI && defined(__AVX512BW__)
typedef __m512i Units2; /* two units' levels, activations or integer scales */
typedef __m512i Sums2;
ALWAYS_INLINE Units2 units2(__m256i first, __m256i second) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(first), second, 1);
}
ALWAYS_INLINE Units2 load2(const void *p) { return _mm512_loadu_si512(p); }
ALWAYS_INLINE Units2 ints2(const int16_t *four) { /* unit_ints of two units */
  int64_t all;
  memcpy(&all, four, 8);
  const __m512i pick = _mm512_set_epi32(0x07060706, 0x07060706, 0x07060706, 0x07060706, 0x05040504, 0x05040504,
                                        0x05040504, 0x05040504, 0x03020302, 0x03020302, 0x03020302, 0x03020302,
                                        0x01000100, 0x01000100, 0x01000100, 0x01000100);
  return _mm512_shuffle_epi8(_mm512_set1_epi64(all), pick);
}
ALWAYS_INLINE Sums2 zero2(void) { return _mm512_setzero_si512(); }
ALWAYS_INLINE Sums2 idot2(Sums2 ia, Units2 levels, Units2 q, Units2 ints) {
  return _mm512_dpwssd_epi32(ia, _mm512_maddubs_epi16(levels, q), ints);
}
ALWAYS_INLINE __m256i sum2(Sums2 ia) {
  return _mm256_add_epi32(_mm512_castsi512_si256(ia), _mm512_extracti64x4_epi64(ia, 1));
}
#else
typedef struct {
  __m256i unit[2];
} Units2;
typedef __m256i Sums2;
ALWAYS_INLINE Units2 units2(__m256i first, __m256i second) { return (Units2){{first, second}}; }
ALWAYS_INLINE Units2 load2(const void *p) {
  return units2(_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)p + 1));
}
ALWAYS_INLINE Units2 ints2(const int16_t *four) { return units2(unit_ints(four), unit_ints(four + 2)); }
ALWAYS_INLINE Sums2 zero2(void) { return _mm256_setzero_si256(); }
ALWAYS_INLINE Sums2 idot2(Sums2 ia, Units2 levels, Units2 q, Units2 ints) {
  return idot(idot(ia, levels.unit[0], q.unit[0], ints.unit[0]), levels.unit[1], q.unit[1], ints.unit[1]);
}
ALWAYS_INLINE __m256i sum2(Sums2 ia) { return ia; }
#endif

/* K-quants, after an activation block: acc += I * (d * s), then acc -= M * (dmin * s), lane by
   lane (each lane one (row, token); amx.c does the same on 16 tokens at once). */
ALWAYS_INLINE __m256 kfold(__m256 acc, __m256i I, __m256i M, __m256 d, __m256 dmin, __m256 s) {
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(d, s), acc);
  return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(dmin, s), acc);
}

/* All ones in the lanes whose bits are set. */
ALWAYS_INLINE __m256i lane_mask(int lanes) {
  return _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_set1_epi32(lanes), _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128)),
                            _mm256_setzero_si256());
}

/* The lane sums of 8 vectors, in one (lane i: v[i]'s); integers, so the order does not matter. */
ALWAYS_INLINE __m256i totals8(const __m256i v[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

enum { PAIRS = FUSED_ROWS * TILE_TOKENS, PAIRS8 = PAIRS + 8 }; /* (row, token) pairs of a tile, at most */

/* M of one row for 8 tokens of a group (lanes), from their pairs of 16-column sums (Acts'
   block_qsums, at `pairs`) and the row's 8 integer mins of the block. */
ALWAYS_INLINE __m256i row_mins(const int32_t *pairs, const int16_t *mints) {
  __m256i M = _mm256_setzero_si256();
  for (int p = 0; p < 4; p++) {
    int32_t both;
    memcpy(&both, mints + 2 * p, 4);
#if VNNI
    M = _mm256_dpwssd_epi32(M, _mm256_loadu_si256((const __m256i *)(pairs + p * TILE_T)), _mm256_set1_epi32(both));
#else
    M = _mm256_add_epi32(M, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(pairs + p * TILE_T)),
                                              _mm256_set1_epi32(both)));
#endif
  }
  return M;
}

/* K-quants: the step of an activation block b for a tile of R rows by C tokens, each lane of
   its vectors one pair (r * C + t): ia[r][t] holds I in 8 lanes; each row's 8 integer mins of
   the block at mints[r], its d and dmin at d[r], dmin[r] (8 readable); the tokens' a->qsums
   rows token[t]; `pairs` and `s`, the tile's first token's block_qsums and block_scales in the
   block (8 tokens readable); acc[r * C + t] gets kfold. One token (plain decoding's tile):
   each row's M from one vpmaddwd, in one lane sum with the rows' I, folded in registers; more
   tokens: M from the 16-column sums of 8 tokens at once. */
ALWAYS_INLINE void kblock(float *acc, __m256i ia[][TILE_TOKENS], const int16_t *const mints[], const float *d,
                          const float *dmin, const Acts *a, const int *token, const int32_t *pairs, const float *s,
                          int R, int C, int b) {
  const int P = R * C;
  __m256i v[PAIRS + 8];
  if (C == 1) {
    _Static_assert(FUSED_ROWS_1 <= 4 && ROWS <= 4, "a one-token tile's I and M fill one lane sum");
    const int16_t *sums16 = a->qsums + (size_t)token[0] * sums_per_row(a->cols) + 8 * b;
    const __m128i qsums = _mm_load_si128((const __m128i *)sums16);
    for (int r = 0; r < R; r++) {
      v[r] = ia[r][0];
      v[R + r] = _mm256_zextsi128_si256(_mm_madd_epi16(_mm_loadu_si128((const __m128i *)mints[r]), qsums));
    }
    for (int i = 2 * R; i < 8; i++) v[i] = _mm256_setzero_si256();
    const __m256i sums = totals8(v); /* lanes 0..R-1: the rows' I; R..2R-1: their M */
    const __m128i I = _mm256_castsi256_si128(sums);
    const __m256i at_m = _mm256_setr_epi32(R, R + 1, R + 2, R + 3, 0, 0, 0, 0);
    const __m128i M = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(sums, at_m));
    const __m128 scale = _mm_set1_ps(s[0]);
    __m128 rows = _mm_loadu_ps(acc); /* kfold's steps, lane for lane (lanes past R: d and dmin 0, unread) */
    rows = _mm_fmadd_ps(_mm_cvtepi32_ps(I), _mm_mul_ps(_mm_loadu_ps(d), scale), rows);
    rows = _mm_fnmadd_ps(_mm_cvtepi32_ps(M), _mm_mul_ps(_mm_loadu_ps(dmin), scale), rows);
    _mm_storeu_ps(acc, rows);
    return;
  }
  const int n = (P + 7) / 8 * 8;
  __m256i by_token[FUSED_ROWS] /* ROWS <= FUSED_ROWS */;
  int32_t totals[PAIRS + 8] __attribute__((aligned(32)));
  for (int r = 0; r < R; r++) {
    for (int t = 0; t < C; t++) v[r * C + t] = ia[r][t];
    by_token[r] = row_mins(pairs, mints[r]);
  }
  for (int i = P; i < n; i++) v[i] = _mm256_setzero_si256();
  for (int i = 0; i < n; i += 8) _mm256_store_si256((__m256i *)(totals + i), totals8(v + i));
  const __m256 rows_d = _mm256_loadu_ps(d), rows_dmin = _mm256_loadu_ps(dmin), tokens_s = _mm256_loadu_ps(s);
  for (int i = 0; i < P; i += 8) {
    int row[8], tok[8];
    for (int l = 0; l < 8; l++) row[l] = i + l < P ? (i + l) / C : 0, tok[l] = i + l < P ? (i + l) % C : 0;
    const __m256i at_row = _mm256_loadu_si256((const __m256i *)row), at_token = _mm256_loadu_si256((const __m256i *)tok);
    __m256i M = _mm256_setzero_si256();
    for (int r = i / C; r < R && r * C < i + 8; r++) { /* lanes of row r: its M by token */
      int lanes = 0;
      for (int l = 0; l < 8; l++) lanes |= row[l] == r && i + l < P ? 1 << l : 0;
      const __m256i mine = _mm256_permutevar8x32_epi32(by_token[r], at_token);
      M = r == i / C ? mine : _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(M), _mm256_castsi256_ps(mine),
                                                                   _mm256_castsi256_ps(lane_mask(lanes))));
    }
    _mm256_storeu_ps(acc + i, kfold(_mm256_loadu_ps(acc + i), _mm256_loadu_si256((const __m256i *)(totals + i)), M,
                                    _mm256_permutevar8x32_ps(rows_d, at_row), _mm256_permutevar8x32_ps(rows_dmin, at_row),
                                    _mm256_permutevar8x32_ps(tokens_s, at_token)));
  }
}

ALWAYS_INLINE void put(float *out, float v, int add) { *out = add ? *out + v : v; }

/* A K-quant tile's results: acc[r * C + t] to y[t * ldy + r] for the first `kept` tokens. */
ALWAYS_INLINE void kput(const float *acc, int R, int C, int kept, float *y, int ldy, int add) {
  for (int r = 0; r < R; r++)
    for (int t = 0; t < kept; t++) put(y + (size_t)t * ldy + r, acc[r * C + t], add);
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

/* After every unit of a tile of R rows by C tokens: each (row, token) less the row's mins times
   the token's activation sums, 8 at a time in order, then its lanes summed; the first `kept`
   tokens' results go to y[t * ldy + r]. The tile's chains go side by side: each alone is a
   long dependent one (70 steps for 8,960 columns), which cost as much as the products did. */
ALWAYS_INLINE void finish_tile(__m256 acc[][TILE_TOKENS], int R, int C, int kept, const float *const mins[],
                               const float *const sums[], int S, float *y, int ldy, int add) {
  for (int c = 0; c < S; c += 8)
    for (int r = 0; r < R; r++) {
      const __m256 m = _mm256_loadu_ps(mins[r] + c);
      for (int t = 0; t < C; t++) acc[r][t] = _mm256_fnmadd_ps(m, _mm256_load_ps(sums[t] + c), acc[r][t]);
    }
  for (int r = 0; r < R; r++)
    for (int t = 0; t < kept; t++) put(y + (size_t)t * ldy + r, sum8(acc[r][t]), add);
}

/* A K-quant row unpacked for the wide routes (matmul.c, amx.c): levels [K], then its integer
   scales [K / 16] and mins [K / 16] (int16), then d [K / 256] and dmin [K / 256]. */
ALWAYS_INLINE int16_t *unpacked_ints(const uint8_t *row, int K) { return (int16_t *)(row + K); }
ALWAYS_INLINE int16_t *unpacked_mints(const uint8_t *row, int K) { return (int16_t *)(row + K + K / 8); }
ALWAYS_INLINE float *unpacked_d(const uint8_t *row, int K) { return (float *)(row + K + K / 4); }
ALWAYS_INLINE float *unpacked_dmin(const uint8_t *row, int K) { return (float *)(row + K + K / 4 + K / 64); }

/* The AMX route (amx.c): `rows` unpacked K-quant rows at w (ldw bytes apart, readable up to
   whole tiles of AMX_ROWS; where amx_folds, unpacked by amx_fold_rows, ldw amx_folded_bytes;
   else as above) times all T tokens of a (whose `tiles` are laid out), into y[t * ldy + r]. */
enum { AMX_ROWS = 16 };
int amx_folds(int format, int T);
size_t amx_folded_bytes(int format, int K);
void amx_fold_rows(const Part *p, int K, int r0, int rows, uint8_t *out);
void amx_ktiles(const uint8_t *w, size_t ldw, int format, const Acts *a, int T, int rows, float *y, int ldy, int add);

/* Each integer format gets its own copy of a route's kernel, with the format a constant. */
#define BLOCK32_FORMAT(CALL)                                                                       \
  switch (p->format) {                                                                             \
    case Q4_0: CALL(Q4_0); break; case Q4_1: CALL(Q4_1); break; case Q5_0: CALL(Q5_0); break;      \
    case Q5_1: CALL(Q5_1); break; case Q8_0: CALL(Q8_0); break; case INT4: CALL(INT4); break;      \
    default: CALL(INT8); break;                                                                    \
  }
#define K_FORMAT(CALL)                                                                             \
  switch (p->format) {                                                                             \
    case Q4_K: CALL(Q4_K); break; case Q5_K: CALL(Q5_K); break; default: CALL(Q6_K); break;        \
  }
#define BY_FORMAT(CALL)                                                                            \
  if (integer_scales(p->format)) K_FORMAT(CALL) else BLOCK32_FORMAT(CALL)

/* Rows n0..n1 of one part against T <= FUSED_TOKENS tokens, read and multiplied unit by unit
   (narrow.c, narrow_k.c); returns where it stopped (rows left over, fewer than a tile, go to
   the wide route). */
int narrow_rows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add);

/* Rows n0..n1 of a K-quant part against T tokens, in panels (passes of PANEL_FROM tokens or
   more where AMX tiles do not take them: panel_zmm.c's sixteen rows at a time with AVX-512 VNNI,
   else panel_k.c's four); returns where it stopped. */
int panel_rows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add);

#endif
