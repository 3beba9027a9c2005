/* Weights and activations in the forms matmul.c multiplies.

Weights: each format's blocks, read where they lie (a GGUF file's mapped pages), are unpacked a
few rows at a time into 8-bit levels, a float scale per 4 columns and a float "min" per 16:
w = scale * level - min. Every integer format fits this: Q4_0 (d, min 8d), Q4_1 (d, -m), Q5_0,
Q5_1, Q8_0 (levels offset by 128 where the products take unsigned levels), Q4_K and Q5_K (d *
sc, dmin * m per 32), Q6_K (d * sc per 16, min 32 d sc), and the torch backend's INT4/INT8.
Float formats (F32, F16, BF16) become float32. Block layouts are ggml's (gguf-py's
dequantizers are the tests' reference).

Activations: each token's row is quantized on its own, per 4 values (x ~= d * q, q in
-127..127, d = max|x| / 127): llama.cpp's Q8_0 does it per 32, but the products scale each
int32 lane of 4 products anyway, so a scale per 4 costs nothing there and keeps an outlier from
flattening its 31 neighbours. `sums` hold each 16 values' sum of d * q, which the "min" of
each 16 weights multiplies.
*/
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "native.h"

/* Unsigned levels for vpdpbusd (AVX-512 VNNI); the AVX2 build keeps int8 weights signed and
   multiplies them with a sign trick (matmul.c), since 255 * 127 * 2 overflows maddubs. */
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
enum { UNSIGNED_ONLY = 1 };
#else
enum { UNSIGNED_ONLY = 0 };
#endif

size_t acts_bytes(int T, int cols) {
  const int padded = pad64(cols);
  return (size_t)T * (padded + padded + 4 * (size_t)sums_per_row(padded)) + 3 * 64;
}

static void *align64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

Acts acts_init(void *memory, int T, int cols, const float *x) {
  const int padded = pad64(cols);
  Acts a = {.cols = cols, .padded = padded, .x = x};
  a.q = align64(memory);
  a.lanes = align64(a.q + (size_t)T * padded);
  a.sums = align64(a.lanes + (size_t)T * padded / 4);
  return a;
}

void acts_quantize(Acts *a, int t0, int t1, int c0, int c1) {
  const int P = a->padded, S = sums_per_row(P), end = c1 < a->cols ? c1 : a->cols;
  for (int t = t0; t < t1; t++) {
    const float *x = a->x + (size_t)t * a->cols;
    int8_t *q = a->q + (size_t)t * P;
    float *lanes = a->lanes + (size_t)t * P / 4, *sums = a->sums + (size_t)t * S;
    for (int g = c0; g < end; g += 16) { /* 4 lanes of 4 values, each with its own scale */
      float sum = 0;
      for (int l = g; l < g + 16; l += 4) {
        float amax = 0;
        for (int j = l; j < l + 4; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float d = amax / 127, inverse = d > 0 ? 1 / d : 0;
        int lane = 0;
        for (int j = l; j < l + 4; j++) {
          float v = nearbyintf(x[j] * inverse);
          v = v > 127 ? 127 : v < -127 ? -127 : v;
          q[j] = (int8_t)v;
          lane += (int)v;
        }
        lanes[l / 4] = d;
        sum += (float)lane * d;
      }
      sums[g / 16] = sum;
    }
    if (c1 >= a->cols) { /* the zeros past the columns */
      memset(q + a->cols, 0, P - a->cols);
      for (int i = a->cols / 4; i < P / 4; i++) lanes[i] = 0;
      for (int i = a->cols / 16; i < S; i++) sums[i] = 0;
    }
  }
}

int is_float_format(int format) { return format == F32 || format == F16 || format == BF16; }

int has_signed_levels(int format) { return !UNSIGNED_ONLY && (format == Q8_0 || format == INT8); }

size_t unpacked_row_bytes(int format, int cols) {
  const int padded = pad64(cols);
  if (is_float_format(format)) return 4 * (size_t)padded;
  return 2 * (size_t)padded + 4 * (size_t)sums_per_row(padded);
}

typedef struct {
  uint8_t *levels;
  float *lanes, *mins;
} Row;

/* The scale of columns j..j+31 (8 lanes) and their min (2 entries). */
static inline void scale32(Row *o, int j, float scale, float min) {
  _mm256_storeu_ps(o->lanes + j / 4, _mm256_set1_ps(scale));
  o->mins[j / 16] = o->mins[j / 16 + 1] = min;
}

static inline float f16_at(const uint8_t *p) { return f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static inline __m128i low4(__m128i v) { return _mm_and_si128(v, _mm_set1_epi8(15)); }
static inline __m128i high4(__m128i v) { return _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(15)); }
static inline __m256i low4x32(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(15)); }
static inline __m256i high4x32(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15)); }

