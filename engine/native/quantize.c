/* Activations in the form matmul.c multiplies with the weights (formats.h).

Each token's row is quantized on its own, per 4 values (x ~= d * q, q in
-127..127, d = max|x| / 127): llama.cpp's Q8_0 does it per 32, but the products scale each
int32 lane of 4 products anyway, so a scale per 4 costs nothing there and keeps an outlier from
flattening its 31 neighbours. `sums` hold each 16 values' sum of d * q, which the "min" of
each 16 weights multiplies.
*/
#include <math.h>
#include <string.h>

#include "native.h"

size_t acts_bytes(int T, int cols) { return (size_t)T * (2 * (size_t)cols + 4 * (size_t)sums_per_row(cols)) + 3 * 32; }

static void *align32(void *p) { return (void *)(((uintptr_t)p + 31) & ~(uintptr_t)31); }

Acts acts_init(void *memory, int T, int cols, const float *x) {
  Acts a = {.cols = cols, .x = x};
  a.q = align32(memory);
  a.lanes = align32(a.q + (size_t)T * cols);
  a.sums = align32(a.lanes + (size_t)T * cols / 4);
  return a;
}

void acts_quantize(Acts *a, int t0, int t1, int c0, int c1) {
  const int K = a->cols, S = sums_per_row(K);
  for (int t = t0; t < t1; t++) {
    const float *x = a->x + (size_t)t * K;
    int8_t *q = a->q + (size_t)t * K;
    float *lanes = a->lanes + (size_t)t * K / 4, *sums = a->sums + (size_t)t * S;
    for (int g = c0; g < c1; g += 16) { /* 4 lanes of 4 values, each with its own scale */
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
    if (c1 == K) /* the zeros past the last 16 columns' sum, read 8 at a time */
      for (int i = K / 16; i < S; i++) sums[i] = 0;
  }
}
