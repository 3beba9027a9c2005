/* The panel route for K-quant passes of several tokens (matmul.c chooses it by width): rows are
taken four at a time, and each super-block of them (256 columns) is unpacked once into a
1.5 KB panel in L1 whose vectors hold the four rows side by side, so that every token of the
pass multiplies it with no horizontal sums and no per-token unpacking.

Why: with AVX2's 16 registers, the other routes multiply a row by a token in its own 8-lane
accumulator and sum its lanes after every activation block, and wider passes unpack 192 KB of
rows and read them again for every pair of tokens: on a 2-core Zen 3 a 16-token pass of the
1.5B took 11 one-token passes. Here a vector's 8 int32 lanes are (row r, h): lane 2r + h of
levels[k][g] holds row r's levels of columns 8g + 4h .. + 3 of unit k, so that the token's 8
activations of columns 8g .. 8g + 7, broadcast (a load, no shuffle), meet the matching 4 in
every lane.

Exact: the same integers as every route (product.h). I of a (row, token, activation block) is
the sum over the block's units of the levels times the activations times the unit's integer
scales (here split over two lanes, added after the block), M the integer mins times the
activations' 16-column sums; integer sums are the same however grouped. Then per (row,
token), in block order, kfold's float steps exactly: acc += I * (d * s), acc -= M * (dmin * s),
each one fused multiply-add, s the token's block scale. So a token's result is bitwise the
one-token route's, whatever the pass width, the rows or tokens beside it and the thread. */
#include "narrow.h"

#if !(VNNI && defined(__AVX512BW__)) /* there, panel_zmm.c */

/* Rows of a panel; tokens multiplied at once; tokens whose float sums a panel's rows keep. */
enum { PANEL_ROWS = 4, PANEL_TOKENS = 4, PANEL_SLAB = 64 };

/* One super-block of PANEL_ROWS rows. Lane 2r + h, r < 4, h < 2, of each vector: */
typedef struct {
  __m256i levels[8][4]; /* [unit k][g]: row r's levels of columns 8g + 4h .. + 3 of unit k */
  __m256i ints[8][2];   /* [unit k][i]: row r's integer scale of the unit's columns 16i .. + 15, twice (int16) */
  __m256i mints[2][2];  /* [block][i]: row r's integer mins of the block's 16-column groups 4i + 2h, + 1 (int16) */
  __m256 dd;            /* d and dmin: lanes 0-1: rows 0-1's d, 2-3: their dmin; 4-7: the same of rows 2-3 */
} Panel;

/* Four rows' 4 qwords each as 4 vectors: out[g] = qword g of each row, in order of rows. */
ALWAYS_INLINE void rows_to_lanes(const __m256i in[PANEL_ROWS], __m256i out[4]) {
  const __m256i lo01 = _mm256_unpacklo_epi64(in[0], in[1]), hi01 = _mm256_unpackhi_epi64(in[0], in[1]);
  const __m256i lo23 = _mm256_unpacklo_epi64(in[2], in[3]), hi23 = _mm256_unpackhi_epi64(in[2], in[3]);
  out[0] = _mm256_permute2x128_si256(lo01, lo23, 0x20), out[1] = _mm256_permute2x128_si256(hi01, hi23, 0x20);
  out[2] = _mm256_permute2x128_si256(lo01, lo23, 0x31), out[3] = _mm256_permute2x128_si256(hi01, hi23, 0x31);
}