/* 32 levels of a Q4_0/Q4_1/Q5_0/Q5_1 block: low nibbles are columns 0..15, high 16..31; qh
   holds the fifth bit of column j at bit j. */
static inline void nibbles32(const uint8_t *qs, const uint8_t *qh, uint8_t *L) {
  const __m128i q = _mm_loadu_si128((const __m128i *)qs);
  __m128i lo = low4(q), hi = high4(q);
  if (qh) { /* spread the 32 bits over 32 bytes: byte j gets bit j */
    uint32_t bits;
    memcpy(&bits, qh, 4);
    const __m128i sel = _mm_set1_epi64x((long long)0x8040201008040201ULL);
    const __m128i b0 = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)bits), _mm_set_epi8(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
    const __m128i b1 = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)bits), _mm_set_epi8(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2));
    lo = _mm_or_si128(lo, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(b0, sel), sel), _mm_set1_epi8(16)));
    hi = _mm_or_si128(hi, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(b1, sel), sel), _mm_set1_epi8(16)));
  }
  _mm_storeu_si128((__m128i *)L, lo);
  _mm_storeu_si128((__m128i *)(L + 16), hi);
}

/* Q4_K/Q5_K: the 6-bit scales and mins of the 8 sub-blocks (ggml's get_scale_min_k4, done
   on 32-bit words as llama.cpp's dot products do), times d and dmin; lanes and mins of the 256
   columns from them. */
static inline void scales_k4(const uint8_t *packed, float d, float dmin, Row *o, int j) {
  const uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
  uint32_t u[4];
  memcpy(u, packed, 12);
  u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
  const uint32_t mins_low = u[1] & m1;
  u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
  u[2] = mins_low;
  u[0] &= m1;
  const __m128i bytes = _mm_loadu_si128((const __m128i *)u); /* 8 scales, then 8 mins */
  const __m256 sc = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)));
  const __m256 mn = _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8))));
  for (int s = 0; s < 8; s++) _mm256_storeu_ps(o->lanes + j / 4 + 8 * s, _mm256_permutevar8x32_ps(sc, _mm256_set1_epi32(s)));
  _mm256_storeu_ps(o->mins + j / 16, _mm256_permutevar8x32_ps(mn, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)));
  _mm256_storeu_ps(o->mins + j / 16 + 8, _mm256_permutevar8x32_ps(mn, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)));
}

/* Q6_K: 16 int8 scales (one per 16 columns) times d; min 32 * scale. */
static inline void scales_q6k(const int8_t *sc, float d, Row *o, int j) {
  const __m128i bytes = _mm_loadu_si128((const __m128i *)sc);
  for (int half = 0; half < 2; half++) {
    const __m256 s = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                          half ? _mm_srli_si128(bytes, 8) : bytes)));
    for (int k = 0; k < 4; k++) /* 32 columns: 4 lanes of one scale, 4 of the next */
      _mm256_storeu_ps(o->lanes + j / 4 + 32 * half + 8 * k,
                       _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k + 1,
                                                                     2 * k + 1, 2 * k + 1, 2 * k + 1)));
    _mm256_storeu_ps(o->mins + j / 16 + 8 * half, _mm256_mul_ps(_mm256_set1_ps(32), s));
  }
}

