/* The K-quants' wide route on AMX (Intel Sapphire Rapids and later, where the kernel grants the
tile state): a block of rows unpacked for the tiles, times 16 tokens at a time. Per activation
block of 128 columns it makes the integers the registers' routes make (product.h), I (levels
times activations times integer scales) and M (integer mins times the activations' sums), for
each (row, token) of a 16 x 16 tile; the float steps after them are product.h's kfold, so a
token's result is bitwise the same on every route and width. The scales are folded into the
rows, so that no multiplication per unit is left:
- Q4_K and Q5_K: the 6-bit scale of each 32 columns is split, sc = 8 hi + lo, so that level * hi
  and level * lo fit a byte (at most 31 * 7); two TDPBUSDs per 64 columns give C_hi and C_lo:
  I = 8 C_hi + C_lo, exactly. M takes the zmm steps: each 32 columns' min times the tokens'
  32-column sums, two per vpdpwssd, cheaper than a third plane on this tile unit.
- Q6_K (int8 scales per 16 columns, levels 0-63): the scale in base 4, sc = p0 + 4 p1 + 16 p2 +
  64 p3 (p0-p2 in 0..3, p3 in -2..1), so that level * p fits a byte (189 at most; signed for
  p3); with a plane of the scales themselves (M = 32 sum(sc * q): the registers' mins are
  32 sc), five TDPBUSD/TDPBSSDs per 64 columns give I = C0 + 4 C1 + 16 C2 + 64 C3. Five planes
  cost more to unpack than one group of 16 tokens saves, so a pass of one group takes a
  TDPBUSD per 16 columns of the levels instead ("pieces"), each (row, token) then multiplied
  by its row's scale in zmm registers (vpmulld), M by vpdpwssd.
The tile unit runs a block ahead of the zmm steps, which read sums stored a block earlier. A
TDPBUSD's time does not depend on how many of its 16 tokens are used, so wide passes cost
little more per token than the weights take to read (docs/native.md, "AMX").

GCC's tile intrinsics do not tell the compiler that they read or write memory: the barriers
below keep the unpacked rows and the stored sums in memory where the tile instructions see them.
*/
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "product.h"

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__) && defined(__AVX512VNNI__)
#define AMX 1
#else
#define AMX 0
#endif

/* Passes wider than the narrow route's tiles take the AMX tiles: up to 8 tokens, reading each
   unit once for every token costs less than unpacking it for the tiles (measured: a 4-token
   pass took 1.7x as long on AMX, an 8-token one as long, a 16-token one 0.67x). */
enum { AMX_TOKENS = FUSED_TOKENS + 1 };

static int granted, enabled; /* the kernel gave this process the tile state; the route is on */

__attribute__((constructor)) static void request_tiles(void) {
#if AMX
  enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
  granted = enabled = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#endif
}

/* Turn the route on (1) or off (0), or leave it (-1); returns whether it runs now. */
int draftline_amx(int on) {
  if (on >= 0) enabled = granted && on;
  return enabled;
}

int amx_for(int T) { return enabled && T >= AMX_TOKENS; }

/* The pass width from which the AMX route runs (0: it does not). */
int draftline_tiles_from(void) { return enabled ? AMX_TOKENS : 0; }

int amx_folds(int format, int T) { return format != Q6_K || T > TILE_T; }

/* A row unpacked for folded tiles: Q4_K/Q5_K: the planes hi, lo [K] bytes each, then d
   [K / 256] and dmin [K / 256] floats, then each 32 columns' min (int16, so that two pair up
   with two 32-column sums of the activations in a vpdpwssd); Q6_K: the planes p0, p1, p2, p3,
   sc [K] each, then d. */
size_t amx_folded_bytes(int format, int K) {
  return ((size_t)(format == Q6_K ? 5 * K : 2 * K + K / 16) + (size_t)K / 32 + 63) / 64 * 64;
}

/* Where a folded Q4_K/Q5_K row's d, dmin and mins start. */
ALWAYS_INLINE float *folded_d(const uint8_t *row, int K) { return (float *)(row + 2 * (size_t)K); }
ALWAYS_INLINE int32_t *folded_mins(const uint8_t *row, int K) { return (int32_t *)(folded_d(row, K) + K / 128); }

#if AMX
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} __attribute__((packed)) TileConfig;

typedef enum { FOLDED, PIECES } Layout;