/* Rows n..n+3's super-block at column j, as a panel. */
ALWAYS_INLINE void build_panel(const Part *p, int format, int K, int n, int j, Panel *pn) {
  Scales s[PANEL_ROWS];
  const uint8_t *b[PANEL_ROWS];
  __m256i in[PANEL_ROWS];
  for (int r = 0; r < PANEL_ROWS; r++) {
    b[r] = block_at(p, format, n + r, j);
    read_scales(p, format, b[r], n + r, K, j, &s[r], NULL);
  }
  pn->dd = _mm256_setr_ps(s[0].d, s[1].d, s[0].dmin, s[1].dmin, s[2].d, s[3].d, s[2].dmin, s[3].dmin);
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) {
    for (int r = 0; r < PANEL_ROWS; r++) in[r] = read_levels(format, b[r], k);
    rows_to_lanes(in, pn->levels[k]);
  }
  /* Unit k's two scales are int16s 2k and 2k + 1 of a row's ints: gathered by units (int32s k
     of the rows side by side in 128 bits), then each spread over its row's two lanes. */
  for (int r = 0; r < PANEL_ROWS; r++) in[r] = _mm256_loadu_si256((const __m256i *)s[r].ints);
  const __m256i r01lo = _mm256_unpacklo_epi32(in[0], in[1]), r01hi = _mm256_unpackhi_epi32(in[0], in[1]);
  const __m256i r23lo = _mm256_unpacklo_epi32(in[2], in[3]), r23hi = _mm256_unpackhi_epi32(in[2], in[3]);
  const __m256i units[4] = {_mm256_unpacklo_epi64(r01lo, r23lo), _mm256_unpackhi_epi64(r01lo, r23lo),
                            _mm256_unpacklo_epi64(r01hi, r23hi), _mm256_unpackhi_epi64(r01hi, r23hi)};
  const __m256i first = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 4, 5, 4, 5, 4, 5, 4, 5,
                                         8, 9, 8, 9, 8, 9, 8, 9, 12, 13, 12, 13, 12, 13, 12, 13);
  const __m256i second = _mm256_add_epi8(first, _mm256_set1_epi8(2));
  for (int k = 0; k < 8; k++) { /* units[k % 4]'s 128-bit half k / 4: the rows' int32 k */
    const __m256i v = _mm256_permute2x128_si256(units[k % 4], units[k % 4], k < 4 ? 0x00 : 0x11);
    pn->ints[k][0] = _mm256_shuffle_epi8(v, first), pn->ints[k][1] = _mm256_shuffle_epi8(v, second);
  }
  /* The mins of block b's pairs of groups 2h, 2h + 1 (i = 0) and 4 + 2h, 5 + 2h (i = 1) are
     qwords 2b + i of a row's mints. */
  __m256i mints[4];
  for (int r = 0; r < PANEL_ROWS; r++) in[r] = _mm256_loadu_si256((const __m256i *)s[r].mints);
  rows_to_lanes(in, mints);
  for (int i = 0; i < 4; i++) pn->mints[i / 2][i % 2] = mints[i];
}

/* ---- panels repacked at load ----
   Where this route runs (no AVX-512 VNNI: panel_zmm.c's panels run there), a K-quant part whose
   rows come in fours is repacked once at load (draftline_repack) into its panels' order, near
   the file's size, per four rows and super-block:
   - their level bits, each turn (formats.h) as the 4 vectors rows_to_lanes makes of the four
     rows' 32 bytes of it, so that formats.h's own byte steps (k_levels) decode them into the
     panel's lanes with no transposes;
   - their integer scales as bytes, rows 0-1 in the low 128 bits and rows 2-3 in the high ones,
     8 bytes a row (Q4_K, Q5_K: the sub-blocks' scales, then as many of mins; Q6_K: its 16
     signed scales, groups 0-7, then 8-15), which one byte shuffle a vector spreads into the
     panel's lanes;
   - d and dmin (f16), in the order of the panel's dd.
   Then every pass width runs on the panels, plain decoding included: no lane of a row is ever
   summed, and a token's scale groups take one vpmaddwd for four rows. */
enum { TURN4 = 4 * 32, PACKED4_LEVELS = 0 };

ALWAYS_INLINE size_t packed_scales_at(int format) { return (size_t)TURN4 * turns(format); }
ALWAYS_INLINE size_t packed_dd_at(int format) { return packed_scales_at(format) + 64; }
ALWAYS_INLINE size_t packed_panel_bytes(int format) { return packed_dd_at(format) + 32; }

/* v's bytes picked by `pick` plus `at` (bytes of pick with the top bit set stay zero), each
   128-bit half from its own. */
ALWAYS_INLINE __m256i pick_bytes(__m256i v, __m256i pick, int at) {
  return _mm256_shuffle_epi8(v, _mm256_add_epi8(pick, _mm256_set1_epi8((char)at)));
}

/* A panel's scales from its repacked bytes. Its levels are decoded by the tokens as they use
   them, four tokens a time: on a 2-core Zen 3 that was as fast as decoding them once into the
   panel in passes of 16 and 64 tokens, and 5-28% faster in passes of 2 to 8. */