static void unpack_row(const Part *p, int cols, int row, Row *o) {
  const uint8_t *b = p->data + (size_t)row * p->row_bytes;
  switch (p->format) {
    case Q4_0: case Q4_1: case Q5_0: case Q5_1: {
      const int one = p->format == Q4_1 || p->format == Q5_1, five = p->format == Q5_0 || p->format == Q5_1;
      const int bytes = 18 + 2 * one + 4 * five;
      for (int j = 0; j < cols; j += 32, b += bytes) {
        const float d = f16_at(b);
        nibbles32(b + 2 + 2 * one + 4 * five, five ? b + 2 + 2 * one : NULL, o->levels + j);
        scale32(o, j, d, one ? -f16_at(b + 2) : (five ? 16 : 8) * d);
      }
      break;
    }
    case Q8_0: case INT8:
      for (int j = 0; j < cols; j += 32) {
        const float d = p->format == Q8_0 ? f16_at(b) : bf16_to_f32(p->scale[row]);
        __m256i q = _mm256_loadu_si256((const __m256i *)(p->format == Q8_0 ? b + 2 : b + j));
        if (UNSIGNED_ONLY) q = _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
        _mm256_storeu_si256((__m256i *)(o->levels + j), q);
        scale32(o, j, d, UNSIGNED_ONLY ? 128 * d : 0);
        if (p->format == Q8_0) b += 34;
      }
      break;
    case INT4:
      for (int j = 0; j < cols; j += 32) {
        const size_t g = (size_t)row * (cols / 32) + j / 32;
        const float s = bf16_to_f32(p->scale[g]), z = bf16_to_f32(p->zero[g]);
        const __m128i q = _mm_loadu_si128((const __m128i *)(b + j / 2)), lo = low4(q), hi = high4(q);
        _mm_storeu_si128((__m128i *)(o->levels + j), _mm_unpacklo_epi8(lo, hi));
        _mm_storeu_si128((__m128i *)(o->levels + j + 16), _mm_unpackhi_epi8(lo, hi));
        scale32(o, j, s, 8 * s - z);
      }
      break;
    case Q4_K: case Q5_K: {
      const int five = p->format == Q5_K;
      for (int j = 0; j < cols; j += 256, b += five ? 176 : 144) {
        const float d = f16_at(b), dmin = f16_at(b + 2);
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
        const uint8_t *qs = b + 16 + 32 * five;
        for (int c = 0; c < 4; c++) { /* 64 columns: sub-blocks 2c (low nibbles) and 2c + 1 (high) */
          const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
          __m256i lo = low4x32(q), hi = high4x32(q);
          if (five) {
            const __m256i one = _mm256_set1_epi8(1);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
          }
          _mm256_storeu_si256((__m256i *)(o->levels + j + 64 * c), lo);
          _mm256_storeu_si256((__m256i *)(o->levels + j + 64 * c + 32), hi);
        }
        scales_k4(b + 4, d, dmin, o, j);
      }
      break;
    }
    case Q6_K:
      for (int j = 0; j < cols; j += 256, b += 210) {
        const float d = f16_at(b + 208);
        const __m256i three = _mm256_set1_epi8(3);
        for (int h = 0; h < 2; h++) { /* 128 columns from 64 bytes of low bits and 32 of high */
          const __m256i a = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
          const __m256i c = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
          const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
          const __m256i low[4] = {low4x32(a), low4x32(c), high4x32(a), high4x32(c)};
          for (int k = 0; k < 4; k++) {
            const __m256i top = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), three);
            _mm256_storeu_si256((__m256i *)(o->levels + j + 128 * h + 32 * k),
                                _mm256_or_si256(low[k], _mm256_slli_epi16(top, 4)));
          }
        }
        scales_q6k((const int8_t *)(b + 192), d, o, j);
      }
      break;
  }
}

static void unpack_float_row(const Part *p, int cols, int row, float *out) {
  const uint8_t *b = p->data + (size_t)row * p->row_bytes;
  if (p->format == F32) memcpy(out, b, 4 * (size_t)cols);
  for (int j = 0; j < cols && p->format != F32; j++) {
    const uint16_t h = (uint16_t)(b[2 * j] | b[2 * j + 1] << 8);
    out[j] = p->format == F16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
  for (int j = cols; j < pad64(cols); j++) out[j] = 0;
}

static Row row_in(void *out, int cols, int r) {
  const int padded = pad64(cols);
  uint8_t *base = (uint8_t *)out + (size_t)r * unpacked_row_bytes(INT8, cols);
  return (Row){base, (float *)(base + padded), (float *)(base + 2 * (size_t)padded)};
}

void unpack_rows(const Part *p, int cols, int r0, int rows, void *out) {
  const int padded = pad64(cols);
  for (int r = 0; r < rows; r++) {
    if (is_float_format(p->format)) {
      unpack_float_row(p, cols, r0 + r, (float *)out + (size_t)r * padded);
      continue;
    }
    Row o = row_in(out, cols, r);
    unpack_row(p, cols, r0 + r, &o);
    memset(o.levels + cols, 0, padded - cols);
    for (int i = cols / 4; i < padded / 4; i++) o.lanes[i] = 0;
    for (int i = cols / 16; i < sums_per_row(padded); i++) o.mins[i] = 0;
  }
}

void dequantize_row(const Part *p, int cols, int row, float *out) {
  if (is_float_format(p->format)) {
    unpack_float_row(p, cols, row, out);
    return;
  }
  uint8_t memory[unpacked_row_bytes(INT8, cols)];
  Row o = row_in(memory, cols, 0);
  unpack_row(p, cols, row, &o);
  const int sign = has_signed_levels(p->format);
  for (int j = 0; j < cols; j++)
    out[j] = o.lanes[j / 4] * (float)(sign ? (int8_t)o.levels[j] : o.levels[j]) - o.mins[j / 16];
}
