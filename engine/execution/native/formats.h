/* Reading each matrix format's blocks as 32-column units: 8-bit levels, the scale of each 4
columns (one int32 lane of the products) and a "min" per 16 columns, w = scale * level - min.

Every integer format fits this: Q4_0 (d, min 8d), Q4_1 (d, -m), Q5_0 (d, 16d), Q5_1, Q8_0
(levels offset by 128 where the products take unsigned levels, min 128d), and the torch
backend's INT4 ((level - 8) * scale + zero) and INT8 (q * scale). The K-quants keep their
integers instead: w = d * sc * level - dmin * m per 16 columns, sc and m integers of the
super-block (Q4_K and Q5_K: sc, m per 32 columns; Q6_K: sc per 16, m = 32 sc, dmin = d), and
the products use them so (product.h): their sums stay integers for a whole activation block. Block layouts are ggml's; gguf-py's
dequantizers are the tests' reference. The products and dequantize_row (matmul.c) read weights
only through these functions, so every route sees the same numbers.
*/
#ifndef DRAFTLINE_FORMATS_H
#define DRAFTLINE_FORMATS_H

#include <immintrin.h>
#include <string.h>

#include "native.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Unsigned levels for vpdpbusd (AVX-512 VNNI); the AVX2 build keeps int8 weights signed and
   multiplies them with a sign trick (matmul.c), since 255 * 127 * 2 overflows maddubs. */
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define VNNI 1
#else
#define VNNI 0
#endif

ALWAYS_INLINE int signed_levels(int format) { return !VNNI && (format == Q8_0 || format == INT8); }

/* Columns per block, and the bytes from one block to the next in a row. */
ALWAYS_INLINE int block_columns(int format) { return format == Q4_K || format == Q5_K || format == Q6_K ? 256 : 32; }

ALWAYS_INLINE int block_bytes(int format) {
  switch (format) {
    case Q4_0: return 18; case Q4_1: return 20; case Q5_0: return 22; case Q5_1: return 24; case Q8_0: return 34;
    case Q4_K: return 144; case Q5_K: return 176; case Q6_K: return 210; case INT4: return 16;
    default: return 32; /* INT8 */
  }
}

/* A block's scales. Formats of 32-column blocks: one float scale, in every lane. K-quants:
   the super-block's d and dmin, and the integer scale and min of each 16 columns. */
typedef struct {
  __m256 scale;
  float d, dmin;
  int16_t ints[16], mints[16];
} Scales;

ALWAYS_INLINE int integer_scales(int format) { return format == Q4_K || format == Q5_K || format == Q6_K; }

ALWAYS_INLINE float f16_at(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
#ifdef __F16C__
  return _cvtsh_ss(h);
#else
  return f16_to_f32(h);
#endif
}

ALWAYS_INLINE __m256i low4(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(15)); }
ALWAYS_INLINE __m256i high4(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15)); }

/* Bit k of each byte of v, moved to bit 4 (a fifth level bit). */
ALWAYS_INLINE __m256i bit_to_16(__m256i v, int k) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(v, k), _mm256_set1_epi8(1)), 4);
}

/* 16 bytes of nibbles: column j's level in the low nibble of byte j, column j + 16's in its high one. */
ALWAYS_INLINE __m256i nibbles_split(const uint8_t *qs) {
  const __m128i q = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

/* Q5_0/Q5_1: byte j gets bit j of the 32 bits at qh, as 16. */
ALWAYS_INLINE __m256i fifth_bits(const uint8_t *qh) {
  uint32_t bits;
  memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                             _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                                               0x0101010101010101LL, 0));
  const __m256i select = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select), _mm256_set1_epi8(16));
}

/* Q4_K/Q5_K: the 6-bit scales and mins of the 8 sub-blocks (ggml's get_scale_min_k4: bytes
   0-3 hold scales 0-3 and the top bits of 4-7, bytes 4-7 mins 0-3 and the top bits of mins 4-7,
   bytes 8-11 the low bits of scales and mins 4-7), in byte lanes at once: 8 scales, then 8 mins. */