/* FOLDED: every tile 16 rows x 64 bytes: the sums (16 rows x 16 tokens, int32) in tmm0-1
   (Q4_K/Q5_K) or tmm0-4 (Q6_K), the rows' planes in the next ones, the activations of two 64
   columns in tmm6-7 (16 rows of 16 tokens x 4 columns). PIECES: tmm0-3 sums, tmm4-5 levels (16
   rows x 16 columns), tmm6-7 activations (4 rows of 16 tokens x 4 columns). */
static void configure(Layout layout) {
  TileConfig c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  const int k = layout == FOLDED ? 64 : 16;
  for (int i = 0; i < 6; i++) c.rows[i] = AMX_ROWS, c.colsb[i] = i < 4 ? 64 : (uint16_t)k;
  for (int i = 6; i < 8; i++) c.rows[i] = (uint8_t)(k / 4), c.colsb[i] = 4 * TILE_T;
  _tile_loadconfig(&c);
}

/* Lane values of `v` (16 x int16, one per 16 columns of a super-block) spread over unit k's
   32 columns: the first half's value in its 16 lanes, the second's in the others. */
ALWAYS_INLINE __m256i unit_lanes(__m256i v, int k) {
  return _mm256_permutexvar_epi16(_mm256_set_m128i(_mm_set1_epi16((short)(2 * k + 1)), _mm_set1_epi16((short)(2 * k))), v);
}

/* level * each column's multiplier (16-bit lanes), as bytes: a 16-bit product of two bytes' lane,
   with no carry from the low byte (each product < 256). */
ALWAYS_INLINE __m256i times(__m256i levels, __m256i multipliers) { return _mm256_mullo_epi16(levels, multipliers); }

ALWAYS_INLINE void fold_row(const Part *p, int format, int K, int row, uint8_t *out) {
  float *d = format == Q6_K ? (float *)(out + 5 * (size_t)K) : folded_d(out, K), *dmin = d + K / 256;
  const __m256i byte_twice = _mm256_set1_epi16(0x0101); /* a value < 256 in both bytes of its lane */
  for (int j = 0; j < K; j += 256) {
    const uint8_t *b = block_at(p, format, row, j);
    Scales s;
    read_scales(p, format, b, row, K, j, &s, NULL);
    d[j / 256] = s.d;
    if (format != Q6_K) dmin[j / 256] = s.dmin;
    const __m256i ints = _mm256_loadu_si256((const __m256i *)s.ints);
    if (format != Q6_K) { /* one scale and min per 32 columns, each twice in Scales */
      const __m256i hi = _mm256_srli_epi16(ints, 3), lo = _mm256_and_si256(ints, _mm256_set1_epi16(7));
      int16_t *mins = (int16_t *)folded_mins(out, K) + j / 32;
      for (int k = 0; k < 8; k++) mins[k] = s.mints[2 * k]; /* Scales has each twice */
      for (int k = 0; k < 8; k++) {
        const __m256i levels = read_levels(format, b, k);
        uint8_t *at = out + j + 32 * k;
        _mm256_store_si256((__m256i *)at, times(levels, unit_lanes(hi, k)));
        _mm256_store_si256((__m256i *)(at + K), times(levels, unit_lanes(lo, k)));
      }
      continue;
    }
    /* Q6_K: the base-4 digits of each scale's low 6 bits (two's complement), its signed top
       digit (-2..1) as a magnitude and a sign, and the scale itself, as bytes */
    const __m256i top = _mm256_srai_epi16(ints, 6), three = _mm256_set1_epi16(3);
    const __m256i digits[3] = {_mm256_and_si256(ints, three), _mm256_and_si256(_mm256_srli_epi16(ints, 2), three),
                               _mm256_and_si256(_mm256_srli_epi16(ints, 4), three)};
    const __m256i magnitude = _mm256_abs_epi16(top);
    const __m256i signs = _mm256_mullo_epi16(_mm256_and_si256(top, _mm256_set1_epi16(0xff)), byte_twice);
    const __m256i scales = _mm256_mullo_epi16(_mm256_and_si256(ints, _mm256_set1_epi16(0xff)), byte_twice);
    for (int k = 0; k < 8; k++) {
      const __m256i levels = read_levels(format, b, k);
      uint8_t *at = out + j + 32 * k;
      for (int i = 0; i < 3; i++) _mm256_store_si256((__m256i *)(at + i * K), times(levels, unit_lanes(digits[i], k)));
      _mm256_store_si256((__m256i *)(at + 3 * K),
                         _mm256_sign_epi8(times(levels, unit_lanes(magnitude, k)), unit_lanes(signs, k)));
      _mm256_store_si256((__m256i *)(at + 4 * K), unit_lanes(scales, k));
    }
  }
}