ALWAYS_INLINE void load_panel_scales(int format, const uint8_t *z, Panel *pn) {
  const __m256i *sc = (const __m256i *)(z + packed_scales_at(format));
  pn->dd = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(z + packed_dd_at(format)))); /* exact, as f16_at */
  const char Z = (char)0x80;
  /* lanes 2r' + h of a half: row r''s byte, twice as int16 (low bytes) or in the high bytes */
  const __m256i low = _mm256_setr_epi8(0, Z, 0, Z, 0, Z, 0, Z, 8, Z, 8, Z, 8, Z, 8, Z,
                                       0, Z, 0, Z, 0, Z, 0, Z, 8, Z, 8, Z, 8, Z, 8, Z);
  const __m256i high = _mm256_setr_epi8(Z, 0, Z, 0, Z, 0, Z, 0, Z, 8, Z, 8, Z, 8, Z, 8,
                                        Z, 0, Z, 0, Z, 0, Z, 0, Z, 8, Z, 8, Z, 8, Z, 8);
  /* mins: lane 2r' + h holds groups 4i + 2h, + 1 (int16): bytes of groups g, g + 1, g + 2, g + 3 */
  const __m256i four = _mm256_setr_epi8(0, Z, 1, Z, 2, Z, 3, Z, 8, Z, 9, Z, 10, Z, 11, Z,
                                        0, Z, 1, Z, 2, Z, 3, Z, 8, Z, 9, Z, 10, Z, 11, Z);
  if (format == Q6_K) { /* signed scales, one per 16 columns; mins 32 x scale */
    for (int k = 0; k < 8; k++)
      for (int i = 0; i < 2; i++) pn->ints[k][i] = _mm256_srai_epi16(pick_bytes(sc[k / 4], high, 2 * (k % 4) + i), 8);
    const __m256i four_high = _mm256_or_si256(_mm256_slli_epi16(four, 8), _mm256_set1_epi16(0x80));
    for (int b = 0; b < 2; b++)
      for (int i = 0; i < 2; i++) pn->mints[b][i] = _mm256_srai_epi16(pick_bytes(sc[b], four_high, 4 * i), 3);
  } else { /* a scale and a min per 32 columns (unit), stored once: the mins' pick spread over pairs */
    const __m256i pairs = _mm256_setr_epi8(0, Z, 0, Z, 1, Z, 1, Z, 8, Z, 8, Z, 9, Z, 9, Z,
                                           0, Z, 0, Z, 1, Z, 1, Z, 8, Z, 8, Z, 9, Z, 9, Z);
    for (int k = 0; k < 8; k++) pn->ints[k][0] = pick_bytes(sc[0], low, k); /* panel_tokens reads no other */
    for (int b = 0; b < 2; b++)
      for (int i = 0; i < 2; i++) pn->mints[b][i] = pick_bytes(sc[1], pairs, 4 * b + 2 * i);
  }
}

/* Rows n..n+3's super-block at column j, repacked into z. */
ALWAYS_INLINE void repack_panel(const Part *p, int format, int n, int j, uint8_t *z) {
  const uint8_t *b[PANEL_ROWS];
  uint8_t *sc = z + packed_scales_at(format);
  uint16_t *dd = (uint16_t *)(z + packed_dd_at(format));
  memset(sc, 0, packed_panel_bytes(format) - packed_scales_at(format));
  for (int r = 0; r < PANEL_ROWS; r++) {
    b[r] = block_at(p, format, n + r, j);
    const int at = 16 * (r / 2) + 8 * (r % 2); /* row r's 8 bytes in each 32 */
    if (format == Q6_K) {
      memcpy(sc + at, b[r] + 192, 8), memcpy(sc + 32 + at, b[r] + 200, 8);
      memcpy(dd + 4 * (r / 2) + r % 2, b[r] + 208, 2), memcpy(dd + 4 * (r / 2) + 2 + r % 2, b[r] + 208, 2);
    } else {
      uint8_t bytes[16]; /* the 8 scales, then the 8 mins */
      _mm_storeu_si128((__m128i *)bytes, k4_scale_bytes(b[r] + 4));
      memcpy(sc + at, bytes, 8), memcpy(sc + 32 + at, bytes + 8, 8);
      memcpy(dd + 4 * (r / 2) + r % 2, b[r], 2), memcpy(dd + 4 * (r / 2) + 2 + r % 2, b[r] + 2, 2);
    }
  }
  for (int i = 0; i < turns(format); i++) {
    __m256i in[PANEL_ROWS], out[4];
    for (int r = 0; r < PANEL_ROWS; r++) in[r] = _mm256_loadu_si256((const __m256i *)(b[r] + turn_at(format, i)));
    rows_to_lanes(in, out);
    for (int g = 0; g < 4; g++) _mm256_store_si256((__m256i *)(z + PACKED4_LEVELS + TURN4 * i) + g, out[g]);
  }
}

