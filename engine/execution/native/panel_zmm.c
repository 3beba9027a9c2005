/* The panel route on 512-bit registers with AVX-512 VNNI (Zen 4; Intel cores where AMX tiles are
not granted): K-quant passes of several tokens (matmul.c chooses it by width), sixteen rows at a
time. Each super-block of the rows (256 columns) is unpacked once into a 5.7 KB panel in L1 whose
vectors hold the rows in their lanes: lane r of levels[g] holds row r's levels of columns 4g ..
4g + 3, so one vpdpbusd multiplies them with a token's 4 activations of those columns, broadcast
from memory, for all sixteen rows, and no token ever sums lanes.

Why: the other routes multiply each 32 columns by their integer scale in 16-bit pairs (vpmaddubsw,
then vpdpwssd): two instructions per 64 multiply-adds, half of what vpdpbusd alone does. Here a
token's products run on vpdpbusd only; the scale of each 32 columns (16 for Q6_K) multiplies the
sixteen rows' sums once, after them (vpmulld), one instruction in nine.

Exact: the same integers as every route (product.h): I of a (row, token, activation block) is the
sum over its scale groups of the group's integer scale times the levels times the activations, M
the integer mins times the activations' 16-column sums, both integers however grouped (a group's
sum of 32 products of at most 63 x 128 fits int32 with room). Then per (row, token), in block
order, kfold's float steps exactly: acc += I * (d * s), acc -= M * (dmin * s), each one fused
multiply-add, s the token's block scale. So a token's result is bitwise the one-token route's,
whatever the pass width, the rows or tokens beside it and the thread. */
#include "narrow.h"

#if VNNI && defined(__AVX512BW__)

/* Rows of a panel; tokens multiplied at once; tokens whose float sums a panel's rows keep. */
enum { ZROWS = 16, ZTOKENS = 8, ZSLAB = 256 };

typedef struct {
  __m512i levels[64]; /* [g]: lane r, row r's levels of columns 4g .. 4g + 3 */
  __m512i ints[16];   /* [i]: lane r, row r's integer scale of columns 16i .. 16i + 15 (int32) */
  __m512i mints[8];   /* [i]: lane r, row r's integer mins of the 16-column groups 2i and 2i + 1 (int16 pair) */
  __m512 d, dmin;     /* lane r: row r's */
} ZPanel;

/* Eight vectors of two rows' 8 dwords each (z[i]: row i, then row i + 8) turned so that o[l] holds
   dword l of rows 0..7, then of rows 8..15: an 8 x 8 transpose in each 256-bit half. */
ALWAYS_INLINE void transpose_halves(const __m512i z[8], __m512i o[8]) {
  __m512i a[8], b[8];
  for (int i = 0; i < 8; i += 2) a[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]), a[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
  for (int i = 0; i < 8; i += 4) {
    b[i] = _mm512_unpacklo_epi64(a[i], a[i + 2]), b[i + 1] = _mm512_unpackhi_epi64(a[i], a[i + 2]);
    b[i + 2] = _mm512_unpacklo_epi64(a[i + 1], a[i + 3]), b[i + 3] = _mm512_unpackhi_epi64(a[i + 1], a[i + 3]);
  }
  /* b[m] (rows 0-3 and 8-11) and b[4 + m] (rows 4-7, 12-15): 128-bit lane q of each half holds
     dword 4q + m of its four rows. */
  const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), second = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int m = 0; m < 4; m++) {
    o[m] = _mm512_permutex2var_epi64(b[m], first, b[4 + m]);
    o[4 + m] = _mm512_permutex2var_epi64(b[m], second, b[4 + m]);
  }
}

/* Value i (< 16) of each row's 16 bytes, where w[c] holds bytes 4c .. 4c + 3 of row r in lane r:
   as int32 lanes, signed or not. */
ALWAYS_INLINE __m512i byte_of_rows(const __m512i w[4], int i, int sign) {
  const int shift = 8 * (i % 4);
  return sign ? _mm512_srai_epi32(_mm512_slli_epi32(w[i / 4], 24 - shift), 24)
              : _mm512_and_si512(_mm512_srli_epi32(w[i / 4], shift), _mm512_set1_epi32(255));
}

/* The integer scales and mins of sixteen rows' super-blocks, from each row's 16 bytes of them
   (Q4_K, Q5_K: 8 scales of 32 columns then 8 mins; Q6_K: 16 signed scales of 16 columns, the
   mins 32 times them): the 256 bytes turned into four vectors of one dword of each row, then
   each value taken out of its dword. */