void amx_fold_rows(const Part *p, int K, int r0, int rows, uint8_t *out) {
  const size_t ldw = amx_folded_bytes(p->format, K);
  for (int r = 0; r < rows; r++) {
#define FOLD(F) fold_row(p, F, K, r0 + r, out + r * ldw)
    K_FORMAT(FOLD)
  }
}

#define BARRIER() __asm__ volatile("" ::: "memory")

/* Plane `plane` of the rows (in tmm A) at columns at..at + 63 times activations tile B, into S. */
#define PLANE(S, A, plane, at, B, dp)                                                            \
  do {                                                                                           \
    _tile_loadd(A, w + (size_t)(plane) * K + (at), (long)ldw);                                   \
    dp(S, A, B);                                                                                 \
  } while (0)

/* Sums tiles 0..n-1 (2 or 5) stored at sums[0..n-1], for the zmm steps. */
static inline void store_sums(int32_t sums[][AMX_ROWS * TILE_T], int n) {
  BARRIER();
  _tile_stored(0, sums[0], 64);
  _tile_stored(1, sums[1], 64);
  if (n > 2) {
    _tile_stored(2, sums[2], 64);
    _tile_stored(3, sums[3], 64);
    _tile_stored(4, sums[4], 64);
  }
  BARRIER();
}

/* Folded Q4_K/Q5_K: block b's C_hi and C_lo, stored at sums[0..1] (M comes from the mins and
   the activations' sums, in zmm). Each plane tile has its own register, so no load waits for a
   TDPBUSD to release one. */
static inline void issue_folded(const uint8_t *w, size_t ldw, int K, const int8_t *tiles, int b,
                                int32_t sums[][AMX_ROWS * TILE_T]) {
  const int at = ACT_BLOCK * b;
  _tile_zero(0);
  _tile_zero(1);
  _tile_loadd(6, tiles + (size_t)at * TILE_T, 4 * TILE_T);
  _tile_loadd(7, tiles + (size_t)(at + 64) * TILE_T, 4 * TILE_T);
  PLANE(0, 2, 0, at, 6, _tile_dpbusd);
  PLANE(1, 3, 1, at, 6, _tile_dpbusd);
  PLANE(0, 4, 0, at + 64, 7, _tile_dpbusd);
  PLANE(1, 5, 1, at + 64, 7, _tile_dpbusd);
  store_sums(sums, 2);
}

/* Folded Q6_K: block b's C0-C3 and M / 32, stored at sums[0..4]. */
static inline void issue_folded6(const uint8_t *w, size_t ldw, int K, const int8_t *tiles, int b,
                                 int32_t sums[][AMX_ROWS * TILE_T]) {
  const int at = ACT_BLOCK * b;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_loadd(6, tiles + (size_t)at * TILE_T, 4 * TILE_T);
  _tile_loadd(7, tiles + (size_t)(at + 64) * TILE_T, 4 * TILE_T);
  PLANE(0, 5, 0, at, 6, _tile_dpbusd); /* unsigned digits */
  PLANE(1, 5, 1, at, 6, _tile_dpbusd);
  PLANE(2, 5, 2, at, 6, _tile_dpbusd);
  PLANE(3, 5, 3, at, 6, _tile_dpbssd); /* the signed top digit, and the scales */
  PLANE(4, 5, 4, at, 6, _tile_dpbssd);
  PLANE(0, 5, 0, at + 64, 7, _tile_dpbusd);
  PLANE(1, 5, 1, at + 64, 7, _tile_dpbusd);
  PLANE(2, 5, 2, at + 64, 7, _tile_dpbusd);
  PLANE(3, 5, 3, at + 64, 7, _tile_dpbssd);
  PLANE(4, 5, 4, at + 64, 7, _tile_dpbssd);
  store_sums(sums, 5);
}

/* Columns at..at + 15 of the rows times the tokens' activations, into sums tile S. */
#define PIECE(S, A, B, at)                                                                       \
  do {                                                                                           \
    _tile_loadd(A, w + (at), (long)ldw);                                                         \
    _tile_loadd(B, tiles + (size_t)(at) * TILE_T, 4 * TILE_T);                                   \
    _tile_zero(S);                                                                               \
    _tile_dpbusd(S, A, B);                                                                       \
  } while (0)