/* Tokens t0..t0+C-1 against a panel at column j: their float sums with the four rows (acc[t]:
   lanes 0, 1, 4, 5; the rest scratch) get the super-block's two activation blocks, in order.
   The levels are the panel's, or decoded from a repacked panel's `turned` level bits as used.
   PANEL_TOKENS tokens share each load of the panel: a load per product and token would hold
   the products to 1.7-1.9 cycles each on Zen 3, where they run in 1.1-1.3 this way.
   The 16-bit sums of column pairs that share a scale (a unit's 32 columns; 16 in Q6_K) are
   added in 16 bits before one vpmaddwd multiplies them by it: the pair sums are at most
   2 x 15 x 127 (Q4_K), 2 x 31 x 127 (Q5_K) or 2 x 63 x 127 (Q6_K), so four, four or two of them
   stay within 32,767 and the sums are the integers every route computes: 5 multiplying
   instructions per 128 multiply-adds of a token (6 for Q6_K) where 8 ran. That pays where
   vpmaddwd shares vpmaddubsw's pipes; on Zen 3 it runs beside them and nothing changed. */
ALWAYS_INLINE void panel_tokens(const Panel *pn, const uint8_t *turned, int format, const Acts *a, int t0, int C, int j,
                                float acc[][8]) {
  const int K = a->cols, S = sums_per_row(K), B = blocks_per_row(K);
  for (int half = 0; half < 2; half++) {
    __m256i ia[PANEL_TOKENS];
    for (int t = 0; t < C; t++) ia[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int k = 4 * half; k < 4 * half + 4; k++) {
      /* Q6_K: columns 0-15 and 16-31 of a unit have a scale each; the others' one scale is
         stored twice. */
      const int groups = format == Q6_K ? 2 : 1;
#pragma GCC unroll 2
      for (int i = 0; i < groups; i++) {
        __m256i pairs[PANEL_TOKENS];
#pragma GCC unroll 4
        for (int g = 4 / groups * i; g < 4 / groups * (i + 1); g++) {
          const __m256i levels = turned ? k_levels(format, turned + 32 * g, TURN4, k) : pn->levels[k][g];
          for (int t = 0; t < C; t++) {
            int64_t eight; /* the token's activations of columns 8g .. 8g + 7 of unit k */
            memcpy(&eight, a->kq + (size_t)(t0 + t) * K + j + 32 * k + 8 * g, 8);
            const __m256i p = _mm256_maddubs_epi16(levels, _mm256_set1_epi64x(eight));
            pairs[t] = g % (4 / groups) ? _mm256_add_epi16(pairs[t], p) : p;
          }
        }
        for (int t = 0; t < C; t++) ia[t] = scaled_add(ia[t], pairs[t], pn->ints[k][i]);
      }
    }
    const int b = j / ACT_BLOCK + half;
    for (int t = 0; t < C; t++) {
      int64_t pairs[2]; /* the token's 16-column sums of the block, four at a time */
      memcpy(pairs, a->qsums + (size_t)(t0 + t) * S + 8 * b, 16);
      const __m256i M = _mm256_add_epi32(_mm256_madd_epi16(pn->mints[half][0], _mm256_set1_epi64x(pairs[0])),
                                         _mm256_madd_epi16(pn->mints[half][1], _mm256_set1_epi64x(pairs[1])));
      /* rows 0-1's I, their M, rows 2-3's I, their M */
      const __m256 F = _mm256_cvtepi32_ps(_mm256_hadd_epi32(ia[t], M));
      const __m256 by = _mm256_mul_ps(pn->dd, _mm256_set1_ps(a->kscale[(size_t)(t0 + t) * B + b])); /* d s, dmin s */
      const int swap = _MM_SHUFFLE(1, 0, 3, 2); /* each row's M and dmin s to its I's lane */
      __m256 sum = _mm256_load_ps(acc[t]); /* kfold's steps, lane for lane */
      sum = _mm256_fmadd_ps(F, by, sum);
      sum = _mm256_fnmadd_ps(_mm256_permute_ps(F, swap), _mm256_permute_ps(by, swap), sum);
      _mm256_store_ps(acc[t], sum);
    }
  }
}

/* Tokens t..t1-1 against a panel, PANEL_TOKENS at a time (each count compiled with its shape a
   constant). */
