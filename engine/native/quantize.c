/* Activations in the form matmul.c multiplies with the weights (formats.h).

Each token's row is quantized on its own, to int8 (x ~= d * q, q in -127..127, d = max|x|/127)
with a scale per 16 values: in each block of 128 columns (4 units of 32), the 4 columns of one
int32 lane of the products in each of the 4 units share a scale. That is finer than llama.cpp's
Q8_0 (32 values per scale) and Q8_K (256), and it is what the products can apply cheaply: a
block's 4 units are summed with the weights' scales alone, then scaled once by the block's 8
activation scales (one per lane). `sums` hold each 16 consecutive values' sum of d * q, which
the "min" of each 16 weights multiplies.
*/
#include <math.h>
#include <string.h>

#include "native.h"

size_t acts_bytes(int T, int cols) {
  return (size_t)T * ((size_t)cols + 4 * (size_t)lanes_per_row(cols) + 4 * (size_t)sums_per_row(cols)) + 3 * 32;
}

static void *align32(void *p) { return (void *)(((uintptr_t)p + 31) & ~(uintptr_t)31); }

Acts acts_init(void *memory, int T, int cols, const float *x) {
  Acts a = {.cols = cols, .x = x};
  a.q = align32(memory);
  a.lanes = align32(a.q + (size_t)T * cols);
  a.sums = align32(a.lanes + (size_t)T * lanes_per_row(cols));
  return a;
}

void acts_quantize(Acts *a, int t0, int t1) {
  const int K = a->cols, L = lanes_per_row(K), S = sums_per_row(K);
  for (int t = t0; t < t1; t++) {
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
          for (int j = u + 4 * lane; j < u + 4 * lane + 4; j++) {
            const float v = nearbyintf(x[j] * inverse);
            q[j] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
          }
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
    for (int i = (K + ACT_BLOCK - 1) / ACT_BLOCK * 8; i < L; i++) lanes[i] = 0;
  }
}
