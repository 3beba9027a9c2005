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

/* Tokens t0..t0+C-1 against a panel at column j: their float sums with the four rows (acc[t]:
   lanes 0, 1, 4, 5; the rest scratch) get the super-block's two activation blocks, in order.
   PANEL_TOKENS tokens share each load of the panel: a load per product and token would hold
   the products to 1.7-1.9 cycles each on Zen 3, where they run in 1.1-1.3 this way. */
ALWAYS_INLINE void panel_tokens(const Panel *pn, const Acts *a, int t0, int C, int j, float acc[][8]) {
  const int K = a->cols, S = sums_per_row(K), B = blocks_per_row(K);
  for (int half = 0; half < 2; half++) {
    __m256i ia[PANEL_TOKENS];
    for (int t = 0; t < C; t++) ia[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int k = 4 * half; k < 4 * half + 4; k++) {
      const __m256i ints[2] = {pn->ints[k][0], pn->ints[k][1]};
#pragma GCC unroll 4
      for (int g = 0; g < 4; g++) {
        const __m256i levels = pn->levels[k][g];
        for (int t = 0; t < C; t++) {
          int64_t eight; /* the token's activations of columns 8g .. 8g + 7 of unit k */
          memcpy(&eight, a->kq + (size_t)(t0 + t) * K + j + 32 * k + 8 * g, 8);
          ia[t] = idot(ia[t], levels, _mm256_set1_epi64x(eight), ints[g / 2]);
        }
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

/* Rows n..n+3 against tokens t0..t1-1 (at most PANEL_SLAB). */
ALWAYS_INLINE void panel_quad(const Part *p, int format, int K, const Acts *a, int t0, int t1, int n, float *y,
                              int ldy, int add) {
  float acc[PANEL_SLAB][8] __attribute__((aligned(32)));
  memset(acc, 0, sizeof(float) * 8 * (size_t)(t1 - t0));
  for (int j = 0; j < K; j += 256) {
    prefetch_rows(p, format, n, PANEL_ROWS, t1 - t0, j);
    Panel pn;
    build_panel(p, format, K, n, j, &pn);
    int t = t0;
    for (; t + PANEL_TOKENS <= t1; t += PANEL_TOKENS) panel_tokens(&pn, a, t, PANEL_TOKENS, j, acc + (t - t0));
    switch (t1 - t) { /* each count compiled with its shape a constant */
      case 1: panel_tokens(&pn, a, t, 1, j, acc + (t - t0)); break;
      case 2: panel_tokens(&pn, a, t, 2, j, acc + (t - t0)); break;
      case 3: panel_tokens(&pn, a, t, 3, j, acc + (t - t0)); break;
    }
  }
  for (int t = t0; t < t1; t++)
    for (int r = 0; r < PANEL_ROWS; r++) put(y + (size_t)t * ldy + n + r, acc[t - t0][r % 2 + 4 * (r / 2)], add);
}

int panel_rows(const Part *p, int K, const Acts *a, int T, float *y, int ldy, int n0, int n1, int add) {
  int n = n0;
  for (int t0 = 0; t0 < T; t0 += PANEL_SLAB) {
    const int t1 = t0 + PANEL_SLAB < T ? t0 + PANEL_SLAB : T;
    for (n = n0; n + PANEL_ROWS <= n1; n += PANEL_ROWS) {
#define QUAD(F) panel_quad(p, F, K, a, t0, t1, n, y, ldy, add)
      K_FORMAT(QUAD)
    }
  }
  return n;
}

#endif