ALWAYS_INLINE void panel_slab(const Panel *pn, const uint8_t *turned, int format, const Acts *a, int t0, int t1,
                              int j, float acc[][8]) {
  int t = t0;
  for (; t + PANEL_TOKENS <= t1; t += PANEL_TOKENS) panel_tokens(pn, turned, format, a, t, PANEL_TOKENS, j, acc + (t - t0));
  switch (t1 - t) {
    case 1: panel_tokens(pn, turned, format, a, t, 1, j, acc + (t - t0)); break;
    case 2: panel_tokens(pn, turned, format, a, t, 2, j, acc + (t - t0)); break;
    case 3: panel_tokens(pn, turned, format, a, t, 3, j, acc + (t - t0)); break;
  }
}

/* Rows n..n+3 against tokens t0..t1-1 (at most PANEL_SLAB), the panels built from the file's
   blocks or loaded from repacked ones (`packed`: the rows' panels, one after another); the
   results of rows `first`..`last` - 1 of the four are kept. */
ALWAYS_INLINE void panel_quad(const Part *p, int format, const uint8_t *packed, int K, const Acts *a, int t0, int t1,
                              int n, int first, int last, float *y, int ldy, int add) {
  float acc[PANEL_SLAB][8] __attribute__((aligned(32)));
  memset(acc, 0, sizeof(float) * 8 * (size_t)(t1 - t0));
  const size_t bytes = packed_panel_bytes(format);
  for (int j = 0; j < K; j += 256) {
    Panel pn;
    if (packed) {
      const uint8_t *z = packed + (size_t)(j / 256) * bytes; /* and four panels on, into L2 */
      for (size_t line = 0; line < bytes; line += 64) _mm_prefetch((const char *)z + 4 * bytes + line, _MM_HINT_T1);
      load_panel_scales(format, z, &pn);
      panel_slab(&pn, z + PACKED4_LEVELS, format, a, t0, t1, j, acc);
    } else {
      prefetch_rows(p, format, n, PANEL_ROWS, t1 - t0, j);
      build_panel(p, format, K, n, j, &pn);
      panel_slab(&pn, NULL, format, a, t0, t1, j, acc);
    }
  }
  for (int t = t0; t < t1; t++)
    for (int r = first; r < last; r++) put(y + (size_t)t * ldy + n + r, acc[t - t0][r % 2 + 4 * (r / 2)], add);
}

int panel_rows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add) {
  int n = n0;
  for (int t0 = 0; t0 < T; t0 += PANEL_SLAB) {
    const int t1 = t0 + PANEL_SLAB < T ? t0 + PANEL_SLAB : T;
    for (n = n0; n + PANEL_ROWS <= n1; n += PANEL_ROWS) {
#define QUAD(F) panel_quad(p, F, NULL, K, a, t0, t1, n, 0, PANEL_ROWS, y, ldy, add)
      K_FORMAT(QUAD)
    }
  }
  return n;
}

ALWAYS_INLINE size_t packed_row_group_bytes(int format, int K) { return (size_t)(K / 256) * packed_panel_bytes(format); }

size_t draftline_packed_bytes(int format, int rows, int cols) {
  if (!integer_scales(format) || rows % PANEL_ROWS || cols % 256) return 0;
  return (size_t)(rows / PANEL_ROWS) * packed_row_group_bytes(format, cols);
}

void draftline_repack(const Part *p, int cols, int r0, int r1, uint8_t *out) {
  for (int n = r0; n < r1; n += PANEL_ROWS) {
    uint8_t *z = out + (size_t)(n / PANEL_ROWS) * packed_row_group_bytes(p->format, cols);
    for (int j = 0; j < cols; j += 256, z += packed_panel_bytes(p->format)) {
#define REPACK(F) repack_panel(p, F, n, j, z)
      K_FORMAT(REPACK)
    }
  }
}

void packed_rows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add) {
  const int format = p->format - PACKED;
  for (int t0 = 0; t0 < T; t0 += PANEL_SLAB) {
    const int t1 = t0 + PANEL_SLAB < T ? t0 + PANEL_SLAB : T;
    for (int n = n0 / PANEL_ROWS * PANEL_ROWS; n < n1; n += PANEL_ROWS) {
      const uint8_t *z = p->data + (size_t)(n / PANEL_ROWS) * packed_row_group_bytes(format, K);
      const int first = n < n0 ? n0 - n : 0, last = n + PANEL_ROWS > n1 ? n1 - n : PANEL_ROWS;
#define PACKED_QUAD(F) panel_quad(p, F, z, K, a, t0, t1, n, first, last, y, ldy, add)
      switch (format) {
        case Q4_K: PACKED_QUAD(Q4_K); break; case Q5_K: PACKED_QUAD(Q5_K); break; default: PACKED_QUAD(Q6_K); break;
      }
    }
  }
}

#endif