enum { PIECES_PER_BLOCK = ACT_BLOCK / 16 };

/* Q6_K in pieces: the 8 TDPBUSDs of block b, their sums stored at sums[piece]. */
static inline void issue_pieces(const uint8_t *w, size_t ldw, const int8_t *tiles, int b,
                                int32_t sums[][AMX_ROWS * TILE_T]) {
  for (int at = ACT_BLOCK * b, piece = 0; piece < PIECES_PER_BLOCK; at += 64, piece += 4) {
    PIECE(0, 4, 6, at);
    PIECE(1, 5, 7, at + 16);
    PIECE(2, 4, 6, at + 32);
    PIECE(3, 5, 7, at + 48);
    BARRIER();
    _tile_stored(0, sums[piece], 64);
    _tile_stored(1, sums[piece + 1], 64);
    _tile_stored(2, sums[piece + 2], 64);
    _tile_stored(3, sums[piece + 3], 64);
    BARRIER();
  }
}

/* acc += I * (d * s), then acc -= M * (dmin * s): kfold, on 16 tokens. */
ALWAYS_INLINE __m512 kfold16(__m512 acc, __m512i I, __m512i M, float d, float dmin, __m512 s) {
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(_mm512_set1_ps(d), s), acc);
  return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(_mm512_set1_ps(dmin), s), acc);
}

ALWAYS_INLINE __m512i sums_at(int32_t (*sums)[AMX_ROWS * TILE_T], int i, int r) {
  return _mm512_load_si512(sums[i] + r * TILE_T);
}

/* Block b's rows (each plane's 128 columns of the 16 rows) and activations, toward L1 a block
   ahead of their tile loads: TILELOADD reads 16 strided lines, and waits on each one. */
static inline void prefetch_block(const uint8_t *w, size_t ldw, int K, int planes, const int8_t *tiles, int b) {
  for (int plane = 0; plane < planes; plane++)
    for (int r = 0; r < AMX_ROWS; r++) {
      const char *at = (const char *)(w + r * ldw + (size_t)plane * K + ACT_BLOCK * b);
      _mm_prefetch(at, _MM_HINT_T0);
      _mm_prefetch(at + 64, _MM_HINT_T0);
    }
  for (int line = 0; line < ACT_BLOCK * TILE_T; line += 64)
    _mm_prefetch((const char *)(tiles + (size_t)ACT_BLOCK * b * TILE_T + line), _MM_HINT_T0);
}

