/* The arithmetic every route of the products shares (narrow.c, narrow_k.c, matmul.c), so that
a (row, token) rounds alike whichever computes it.

Per 32 columns (a unit) of one row and one token: an integer dot product of the 8-bit levels
(formats.h) and activations in 8 int32 lanes of 4 columns each (vpdpbusd with AVX-512 VNNI, on
256-bit registers, as fast per byte as 512-bit ones on Zen 4; maddubs + madd with AVX2, where
int8 weights are signed, with a sign trick), converted to float and added up with the weights'
lane scales; after each block of BLOCK_UNITS units (the activations' block, quantize.c), that
sum is added with the block's 8 activation lane scales; at the end the weights' mins times the
activations' sums of each 16 columns come off, and the 8 lanes are summed in a fixed tree.
The K-quants (Q4_K, Q5_K, Q6_K), whose scales are integers times the super-block's d, stay in
integers for a whole activation block instead: per unit, the levels times the activations in
16-bit column pairs (maddubs: at most 2 * 63 * 127, no saturation), times the unit's integer
scales, added to 8 int32 lanes (vpdpwssd; madd + add with AVX2); after the block, that sum is
converted once and added with d times the block's activation lane scales. No float step per
unit: a wide pass of them costs about half as many instructions.
Integer sums are exact, and the float steps are the same, in the same order, whatever the
route, tile, pass width, thread or other tokens. */
#ifndef DRAFTLINE_PRODUCT_H
#define DRAFTLINE_PRODUCT_H

#include "formats.h"

/* Tiles (rows x tokens) sized to the registers: ROWS x TOKENS in the wide route (matmul.c);
   FUSED_ROWS_n rows for a pass of n tokens in the narrow route, which takes passes of up to
   FUSED_TOKENS tokens. */
#if VNNI /* 32 registers */
enum { ROWS = 4, TOKENS = 4, FUSED_TOKENS = 8 };
enum { FUSED_ROWS_1 = 4, FUSED_ROWS_2 = 2, FUSED_ROWS_3 = 4, FUSED_ROWS_4 = 3, FUSED_ROWS_6 = 2, FUSED_ROWS_8 = 1 };
#else /* 16 registers */
enum { ROWS = 2, TOKENS = 2, FUSED_TOKENS = 4 };
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

/* K-quants: ia += (levels . q per column pair) * the unit's integer scales. */
ALWAYS_INLINE __m256i idot(__m256i ia, __m256i levels, __m256i q, __m256i ints) {
  const __m256i pairs = _mm256_maddubs_epi16(levels, q);
#if VNNI
  return _mm256_dpwssd_epi32(ia, pairs, ints);
#else
  return _mm256_add_epi32(ia, _mm256_madd_epi16(pairs, ints));
#endif
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

/* K-quants, after an activation block (u: any of its units): acc += ia * (d * the block's
   activation lane scales). */
ALWAYS_INLINE __m256 ifold(__m256 acc, __m256i ia, float d, const float *act_lanes, int u) {
  const __m256 scales = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_load_ps(act_lanes + u / BLOCK_UNITS * 8));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia), scales, acc);
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

ALWAYS_INLINE void put(float *out, float v, int add) { *out = add ? *out + v : v; }

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
   (narrow.c, narrow_k.c); returns where it stopped (rows left over, fewer than a tile, and
   passes wider than 4 tokens of formats of 32-column blocks go to the wide route). */
int narrow_rows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add);

#endif
