/* Activations in the form matmul.c multiplies with the weights (formats.h).

Each token's row is quantized on its own, to int8 (x ~= d * q, q in -127..127, d = max|x|/127),
twice:
- for formats of 32-column blocks, with a scale per 16 values: in each block of 128 columns (4
  units of 32), the 4 columns of one int32 lane of the products in each of the 4 units share a
  scale. That is finer than llama.cpp's Q8_0 (32 values per scale), and it is what their
  products can apply cheaply: a block's 4 units are summed with the weights' scales alone, then
  scaled once by the block's 8 activation scales (one per lane). `sums` hold each 16
  consecutive values' sum of d * q, which the "min" of each 16 weights multiplies.
- for the K-quants, with one scale per 128 columns (twice as fine as llama.cpp's Q8_K): their
  products are whole integers per block on every route, AMX's included (product.h). `qsums`
  hold each 16 values' sum of q, which their integer mins multiply.
The K-quants' block sums and scales are also laid out by groups of tokens, and where the AMX
route runs, their values as its tiles (native.h).
*/
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "native.h"

static size_t groups(int T) { return ((size_t)T + TILE_T - 1) / TILE_T; }

size_t acts_bytes(int T, int cols) {
  const size_t per_token = 2 * (size_t)cols + 4 * (size_t)lanes_per_row(cols) + 4 * (size_t)sums_per_row(cols) +
                           4 * (size_t)blocks_per_row(cols) + 2 * (size_t)sums_per_row(cols);
  const size_t by_group = groups(T) * TILE_T * ((size_t)blocks_per_row(cols) * 5 * 4 + (amx_for(T) ? cols : 0));
  return (size_t)T * per_token + by_group + 8 * 64;
}

static void *align(void *p, uintptr_t to) { return (void *)(((uintptr_t)p + to - 1) & ~(to - 1)); }

Acts acts_init(void *memory, int T, int cols, const float *x) {
  Acts a = {.cols = cols, .forms = LANES | BLOCKS, .x = x};
  const size_t G = groups(T), B = (size_t)blocks_per_row(cols);
  a.q = align(memory, 32);
  a.lanes = align(a.q + (size_t)T * cols, 32);
  a.sums = align(a.lanes + (size_t)T * lanes_per_row(cols), 32);
  a.kq = align(a.sums + (size_t)T * sums_per_row(cols), 32);
  a.kscale = align(a.kq + (size_t)T * cols, 32);
  a.qsums = align(a.kscale + (size_t)T * B, 32);
  a.block_qsums = align(a.qsums + (size_t)T * sums_per_row(cols), 64);
  a.block_scales = align(a.block_qsums + G * B * 4 * TILE_T, 64); /* then 64 bytes a tile may read past */
  memset(a.block_scales + G * B * TILE_T, 0, 64);
  if (amx_for(T)) a.tiles = align(a.block_scales + G * B * TILE_T + 16, 64);
  if (T % TILE_T) { /* the last group's missing tokens: zeros, whose results are dropped */
    memset(a.block_qsums + (G - 1) * B * 4 * TILE_T, 0, B * 4 * TILE_T * 4);
    memset(a.block_scales + (G - 1) * B * TILE_T, 0, B * TILE_T * 4);
    if (a.tiles) memset(a.tiles + (G - 1) * TILE_T * cols, 0, (size_t)TILE_T * cols);
  }
  return a;
}

