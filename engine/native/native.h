/* What decoder.c and matmul.c share: the matrix formats and their product. */
#ifndef DRAFTLINE_NATIVE_H
#define DRAFTLINE_NATIVE_H

#include <stddef.h>
#include <stdint.h>

enum { INT4 = 0, INT8 = 1 };
enum { GROUP = 32 }; /* weights per int4 scale/zero pair (llama.cpp's blocks) */

typedef struct {
  int32_t format, rows, cols;
  const uint8_t *q;              /* int4: [rows, cols/2], even column in the low nibble; int8: [rows, cols] */
  const uint16_t *scale, *zero;  /* bf16; int4: [rows, cols/GROUP] each, w = (level - 8) * scale + zero; int8: scale [rows] */
  const int32_t *row_sums;       /* int8: the sum of each row's integers */
} Matrix;

static inline float bf16_to_f32(uint16_t v) {
  union { uint32_t u; float f; } c = {.u = (uint32_t)v << 16};
  return c.f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, as torch does */
  union { float f; uint32_t u; } c = {.f = f};
  return (uint16_t)((c.u + 0x7FFF + ((c.u >> 16) & 1)) >> 16);
}

/* Bytes of scratch `matmul` needs for T tokens of a matrix with `cols` columns (64-aligned). */
static inline size_t matmul_scratch(int T, int cols) { return (size_t)T * (4 * (size_t)cols + 64) + 64 * (size_t)cols + 64; }

/* y[t, n] (+)= x[t] . w[n] for t < T and n0 <= n < n1, where x is [T, w->cols] float32 and
   scratch has matmul_scratch(T, w->cols) bytes, 64-aligned. Each (t, n) is computed alike
   whatever T, n0, n1 and the other tokens. */
void matmul(const Matrix *w, const float *x, int T, float *y, int ldy, int n0, int n1, int add, void *scratch);

#endif