ALWAYS_INLINE void panel_scales(int format, const uint8_t bytes[ZROWS][16], ZPanel *pn) {
  __m512i w[4];
  const __m512i z[4] = {_mm512_loadu_si512(bytes[0]), _mm512_loadu_si512(bytes[4]), _mm512_loadu_si512(bytes[8]),
                        _mm512_loadu_si512(bytes[12])};
  for (int c = 0; c < 4; c++) { /* dword c of rows 0..7 from z[0], z[1]; of rows 8..15 from z[2], z[3] */
    const __m512i at = _mm512_setr_epi32(c, 4 + c, 8 + c, 12 + c, 16 + c, 20 + c, 24 + c, 28 + c, c, 4 + c, 8 + c,
                                         12 + c, 16 + c, 20 + c, 24 + c, 28 + c);
    const __m512i low = _mm512_permutex2var_epi32(z[0], at, z[1]), high = _mm512_permutex2var_epi32(z[2], at, z[3]);
    w[c] = _mm512_inserti64x4(low, _mm512_castsi512_si256(high), 1);
  }
  if (format == Q6_K) {
    __m512i sc[16];
    for (int i = 0; i < 16; i++) pn->ints[i] = sc[i] = byte_of_rows(w, i, 1);
    for (int i = 0; i < 8; i++)
      pn->mints[i] = _mm512_or_si512(_mm512_and_si512(_mm512_slli_epi32(sc[2 * i], 5), _mm512_set1_epi32(0xFFFF)),
                                     _mm512_slli_epi32(sc[2 * i + 1], 21));
    return;
  }
  for (int u = 0; u < 8; u++) {
    const __m512i m = byte_of_rows(w, 8 + u, 0);
    pn->ints[2 * u] = pn->ints[2 * u + 1] = byte_of_rows(w, u, 0);
    pn->mints[u] = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
  }
}

/* Rows n..n+15's super-block at column j, as a panel. */
ALWAYS_INLINE void build_zpanel(const Part *p, int format, int n, int j, ZPanel *pn) {
  const uint8_t *b[ZROWS];
  uint8_t bytes[ZROWS][16] __attribute__((aligned(64)));
  uint16_t d[ZROWS], dmin[ZROWS];
  for (int r = 0; r < ZROWS; r++) {
    b[r] = block_at(p, format, n + r, j);
    if (format == Q6_K) {
      memcpy(bytes[r], b[r] + 192, 16), memcpy(&d[r], b[r] + 208, 2), dmin[r] = d[r];
    } else {
      _mm_store_si128((__m128i *)bytes[r], k4_scale_bytes(b[r] + 4));
      memcpy(&d[r], b[r], 2), memcpy(&dmin[r], b[r] + 2, 2);
    }
  }
  pn->d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d)); /* exact, as f16_at */
  pn->dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dmin));
  panel_scales(format, (const uint8_t(*)[16])bytes, pn);
  for (int k = 0; k < 8; k++) {
    __m512i z[8];
    for (int r = 0; r < 8; r++)
      z[r] = _mm512_inserti64x4(_mm512_castsi256_si512(read_levels(format, b[r], k)), read_levels(format, b[r + 8], k), 1);
    transpose_halves(z, pn->levels + 8 * k);
  }
}

/* Tokens t0..t0+C-1 against a panel at column j: their float sums with the sixteen rows (acc[t])
   get the super-block's two activation blocks, in order. ZTOKENS tokens share each load of the
   panel's levels. */
