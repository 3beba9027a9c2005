/* The panel route on 512-bit registers with AVX-512 VNNI (Zen 4; Intel cores where AMX tiles are
not granted), sixteen rows at a time: K-quant passes of 9 tokens or more from the file's blocks
(matmul.c chooses it by width), and passes of every width from blocks repacked at load (below:
repack.py repacks where this route runs). Each super-block of the rows (256 columns) is unpacked once into a 5.7 KB panel in L1 whose
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

/* Where repacked panels four on are prefetched to: L2 on Zen 4, L1 on Intel cores, where a
   one-token pass is bound by what one core has in flight (an Ice Lake Xeon, two cores, the
   1.5B, best of 15, three rounds alternating: passes of 1/2/4 tokens 58-61/61/72-75 ms into
   L1 against 64-65/68-79/81-84 into L2). */
#if defined(__znver4__) || defined(__znver5__)
#define PANEL_PREFETCH _MM_HINT_T1
#else
#define PANEL_PREFETCH _MM_HINT_T0
#endif

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

/* ---- panels repacked at load ----
   Where this route runs, a K-quant part whose rows come in sixteens is repacked once at load
   (draftline_repack) into its panels' order, near the file's size: per sixteen rows and
   super-block, their 16 bytes of scales each, their d and dmin (f16), and the blocks' level bits
   turned, each 32 bytes of them as 8 vectors with a row per lane (4 of them for Q4_K, 5 for
   Q5_K, 6 for Q6_K). Loading such a panel takes a tenth of building it from the file (no
   transposes, the level bits decoded in the lanes by read_levels' own byte steps, which keep
   every byte in its place), so every pass width runs on the panels, one-token passes
   included: a token's products on vpdpbusd for sixteen rows at once, no lane ever summed. */
enum { PACKED_SCALES = 0, PACKED_D = 256, PACKED_DMIN = 288, PACKED_LEVELS = 320, TURN_BYTES = 512 };

ALWAYS_INLINE size_t packed_panel_bytes(int format) { return PACKED_LEVELS + (size_t)TURN_BYTES * turns(format); }

/* The levels of columns 4l .. 4l + 3 of unit k of a repacked panel (`turned`: its level bits),
   decoded in the lanes. */
ALWAYS_INLINE __m512i turned_levels(int format, const __m512i *turned, int k, int l) {
  const __m512i fifteen = _mm512_set1_epi8(15);
  if (format == Q6_K) { /* low bits: turn 2h + part % 2; high bits: turn 4 + h */
    const int h = k / 4, part = k % 4;
    const __m512i ql = _mm512_load_si512(turned + 8 * (2 * h + part % 2) + l), qh = _mm512_load_si512(turned + 8 * (4 + h) + l);
    const __m512i low = part < 2 ? _mm512_and_si512(ql, fifteen) : _mm512_and_si512(_mm512_srli_epi16(ql, 4), fifteen);
    const __m512i top = _mm512_and_si512(_mm512_srli_epi16(qh, 2 * part), _mm512_set1_epi8(3));
    return _mm512_or_si512(low, _mm512_slli_epi16(top, 4));
  }
  const int five = format == Q5_K; /* nibbles of units 2c, 2c + 1: turn c (+ 1 after Q5_K's fifth bits) */
  const __m512i qs = _mm512_load_si512(turned + 8 * (k / 2 + five) + l);
  const __m512i levels = k % 2 ? _mm512_and_si512(_mm512_srli_epi16(qs, 4), fifteen) : _mm512_and_si512(qs, fifteen);
  if (!five) return levels;
  const __m512i bits = _mm512_load_si512(turned + l); /* unit k's fifth bit: bit k of its column's byte */
  return _mm512_or_si512(levels, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(bits, k), _mm512_set1_epi8(1)), 4));
}

/* A panel's scales from its repacked bytes, and its levels where `levels` (else zpanel_tokens
   decodes them as it goes: a pass of few tokens uses each once). */
ALWAYS_INLINE void load_zpanel(int format, const uint8_t *z, int levels, ZPanel *pn) {
  pn->d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(z + PACKED_D))); /* exact, as f16_at */
  pn->dmin = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(z + PACKED_DMIN)));
  panel_scales(format, (const uint8_t(*)[16])(z + PACKED_SCALES), pn);
  for (int g = 0; g < 64 && levels; g++) pn->levels[g] = turned_levels(format, (const __m512i *)(z + PACKED_LEVELS), g / 8, g % 8);
}

