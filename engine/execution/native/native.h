/* What every source of the decoder shares (decoder.c and quantize.c directly, the products
   through formats.h): matrix formats, activations, their product. */
#ifndef DRAFTLINE_NATIVE_H
#define DRAFTLINE_NATIVE_H

#include <stddef.h>
#include <stdint.h>

/* Matrix formats: ggml's type ids for a GGUF file's own blocks, read where the file is mapped;
   INT4 and INT8 are the torch backend's layouts (engine/execution/kernels.py); PACKED + a K-quant's
   id, its blocks repacked at load into the panels' order (panel_zmm.c, panel_k.c: draftline_repack). */
enum {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14,
  BF16 = 30, INT4 = 100, INT8 = 101, PACKED = 1000
};

/* Rows of one format. A matrix is up to MAX_PARTS of them stacked (Q/K/V, gate/up), each in the
   format its file stores it in: nothing is converted to make them alike. */
typedef struct {
  int32_t format, rows;
  int64_t row_bytes;            /* bytes from one row to the next in `data` */
  const uint8_t *data;          /* ggml blocks; INT4: levels, even column in the low nibble; INT8: int8 */
  const uint16_t *scale, *zero; /* bf16; INT4: [rows, cols / 32] each, w = (level - 8) * scale + zero;
                                   INT8: scale [rows], w = q * scale */
} Part;

enum { MAX_PARTS = 3 };

typedef struct {
  int32_t rows, cols, n_parts;
  Part parts[MAX_PARTS];
} Matrix;

/* Activations of T tokens for a product with `cols` columns (a multiple of 32). Each token's
   row is quantized on its own (quantize.c), so a token's product never depends on the other
   tokens of the pass, twice: for formats of 32-column blocks, int8 with a scale per 16 values
   (`q`, `lanes`, `sums`); for the K-quants, int8 with a scale per ACT_BLOCK columns (`kq`,
   `kscale`, `qsums`), whose products stay integers through each block on every route (AMX
   tiles sum a whole block row, so a block's values must share one scale). */
enum { ACT_BLOCK = 128 }; /* columns whose 8 lanes each have their own scale (`lanes`), or one (`kscale`) */
enum { TILE_T = 16 };     /* tokens per AMX tile (amx.c) */

enum { LANES = 1, BLOCKS = 2 }; /* the forms of quantized activations (Acts.forms) */

typedef struct {
  int32_t cols;
  int32_t forms;  /* which of the two acts_quantize makes (both unless set after acts_init) */
  const float *x; /* [T, cols] float32: float-format parts multiply these */
  int8_t *q;      /* [T, cols] */
  float *lanes;   /* [T, lanes_per_row(cols)]: per block of ACT_BLOCK columns, the scale of each
                     int32 lane (columns 32u + 4l .. + 3 of its units u share lane l's) */
  float *sums;    /* [T, sums_per_row(cols)]: each 16 values' sum of scale * q, zeros past them */
  int8_t *kq;     /* [T, cols]: the K-quants' activations, x ~= kscale[block] * kq */
  float *kscale;  /* [T, blocks_per_row(cols)] */
  int16_t *qsums; /* [T, sums_per_row(cols)]: each 16 values' sum of kq, zeros past them */
  /* The same by groups of TILE_T tokens, for products that take a block's values for several
     tokens at once: block_qsums [group][block][4][TILE_T] (each block's qsums in pairs, as
     int32), block_scales [group][block][TILE_T] (kscale); and for the AMX route (else NULL),
     tiles [group][unit][8][TILE_T][4] (each 32 columns of kq as a TDPBUSD's B tile). */
  int32_t *block_qsums;
  float *block_scales;
  int8_t *tiles;
} Acts;

static inline int blocks_per_row(int cols) { return (cols + ACT_BLOCK - 1) / ACT_BLOCK; }
static inline int lanes_per_row(int cols) { return blocks_per_row(cols) * 8; }
/* Per-16 entries of a row, rounded up to what products read 8 at a time. */
static inline int sums_per_row(int cols) { return (cols / 16 + 7) / 8 * 8; }

/* Whether passes of T tokens take the AMX route here (amx.c: built with AMX, the kernel granted
   the tile state, and not turned off). */
int amx_for(int T);

/* Bytes of a K-quant part of `rows` x `cols` repacked into panels, or 0 where it is not
   (another format, or rows that do not fill the panels: 16 with AVX-512 VNNI, 4 with AVX2). */
size_t draftline_packed_bytes(int format, int rows, int cols);
/* Repack a part's blocks into `out` (draftline_packed_bytes of it, 64-aligned): rows r0..r1 (multiples of 16). */
void draftline_repack(const Part *p, int cols, int r0, int r1, uint8_t *out);
/* Rows n0..n1 of a repacked part against T tokens (panel_zmm.c). */
void packed_rows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add);

/* Bytes of `acts_init` memory for T tokens of `cols` columns. */
size_t acts_bytes(int T, int cols);
/* Lay out an Acts of T tokens in `memory` (acts_bytes(T, cols)), reading x [T, cols]. */
Acts acts_init(void *memory, int T, int cols, const float *x);
/* The forms of activations the parts of w multiply. */
int acts_forms(const Matrix *w);
/* Quantize tokens t0..t1-1. */
void acts_quantize(Acts *a, int t0, int t1);

/* Bytes of scratch `matmul` needs for a matrix of `cols` columns (64-aligned). */
size_t matmul_scratch(int cols);

/* y[t, n] (+)= x[t] . w[n] for t < T and n0 <= n < n1. Each (t, n) is computed alike whatever
   T, n0, n1 and the other tokens. */
void matmul(const Matrix *w, const Acts *x, int T, float *y, int ldy, int n0, int n1, int add, void *scratch);

/* One row of a matrix as float32 (embedding lookups, tests), as the products see its weights
   (not of a repacked part: an embedding is never repacked). */
void dequantize_row(const Matrix *w, int row, float *out);

static inline float bf16_to_f32(uint16_t v) {
  union { uint32_t u; float f; } c = {.u = (uint32_t)v << 16};
  return c.f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, as torch does */
  union { float f; uint32_t u; } c = {.f = f};
  return (uint16_t)((c.u + 0x7FFF + ((c.u >> 16) & 1)) >> 16);
}

static inline float f16_to_f32(uint16_t h) { /* IEEE half, subnormals included, without F16C */
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 31, mant = h & 1023;
  union { uint32_t u; float f; } c;
  if (exp == 31) c.u = sign | 0x7F800000 | (mant << 13);
  else if (exp) c.u = sign | ((exp + 112) << 23) | (mant << 13);
  else { c.f = (float)mant * (1.0f / 16777216.0f); c.u |= sign; } /* 2^-24 units */
  return c.f;
}

#endif
