/* The K-quants' wide route on AMX (Intel Sapphire Rapids and later, where the kernel grants the
tile state): a block of rows unpacked for the tiles, times 16 tokens at a time. Per activation
block of 128 columns it makes the integers the registers' routes make (product.h), I (levels
times activations times integer scales) and M (integer mins times the activations' sums), for
each (row, token) of a 16 x 16 tile; the float steps after them are product.h's kfold, so a
token's result is bitwise the same on every route and width.
- Q4_K and Q5_K: the 6-bit scale of each 32 columns is split, sc = 8 hi + lo, so that level * hi
  and level * lo fit a byte (at most 31 * 7); rows are unpacked as those two products and each
  column's 6-bit min m. Three TDPBUSDs per 64 columns give C_hi, C_lo and M: I = 8 C_hi + C_lo,
  exactly, with no multiplication per unit.
- Q6_K (int8 scales per 16 columns): a TDPBUSD per 16 columns of the levels, each (row, token)
  then multiplied by its row's scale and added in zmm registers (vpmulld); M takes 4 vpdpwssd
  per row and block.
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

#if AMX
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} __attribute__((packed)) TileConfig;

typedef enum { FOLDED, PIECES } Layout;

/* FOLDED: tmm0-2 the sums C_hi, C_lo, M (16 rows x 16 tokens, int32), tmm3-5 the rows' hi, lo
   and m bytes (16 rows x 64 columns), tmm6-7 the activations of 64 columns each (16 rows of 16
   tokens x 4 columns). PIECES: tmm0-3 sums, tmm4-5 levels (16 rows x 16 columns), tmm6-7
   activations (4 rows of 16 tokens x 4 columns). */
static void configure(Layout layout) {
  TileConfig c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  const int k = layout == FOLDED ? 64 : 16, sums = layout == FOLDED ? 3 : 4;
  for (int i = 0; i < 6; i++) c.rows[i] = AMX_ROWS, c.colsb[i] = i < sums ? 64 : (uint16_t)k;
  for (int i = 6; i < 8; i++) c.rows[i] = (uint8_t)(k / 4), c.colsb[i] = 4 * TILE_T;
  _tile_loadconfig(&c);
}

/* A Q4_K/Q5_K row unpacked for FOLDED tiles: hi [K], lo [K], m [K] bytes, d [K / 256],
   dmin [K / 256] floats. */
size_t amx_folded_bytes(int K) { return ((size_t)3 * K + (size_t)K / 32 + 63) / 64 * 64; }

ALWAYS_INLINE void fold_row(const Part *p, int format, int K, int row, uint8_t *out) {
  float *d = (float *)(out + 3 * (size_t)K), *dmin = d + K / 256;
  for (int j = 0; j < K; j += 256) {
    const uint8_t *b = block_at(p, format, row, j);
    Scales s;
    read_scales(p, format, b, row, K, j, &s, NULL);
    d[j / 256] = s.d, dmin[j / 256] = s.dmin;
    for (int k = 0; k < 8; k++) { /* a 16-bit product of two bytes' lane: no carry between them */
      const __m256i levels = read_levels(format, b, k);
      const short sc = s.ints[2 * k];
      _mm256_store_si256((__m256i *)(out + j + 32 * k), _mm256_mullo_epi16(levels, _mm256_set1_epi16(sc >> 3)));
      _mm256_store_si256((__m256i *)(out + K + j + 32 * k), _mm256_mullo_epi16(levels, _mm256_set1_epi16(sc & 7)));
      _mm256_store_si256((__m256i *)(out + 2 * K + j + 32 * k), _mm256_set1_epi8((char)s.mints[2 * k]));
    }
  }
}

void amx_fold_rows(const Part *p, int K, int r0, int rows, uint8_t *out) {
  const size_t ldw = amx_folded_bytes(K);
  for (int r = 0; r < rows; r++) {
    if (p->format == Q4_K) fold_row(p, Q4_K, K, r0 + r, out + r * ldw);
    else fold_row(p, Q5_K, K, r0 + r, out + r * ldw);
  }
}

#define BARRIER() __asm__ volatile("" ::: "memory")