static int8_t round_q(float v) { /* v = x / d, |v| <= 127 but for rounding */
  v = nearbyintf(v);
  return (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
}

/* Token t's scale per 16 values (q, lanes, sums). */
static void quantize_lanes(const Acts *a, int t) {
  const int K = a->cols, L = lanes_per_row(K), S = sums_per_row(K);
  const float *x = a->x + (size_t)t * K;
  int8_t *q = a->q + (size_t)t * K;
  float *lanes = a->lanes + (size_t)t * L, *sums = a->sums + (size_t)t * S;
  for (int b = 0; b < K; b += ACT_BLOCK) {
    const int end = b + ACT_BLOCK < K ? b + ACT_BLOCK : K;
    for (int lane = 0; lane < 8; lane++) { /* columns b + 32u + 4 lane .. + 3 of each unit u */
      float amax = 0;
      for (int u = b; u < end; u += 32)
        for (int j = u + 4 * lane; j < u + 4 * lane + 4; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
      const float d = amax / 127, inverse = d > 0 ? 1 / d : 0;
      for (int u = b; u < end; u += 32)
        for (int j = u + 4 * lane; j < u + 4 * lane + 4; j++) q[j] = round_q(x[j] * inverse);
      lanes[b / ACT_BLOCK * 8 + lane] = d;
    }
  }
  for (int g = 0; g < K; g += 16) { /* 4 lanes of 4 values */
    float sum = 0;
    for (int l = g; l < g + 16; l += 4)
      sum += (float)(q[l] + q[l + 1] + q[l + 2] + q[l + 3]) * lanes[l / ACT_BLOCK * 8 + l % 32 / 4];
    sums[g / 16] = sum;
  }
  for (int i = K / 16; i < S; i++) sums[i] = 0; /* read 8 at a time */
  for (int i = blocks_per_row(K) * 8; i < L; i++) lanes[i] = 0;
}

/* max |x[j]| over j in [0, n), n a multiple of 8 */
static float amax_of(const float *x, int n) {
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < n; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_loadu_ps(x + j)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

/* q[j] = round_q(x[j] * inverse) for 32 values: round to nearest even, as nearbyintf. */
static void round32(const float *x, float inverse, int8_t *q) {
  const __m256 by = _mm256_set1_ps(inverse);
  __m256i v[4];
  for (int i = 0; i < 4; i++) v[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), by));
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
  const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256((__m256i *)q, _mm256_max_epi8(ordered, _mm256_set1_epi8(-127)));
}

/* Token t's scale per block (kq, kscale, qsums), and its places in the by-group layouts. */
static void quantize_blocks(const Acts *a, int t) {
  const int K = a->cols, S = sums_per_row(K), B = blocks_per_row(K);
  const float *x = a->x + (size_t)t * K;
  int8_t *q = a->kq + (size_t)t * K;
  float *scale = a->kscale + (size_t)t * B;
  int16_t *qsums = a->qsums + (size_t)t * S;
  for (int b = 0; b < K; b += ACT_BLOCK) {
    const int end = b + ACT_BLOCK < K ? b + ACT_BLOCK : K;
    const float d = amax_of(x + b, end - b) / 127, inverse = d > 0 ? 1 / d : 0;
    for (int j = b; j < end; j += 32) round32(x + j, inverse, q + j);
    scale[b / ACT_BLOCK] = d;
  }
  for (int j = 0; j < K; j += 32) { /* sums of 16 bytes, as unsigned ones less 16 * 128 */
    const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(q + j)), _mm256_set1_epi8(-128));
    int64_t lanes[4]; /* of 8 bytes each */
    _mm256_storeu_si256((__m256i *)lanes, _mm256_sad_epu8(u, _mm256_setzero_si256()));
    qsums[j / 16] = (int16_t)(lanes[0] + lanes[1] - 16 * 128);
    qsums[j / 16 + 1] = (int16_t)(lanes[2] + lanes[3] - 16 * 128);
  }
  for (int g = K / 16; g < S; g++) qsums[g] = 0; /* read 8 at a time */
  const size_t group = (size_t)t / TILE_T, i = (size_t)t % TILE_T;
  for (int b = 0; b < B; b++) {
    int32_t *pairs = a->block_qsums + (group * B + b) * 4 * TILE_T;
    for (int p = 0; p < 4; p++) {
      const int g = 8 * b + 2 * p;
      pairs[p * TILE_T + i] = (int32_t)((uint32_t)(uint16_t)qsums[g] | (uint32_t)(uint16_t)qsums[g + 1] << 16);
    }
    a->block_scales[(group * B + b) * TILE_T + i] = scale[b];
  }
}

/* The tiles of the tokens t0..t1-1 (whole groups, the pass's last one possibly short), from
   their kq rows: each 4 columns of a group's 16 tokens make one 64-byte tile row ([unit][k4]).
   A thread writes whole lines (gathered), so no two threads write to the same ones. */
static void lay_tiles(const Acts *a, int t0, int t1) {
  const int K = a->cols;
  for (int g0 = t0; g0 < t1; g0 += TILE_T) {
    const int n = t1 - g0 < TILE_T ? t1 - g0 : TILE_T;
    int8_t *tiles = a->tiles + (size_t)g0 * K;
    const int8_t *q = a->kq + (size_t)g0 * K;
#if defined(__AVX512F__)
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(K));
    const __mmask16 kept = (__mmask16)((1u << n) - 1); /* missing tokens stay zero (acts_init) */
    for (int j = 0; j < K; j += 4)
      _mm512_store_si512(tiles + (size_t)j * TILE_T,
                         _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), kept, rows, q + j, 1));
#else /* no AMX without AVX-512: never run, kept for the build */
    for (int i = 0; i < n; i++)
      for (int j = 0; j < K; j += 4) memcpy(tiles + (size_t)j * TILE_T + 4 * i, q + (size_t)i * K + j, 4);
#endif
  }
}

void acts_quantize(Acts *a, int t0, int t1) {
  for (int t = t0; t < t1; t++) {
    if (a->forms & LANES) quantize_lanes(a, t);
    if (a->forms & BLOCKS) quantize_blocks(a, t);
  }
  if (a->tiles && (a->forms & BLOCKS)) lay_tiles(a, t0, t1);
}