/* Rows n..n+15's super-block at column j, repacked into z. */
ALWAYS_INLINE void repack_panel(const Part *p, int format, int n, int j, uint8_t *z) {
  const uint8_t *b[ZROWS];
  for (int r = 0; r < ZROWS; r++) {
    b[r] = block_at(p, format, n + r, j);
    if (format == Q6_K) memcpy(z + PACKED_SCALES + 16 * r, b[r] + 192, 16), memcpy(z + PACKED_D + 2 * r, b[r] + 208, 2);
    else _mm_storeu_si128((__m128i *)(z + PACKED_SCALES + 16 * r), k4_scale_bytes(b[r] + 4)), memcpy(z + PACKED_D + 2 * r, b[r], 2);
    memcpy(z + PACKED_DMIN + 2 * r, format == Q6_K ? b[r] + 208 : b[r] + 2, 2);
  }
  for (int i = 0; i < turns(format); i++) {
    __m512i z8[8], out[8];
    for (int r = 0; r < 8; r++)
      z8[r] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b[r] + turn_at(format, i)))),
                                 _mm256_loadu_si256((const __m256i *)(b[r + 8] + turn_at(format, i))), 1);
    transpose_halves(z8, out);
    for (int l = 0; l < 8; l++) _mm512_store_si512((__m512i *)(z + PACKED_LEVELS + TURN_BYTES * i) + l, out[l]);
  }
}

/* Tokens t0..t0+C-1 against a panel at column j: their float sums with the sixteen rows (acc[t])
   get the super-block's two activation blocks, in order. ZTOKENS tokens share each load of the
   panel's levels. */