/* FOLDED: block b's C_hi, C_lo and M, stored at sums[0..2]. */
static inline void issue_folded(const uint8_t *w, size_t ldw, int K, const int8_t *tiles, int b,
                                int32_t sums[][AMX_ROWS * TILE_T]) {
  const int at = ACT_BLOCK * b;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_loadd(6, tiles + (size_t)at * TILE_T, 4 * TILE_T);
  _tile_loadd(7, tiles + (size_t)(at + 64) * TILE_T, 4 * TILE_T);
  _tile_loadd(3, w + at, (long)ldw);
  _tile_dpbusd(0, 3, 6);
  _tile_loadd(4, w + K + at, (long)ldw);
  _tile_dpbusd(1, 4, 6);
  _tile_loadd(5, w + 2 * K + at, (long)ldw);
  _tile_dpbusd(2, 5, 6);
  _tile_loadd(3, w + at + 64, (long)ldw);
  _tile_dpbusd(0, 3, 7);
  _tile_loadd(4, w + K + at + 64, (long)ldw);
  _tile_dpbusd(1, 4, 7);
  _tile_loadd(5, w + 2 * K + at + 64, (long)ldw);
  _tile_dpbusd(2, 5, 7);
  BARRIER();
  _tile_stored(0, sums[0], 64);
  _tile_stored(1, sums[1], 64);
  _tile_stored(2, sums[2], 64);
  BARRIER();
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

/* PIECES: the 8 TDPBUSDs of block b, their sums stored at sums[piece]. */
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

/* Rows 0..R-1 of w against token group g (its first C tokens kept), into y[t * ldy + r]. */
static void amx_tile(const uint8_t *w, size_t ldw, int format, const Acts *a, int g, int R, int C, float *y, int ldy,
                     int add) {
  const int K = a->cols, B = blocks_per_row(K), folded = format != Q6_K;
  const int8_t *tiles = a->tiles + (size_t)g * TILE_T * K;
  int32_t sums[2][PIECES_PER_BLOCK][AMX_ROWS * TILE_T] __attribute__((aligned(64)));
  __m512 acc[AMX_ROWS];
  for (int r = 0; r < AMX_ROWS; r++) acc[r] = _mm512_setzero_ps();
  for (int b = 0; b <= B; b++) {
    if (b < B && folded) issue_folded(w, ldw, K, tiles, b, sums[b % 2]);
    if (b < B && !folded) issue_pieces(w, ldw, tiles, b, sums[b % 2]);
    if (b == 0) continue;
    const int done = b - 1; /* the block whose sums were stored a step ago */
    int32_t(*ready)[AMX_ROWS * TILE_T] = sums[done % 2];
    const __m512 s = _mm512_load_ps(a->block_scales + ((size_t)g * B + done) * TILE_T);
    if (folded) {
      for (int r = 0; r < R; r++) {
        const float *d = (const float *)(w + r * ldw + 3 * (size_t)K);
        const __m512i I = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(ready[0] + r * TILE_T), 3),
                                           _mm512_load_si512(ready[1] + r * TILE_T));
        acc[r] = kfold16(acc[r], I, _mm512_load_si512(ready[2] + r * TILE_T), d[done / 2], d[K / 256 + done / 2], s);
      }
      continue;
    }
    const int32_t *pairs = a->block_qsums + ((size_t)g * B + done) * 4 * TILE_T;
    for (int r = 0; r < R; r++) {
      const uint8_t *row = w + r * ldw;
      const int16_t *ints = unpacked_ints(row, K) + PIECES_PER_BLOCK * done, *mints = unpacked_mints(row, K) + 8 * done;
      __m512i I = _mm512_setzero_si512(), M = _mm512_setzero_si512();
      for (int piece = 0; piece < PIECES_PER_BLOCK; piece++)
        I = _mm512_add_epi32(I, _mm512_mullo_epi32(_mm512_load_si512(ready[piece] + r * TILE_T),
                                                    _mm512_set1_epi32(ints[piece])));
      for (int p = 0; p < 4; p++) {
        int32_t both; /* mints 2p and 2p + 1, as vpdpwssd pairs them */
        memcpy(&both, mints + 2 * p, 4);
        M = _mm512_dpwssd_epi32(M, _mm512_load_si512(pairs + p * TILE_T), _mm512_set1_epi32(both));
      }
      acc[r] = kfold16(acc[r], I, M, unpacked_d(row, K)[done / 2], unpacked_dmin(row, K)[done / 2], s);
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
  configure(format == Q6_K ? PIECES : FOLDED);
  BARRIER(); /* the rows just unpacked */
  for (int r = 0; r < rows; r += AMX_ROWS)
    for (int g = 0; g * TILE_T < T; g++) {
      const int R = rows - r < AMX_ROWS ? rows - r : AMX_ROWS, C = T - g * TILE_T < TILE_T ? T - g * TILE_T : TILE_T;
      amx_tile(w + r * ldw, ldw, format, a, g, R, C, y + (size_t)g * TILE_T * ldy + r, ldy, add);
    }
  if (theirs.palette) _tile_loadconfig(&theirs);
  else _tile_release();
}
#else
size_t amx_folded_bytes(int K) { return (size_t)K; }

void amx_fold_rows(const Part *p, int K, int r0, int rows, uint8_t *out) {
  (void)p, (void)K, (void)r0, (void)rows, (void)out;
  abort(); /* amx_for is never true in this build */
}

void amx_ktiles(const uint8_t *w, size_t ldw, int format, const Acts *a, int T, int rows, float *y, int ldy, int add) {
  (void)w, (void)ldw, (void)format, (void)a, (void)T, (void)rows, (void)y, (void)ldy, (void)add;
  abort();
}
#endif