/* Rows 0..R-1 of w against token group g (its first C tokens kept), into y[t * ldy + r]. */
static void amx_tile(const uint8_t *w, size_t ldw, int format, int folded, const Acts *a, int g, int R, int C,
                     float *y, int ldy, int add) {
  const int K = a->cols, B = blocks_per_row(K);
  const int8_t *tiles = a->tiles + (size_t)g * TILE_T * K;
  int32_t sums[2][PIECES_PER_BLOCK][AMX_ROWS * TILE_T] __attribute__((aligned(64)));
  __m512 acc[AMX_ROWS];
  for (int r = 0; r < AMX_ROWS; r++) acc[r] = _mm512_setzero_ps();
  for (int b = 0; b <= B; b++) {
    if (b + 1 < B && folded) prefetch_block(w, ldw, K, format == Q6_K ? 5 : 2, tiles, b + 1);
    if (b < B && !folded) issue_pieces(w, ldw, tiles, b, sums[b % 2]);
    else if (b < B && format == Q6_K) issue_folded6(w, ldw, K, tiles, b, sums[b % 2]);
    else if (b < B) issue_folded(w, ldw, K, tiles, b, sums[b % 2]);
    if (b == 0) continue;
    const int done = b - 1; /* the block whose sums were stored a step ago */
    int32_t(*ready)[AMX_ROWS * TILE_T] = sums[done % 2];
    const __m512 s = _mm512_load_ps(a->block_scales + ((size_t)g * B + done) * TILE_T);
    if (folded && format == Q6_K) {
      for (int r = 0; r < R; r++) {
        const float d = ((const float *)(w + r * ldw + 5 * (size_t)K))[done / 2];
        __m512i I = sums_at(ready, 3, r);
        for (int i = 2; i >= 0; i--) I = _mm512_add_epi32(_mm512_slli_epi32(I, 2), sums_at(ready, i, r));
        acc[r] = kfold16(acc[r], I, _mm512_slli_epi32(sums_at(ready, 4, r), 5), d, d, s);
      }
    } else if (folded) {
      const int32_t *pairs = a->block_qsums + ((size_t)g * B + done) * 4 * TILE_T;
      __m512i sums32[4], both[2]; /* each 32 columns' sum per token, then two of them per lane */
      for (int p = 0; p < 4; p++)
        sums32[p] = _mm512_madd_epi16(_mm512_load_si512(pairs + p * TILE_T), _mm512_set1_epi16(1));
      for (int p = 0; p < 2; p++)
        both[p] = _mm512_or_si512(_mm512_and_si512(sums32[2 * p], _mm512_set1_epi32(0xffff)),
                                  _mm512_slli_epi32(sums32[2 * p + 1], 16));
      for (int r = 0; r < R; r++) {
        const float *d = folded_d(w + r * ldw, K);
        const int32_t *mins = folded_mins(w + r * ldw, K) + 2 * done; /* pairs of 32-column mins */
        const __m512i I = _mm512_add_epi32(_mm512_slli_epi32(sums_at(ready, 0, r), 3), sums_at(ready, 1, r));
        const __m512i M0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), both[0], _mm512_set1_epi32(mins[0]));
        const __m512i M = _mm512_dpwssd_epi32(M0, both[1], _mm512_set1_epi32(mins[1]));
        acc[r] = kfold16(acc[r], I, M, d[done / 2], d[K / 256 + done / 2], s);
      }
    } else {
      const int32_t *pairs = a->block_qsums + ((size_t)g * B + done) * 4 * TILE_T;
      for (int r = 0; r < R; r++) {
        const uint8_t *row = w + r * ldw;
        const int16_t *ints = unpacked_ints(row, K) + PIECES_PER_BLOCK * done, *mints = unpacked_mints(row, K) + 8 * done;
        __m512i I = _mm512_setzero_si512(), M = _mm512_setzero_si512();
        for (int piece = 0; piece < PIECES_PER_BLOCK; piece++)
          I = _mm512_add_epi32(I, _mm512_mullo_epi32(sums_at(ready, piece, r), _mm512_set1_epi32(ints[piece])));
        for (int p = 0; p < 4; p++) {
          int32_t both; /* mints 2p and 2p + 1, as vpdpwssd pairs them */
          memcpy(&both, mints + 2 * p, 4);
          M = _mm512_dpwssd_epi32(M, _mm512_load_si512(pairs + p * TILE_T), _mm512_set1_epi32(both));
        }
        acc[r] = kfold16(acc[r], I, M, unpacked_d(row, K)[done / 2], unpacked_dmin(row, K)[done / 2], s);
      }
    }
  }
  float out[TILE_T] __attribute__((aligned(64)));
  for (int r = 0; r < R; r++) {
    _mm512_store_ps(out, acc[r]);
    for (int t = 0; t < C; t++) put(y + (size_t)t * ldy + r, out[t], add);
  }
}

void amx_ktiles(const uint8_t *w, size_t ldw, int format, const Acts *a, int T, int rows, float *y, int ldy, int add) {
  /* The tile state is the thread's, and other libraries in the process (llama.cpp's ggml,
     oneDNN in torch) configure it once per thread and count on it: theirs is put back after. */
  TileConfig theirs;
  _tile_storeconfig(&theirs);
  const int folded = amx_folds(format, T);
  configure(folded ? FOLDED : PIECES);
  BARRIER(); /* the rows just unpacked */
  for (int r = 0; r < rows; r += AMX_ROWS)
    for (int g = 0; g * TILE_T < T; g++) {
      const int R = rows - r < AMX_ROWS ? rows - r : AMX_ROWS, C = T - g * TILE_T < TILE_T ? T - g * TILE_T : TILE_T;
      amx_tile(w + r * ldw, ldw, format, folded, a, g, R, C, y + (size_t)g * TILE_T * ldy + r, ldy, add);
    }
  if (theirs.palette) _tile_loadconfig(&theirs);
  else _tile_release();
}
#else
void amx_fold_rows(const Part *p, int K, int r0, int rows, uint8_t *out) {
  (void)p, (void)K, (void)r0, (void)rows, (void)out;
  abort(); /* amx_for is never true in this build */
}

void amx_ktiles(const uint8_t *w, size_t ldw, int format, const Acts *a, int T, int rows, float *y, int ldy, int add) {
  (void)w, (void)ldw, (void)format, (void)a, (void)T, (void)rows, (void)y, (void)ldy, (void)add;
  abort();
}
#endif