ALWAYS_INLINE __m128i k4_scale_bytes(const uint8_t *packed) {
  const __m128i x = _mm_loadu_si128((const __m128i *)packed); /* 12 bytes and 4 of the levels */
  const __m128i y = _mm_shuffle_epi8(x, _mm_setr_epi8(0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7));
  const __m128i c = _mm_shuffle_epi8(x, _mm_setr_epi8(-1, -1, -1, -1, 8, 9, 10, 11, -1, -1, -1, -1, 8, 9, 10, 11));
  const __m128i low = _mm_and_si128(y, _mm_set1_epi8(63));                           /* sub-blocks 0-3 */
  const __m128i top = _mm_and_si128(_mm_srli_epi16(y, 2), _mm_set1_epi8(0x30));    /* 4-7: bits 4, 5 */
  const __m128i bottom = _mm_blend_epi32(_mm_and_si128(c, _mm_set1_epi8(15)),
                                         _mm_and_si128(_mm_srli_epi16(c, 4), _mm_set1_epi8(15)), 0x8);
  return _mm_blend_epi32(low, _mm_or_si128(top, bottom), 0xA);
}

/* The same as Scales, each twice (per 16 columns). */
ALWAYS_INLINE void scales_k4(const uint8_t *packed, float d, float dmin, Scales *s) {
  const __m128i bytes = k4_scale_bytes(packed);
  s->d = d, s->dmin = dmin;
  _mm256_storeu_si256((__m256i *)s->ints, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(bytes, bytes)));
  _mm256_storeu_si256((__m256i *)s->mints, _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(bytes, bytes)));
}

/* Q6_K: 16 int8 scales (one per 16 columns); min 32 * scale, times d. */
ALWAYS_INLINE void scales_q6k(const int8_t *sc, float d, Scales *s) {
  const __m256i ints = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
  s->d = s->dmin = d;
  _mm256_storeu_si256((__m256i *)s->ints, ints);
  _mm256_storeu_si256((__m256i *)s->mints, _mm256_slli_epi16(ints, 5));
}

/* The block of `row` holding column j (a multiple of block_columns). */
ALWAYS_INLINE const uint8_t *block_at(const Part *p, int format, int row, int j) {
  const uint8_t *r = p->data + (size_t)row * p->row_bytes;
  if (format == INT4) return r + j / 2;
  if (format == INT8) return r + j;
  return r + (size_t)(j / block_columns(format)) * block_bytes(format);
}

/* The scales of the block at b (columns j.. of `row`), and for formats of 32-column blocks its
   mins (one per 16 columns) into `min` (the K-quants' are in `s`). */
ALWAYS_INLINE void read_scales(const Part *p, int format, const uint8_t *b, int row, int cols, int j, Scales *s,
                               float *min) {
  float scale = 0, offset = 0;
  switch (format) {
    case Q4_K: case Q5_K: scales_k4(b + 4, f16_at(b), f16_at(b + 2), s); return;
    case Q6_K: scales_q6k((const int8_t *)(b + 192), f16_at(b + 208), s); return;
    case Q4_0: scale = f16_at(b), offset = 8 * scale; break;
    case Q5_0: scale = f16_at(b), offset = 16 * scale; break;
    case Q4_1: case Q5_1: scale = f16_at(b), offset = -f16_at(b + 2); break;
    case Q8_0: scale = f16_at(b), offset = VNNI ? 128 * scale : 0; break;
    case INT8: scale = bf16_to_f32(p->scale[row]), offset = VNNI ? 128 * scale : 0; break;
    case INT4: {
      const size_t g = (size_t)row * (cols / 32) + j / 32;
      scale = bf16_to_f32(p->scale[g]), offset = 8 * scale - bf16_to_f32(p->zero[g]);
      break;
    }
  }
  s->scale = _mm256_set1_ps(scale);
  min[0] = min[1] = offset;
}