ALWAYS_INLINE void zpanel_tokens(const ZPanel *pn, int format, const Acts *a, int t0, int C, int j, __m512 acc[]) {
  const int K = a->cols, S = sums_per_row(K), B = blocks_per_row(K);
  const int group = format == Q6_K ? 4 : 8; /* levels vectors per integer scale: 16 or 32 columns */
  for (int half = 0; half < 2; half++) {
    const int8_t *q[ZTOKENS];
    __m512i I[ZTOKENS];
    for (int t = 0; t < C; t++) q[t] = a->kq + (size_t)(t0 + t) * K + j + 128 * half, I[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g0 = 32 * half; g0 < 32 * half + 32; g0 += group) {
      __m512i sum[ZTOKENS];
      for (int t = 0; t < C; t++) sum[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = g0; g < g0 + group; g++) {
        const __m512i levels = pn->levels[g];
        for (int t = 0; t < C; t++) {
          int32_t four; /* the token's activations of columns 4g .. 4g + 3 */
          memcpy(&four, q[t] + 4 * (g - 32 * half), 4);
          sum[t] = _mm512_dpbusd_epi32(sum[t], levels, _mm512_set1_epi32(four));
        }
      }
      const __m512i ints = pn->ints[g0 / 4]; /* the scale of columns 4 g0 .. */
      for (int t = 0; t < C; t++) I[t] = _mm512_add_epi32(I[t], _mm512_mullo_epi32(sum[t], ints));
    }
    const int b = j / ACT_BLOCK + half;
    for (int t = 0; t < C; t++) {
      const int16_t *sums16 = a->qsums + (size_t)(t0 + t) * S + 8 * b; /* the token's 16-column sums of the block */
      __m512i M = _mm512_setzero_si512();
      for (int i = 0; i < 4; i++) {
        int32_t pair;
        memcpy(&pair, sums16 + 2 * i, 4);
        M = _mm512_dpwssd_epi32(M, pn->mints[4 * half + i], _mm512_set1_epi32(pair));
      }
      const __m512 s = _mm512_set1_ps(a->kscale[(size_t)(t0 + t) * B + b]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[t]), _mm512_mul_ps(pn->d, s), acc[t]); /* kfold's steps */
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(pn->dmin, s), acc[t]);
    }
  }
}

/* Rows n..n+15 against tokens t0..t1-1 (at most ZSLAB). */
ALWAYS_INLINE void zpanel_rows16(const Part *p, int format, int K, const Acts *a, int t0, int t1, int n, float *y,
                                 int ldy, int add) {
  __m512 acc[ZSLAB];
  for (int t = 0; t < t1 - t0; t++) acc[t] = _mm512_setzero_ps();
  for (int j = 0; j < K; j += 256) {
    /* The blocks of the panel two on (the next rows' where this row ends), while this one is
       multiplied: short rows (1,536 columns: 6 panels) would otherwise start each group of rows
       with sixteen misses. */
    const int ahead = j + 2 * 256, next_n = ahead < K ? n : n + ZROWS, next_j = ahead < K ? ahead : ahead - K;
    if (next_n + ZROWS <= p->rows)
      for (int r = 0; r < ZROWS; r++)
        for (int line = 0; line < block_bytes(format); line += 64)
          _mm_prefetch((const char *)block_at(p, format, next_n + r, next_j) + line, _MM_HINT_T0);
    ZPanel pn;
    build_zpanel(p, format, n, j, &pn);
    int t = t0;
    for (; t + ZTOKENS <= t1; t += ZTOKENS) zpanel_tokens(&pn, format, a, t, ZTOKENS, j, acc + (t - t0));
    switch (t1 - t) { /* each count compiled with its shape a constant */
      case 1: zpanel_tokens(&pn, format, a, t, 1, j, acc + (t - t0)); break;
      case 2: zpanel_tokens(&pn, format, a, t, 2, j, acc + (t - t0)); break;
      case 3: zpanel_tokens(&pn, format, a, t, 3, j, acc + (t - t0)); break;
      case 4: zpanel_tokens(&pn, format, a, t, 4, j, acc + (t - t0)); break;
      case 5: zpanel_tokens(&pn, format, a, t, 5, j, acc + (t - t0)); break;
      case 6: zpanel_tokens(&pn, format, a, t, 6, j, acc + (t - t0)); break;
      case 7: zpanel_tokens(&pn, format, a, t, 7, j, acc + (t - t0)); break;
    }
  }
  for (int t = t0; t < t1; t++) {
    float *out = y + (size_t)t * ldy + n;
    _mm512_storeu_ps(out, add ? _mm512_add_ps(_mm512_loadu_ps(out), acc[t - t0]) : acc[t - t0]);
  }
}

int panel_rows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add) {
  int n = n0;
  for (int t0 = 0; t0 < T; t0 += ZSLAB) {
    const int t1 = t0 + ZSLAB < T ? t0 + ZSLAB : T;
    for (n = n0; n + ZROWS <= n1; n += ZROWS) {
#define ZPANEL(F) zpanel_rows16(p, F, K, a, t0, t1, n, y, ldy, add)
      K_FORMAT(ZPANEL)
    }
  }
  return n;
}

#endif