ALWAYS_INLINE void zpanel_tokens(const ZPanel *pn, const uint8_t *turned, int format, const Acts *a, int t0, int C,
                                 int j, const char *ahead, __m512 acc[]) {
  const int K = a->cols, S = sums_per_row(K), B = blocks_per_row(K);
  const int group = format == Q6_K ? 4 : 8; /* levels vectors per integer scale: 16 or 32 columns */
  const int lines = (int)(packed_panel_bytes(format) / 64), steps = 64 / group; /* a few lines at each step */
  for (int half = 0; half < 2; half++) {
    const int8_t *q[ZTOKENS];
    __m512i I[ZTOKENS];
    for (int t = 0; t < C; t++) q[t] = a->kq + (size_t)(t0 + t) * K + j + 128 * half, I[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g0 = 32 * half; g0 < 32 * half + 32; g0 += group) {
      __m512i sum[ZTOKENS];
      for (int t = 0; t < C; t++) sum[t] = _mm512_setzero_si512();
      if (ahead) {
        const int step = g0 / group;
        for (int line = step * lines / steps; line < (step + 1) * lines / steps; line++)
          _mm_prefetch(ahead + 64 * line, PANEL_PREFETCH);
      }
#pragma GCC unroll 8
      for (int g = g0; g < g0 + group; g++) {
        const __m512i levels = turned ? turned_levels(format, (const __m512i *)turned, g / 8, g % 8) : pn->levels[g];
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

/* Tokens t0..t1-1 against a panel at column j, ZTOKENS at a time (the levels decoded as they go
   from `turned` where it is given). */
ALWAYS_INLINE void zpanel_slab(const ZPanel *pn, const uint8_t *turned, int format, const Acts *a, int t0, int t1,
                               int j, const char *ahead, __m512 acc[]) {
  int t = t0;
  for (; t + ZTOKENS <= t1; t += ZTOKENS, ahead = NULL)
    zpanel_tokens(pn, turned, format, a, t, ZTOKENS, j, ahead, acc + (t - t0));
  switch (t1 - t) { /* each count compiled with its shape a constant */
    case 1: zpanel_tokens(pn, turned, format, a, t, 1, j, ahead, acc + (t - t0)); break;
    case 2: zpanel_tokens(pn, turned, format, a, t, 2, j, ahead, acc + (t - t0)); break;
    case 3: zpanel_tokens(pn, turned, format, a, t, 3, j, ahead, acc + (t - t0)); break;
    case 4: zpanel_tokens(pn, turned, format, a, t, 4, j, ahead, acc + (t - t0)); break;
    case 5: zpanel_tokens(pn, turned, format, a, t, 5, j, ahead, acc + (t - t0)); break;
    case 6: zpanel_tokens(pn, turned, format, a, t, 6, j, ahead, acc + (t - t0)); break;
    case 7: zpanel_tokens(pn, turned, format, a, t, 7, j, ahead, acc + (t - t0)); break;
  }
}

/* Rows n..n+15 against tokens t0..t1-1 (at most ZSLAB), the panels built from the file's blocks
   or loaded from repacked ones (`packed`: the rows' panels, one after another); the results of
   rows `first`..`last` - 1 of the sixteen are kept. */
ALWAYS_INLINE void zpanel_rows16(const Part *p, int format, const uint8_t *packed, int K, const Acts *a, int t0,
                                 int t1, int n, int first, int last, float *y, int ldy, int add) {
  __m512 acc[ZSLAB];
  for (int t = 0; t < t1 - t0; t++) acc[t] = _mm512_setzero_ps();
  const size_t bytes = packed_panel_bytes(format);
  for (int j = 0; j < K; j += 256) {
    ZPanel pn;
    const uint8_t *turned = NULL; /* where the tokens decode the levels themselves: passes of up to 16 */
    const char *ahead = NULL;     /* the panel four on, prefetched a few lines at a time as this one is multiplied */
    if (packed) {
      const uint8_t *z = packed + (size_t)(j / 256) * bytes;
      ahead = (const char *)z + 4 * bytes;
      load_zpanel(format, z, t1 - t0 > 2 * ZTOKENS, &pn);
      turned = t1 - t0 > 2 * ZTOKENS ? NULL : z + PACKED_LEVELS;
    } else {
      /* The blocks of the panel two on (the next rows' where this row ends), while this one is
         multiplied: short rows (1,536 columns: 6 panels) would otherwise start each group of
         rows with sixteen misses. */
      const int ahead = j + 2 * 256, next_n = ahead < K ? n : n + ZROWS, next_j = ahead < K ? ahead : ahead - K;
      if (next_n + ZROWS <= p->rows)
        for (int r = 0; r < ZROWS; r++)
          for (int line = 0; line < block_bytes(format); line += 64)
            _mm_prefetch((const char *)block_at(p, format, next_n + r, next_j) + line, _MM_HINT_T0);
      build_zpanel(p, format, n, j, &pn);
    }
    if (turned) /* two calls, so that each copy is compiled with where its levels come from known */
      zpanel_slab(&pn, turned, format, a, t0, t1, j, ahead, acc);
    else
      zpanel_slab(&pn, NULL, format, a, t0, t1, j, ahead, acc);
  }
  const __mmask16 kept = (__mmask16)(((1u << last) - 1) & ~((1u << first) - 1));
  for (int t = t0; t < t1; t++) {
    float *out = y + (size_t)t * ldy + n;
    const __m512 v = add ? _mm512_add_ps(_mm512_maskz_loadu_ps(kept, out), acc[t - t0]) : acc[t - t0];
    _mm512_mask_storeu_ps(out, kept, v);
  }
}

int panel_rows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add) {
  int n = n0;
  for (int t0 = 0; t0 < T; t0 += ZSLAB) {
    const int t1 = t0 + ZSLAB < T ? t0 + ZSLAB : T;
    for (n = n0; n + ZROWS <= n1; n += ZROWS) {
#define ZPANEL(F) zpanel_rows16(p, F, NULL, K, a, t0, t1, n, 0, ZROWS, y, ldy, add)
      K_FORMAT(ZPANEL)
    }
  }
  return n;
}

ALWAYS_INLINE size_t packed_row_group_bytes(int format, int K) { return (size_t)(K / 256) * packed_panel_bytes(format); }

size_t draftline_packed_bytes(int format, int rows, int cols) {
  if (!integer_scales(format) || rows % ZROWS || cols % 256) return 0;
  return (size_t)(rows / ZROWS) * packed_row_group_bytes(format, cols);
}

void draftline_repack(const Part *p, int cols, int r0, int r1, uint8_t *out) {
  for (int n = r0; n < r1; n += ZROWS) {
    uint8_t *z = out + (size_t)(n / ZROWS) * packed_row_group_bytes(p->format, cols);
    for (int j = 0; j < cols; j += 256, z += packed_panel_bytes(p->format)) {
#define REPACK(F) repack_panel(p, F, n, j, z)
      K_FORMAT(REPACK)
    }
  }
}

void packed_rows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add) {
  const int format = p->format - PACKED;
  for (int t0 = 0; t0 < T; t0 += ZSLAB) {
    const int t1 = t0 + ZSLAB < T ? t0 + ZSLAB : T;
    for (int n = n0 / ZROWS * ZROWS; n < n1; n += ZROWS) {
      const uint8_t *z = p->data + (size_t)(n / ZROWS) * packed_row_group_bytes(format, K);
      const int first = n < n0 ? n0 - n : 0, last = n + ZROWS > n1 ? n1 - n : ZROWS;
#define PACKED_PANEL(F) zpanel_rows16(p, F, z, K, a, t0, t1, n, first, last, y, ldy, add)
      switch (format) {
        case Q4_K: PACKED_PANEL(Q4_K); break; case Q5_K: PACKED_PANEL(Q5_K); break; default: PACKED_PANEL(Q6_K); break;
      }
    }
  }
}

#endif