/* K-quants: a unit's two integer scales (its columns 0-15 and 16-31, at `pair`) as the
   multipliers of its 16 column pairs. */
ALWAYS_INLINE __m256i unit_ints(const int16_t *pair) {
  int32_t both;
  memcpy(&both, pair, 4);
  return _mm256_shuffle_epi8(_mm256_set1_epi32(both), _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                                                       2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
}

/* unit_ints for a K-quant format: Q4_K's and Q5_K's two are one scale per 32 columns, stored
   twice, so one broadcast does. */
ALWAYS_INLINE __m256i format_unit_ints(int format, const int16_t *pair) {
  return format == Q6_K ? unit_ints(pair) : _mm256_set1_epi16(pair[0]);
}

/* A K-quant block's level bits come in turns of 32 bytes: Q4_K's nibbles (units 2c, 2c + 1 in
   turn c); Q5_K's fifth bits (turn 0), then its nibbles; Q6_K's low bits (ql, four turns), then
   its high bits (qh, two). */
ALWAYS_INLINE int turns(int format) { return format == Q4_K ? 4 : format == Q5_K ? 5 : 6; }

/* Where a K-quant file block's turn i starts. */
ALWAYS_INLINE int turn_at(int format, int i) { return (format == Q6_K ? 0 : 16) + 32 * i; }

/* The levels of unit k (its 32 columns) of a K-quant block whose turn i is the 32 bytes at
   turn0 + i * stride: a file's block (stride 32), or a repacked panel's rows (panel_k.c), whose
   bytes are decoded by the same byte steps wherever they lie. */
ALWAYS_INLINE __m256i k_levels(int format, const uint8_t *turn0, int stride, int k) {
  if (format == Q6_K) { /* low bits: turn 2h + part % 2; high bits: turn 4 + h */
    const int h = k / 4, part = k % 4;
    const __m256i ql = _mm256_loadu_si256((const __m256i *)(turn0 + stride * (2 * h + part % 2)));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(turn0 + stride * (4 + h)));
    const __m256i top = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * part), _mm256_set1_epi8(3));
    return _mm256_or_si256(part < 2 ? low4(ql) : high4(ql), _mm256_slli_epi16(top, 4));
  }
  const int five = format == Q5_K; /* units 2c, 2c + 1: low and high nibbles of turn c (+ 1) */
  const __m256i q = _mm256_loadu_si256((const __m256i *)(turn0 + stride * (k / 2 + five)));
  const __m256i levels = k % 2 ? high4(q) : low4(q);
  return five ? _mm256_or_si256(levels, bit_to_16(_mm256_loadu_si256((const __m256i *)turn0), k)) : levels;
}

/* The levels of the k-th 32 columns of the block at b. */
ALWAYS_INLINE __m256i read_levels(int format, const uint8_t *b, int k) {
  switch (format) {
    case Q4_0: return nibbles_split(b + 2);
    case Q4_1: return nibbles_split(b + 4);
    case Q5_0: return _mm256_or_si256(nibbles_split(b + 6), fifth_bits(b + 2));
    case Q5_1: return _mm256_or_si256(nibbles_split(b + 8), fifth_bits(b + 4));
    case Q8_0: case INT8: {
      const __m256i q = _mm256_loadu_si256((const __m256i *)(format == Q8_0 ? b + 2 : b));
      return VNNI ? _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80)) : q;
    }
    case INT4: { /* even columns in the low nibbles */
      const __m128i q = _mm_loadu_si128((const __m128i *)b), m = _mm_set1_epi8(15);
      const __m128i lo = _mm_and_si128(q, m), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m);
      return _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
    }
    default: return k_levels(format, b + turn_at(format, 0), 32, k);
  }
}

#endif
