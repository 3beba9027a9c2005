/* The K-quants' wide route on AMX (Intel Sapphire Rapids and later, where the kernel grants the
tile state): a block of rows unpacked by matmul.c, times 16 tokens at a time.

Per activation block of 128 columns: one TDPBUSD per unit of one integer scale (32 columns for
Q4_K and Q5_K, 16 for Q6_K) gives each (row, token) of a 16 x 16 tile that unit's dot product
of the levels and the activations; each is multiplied by its row's integer scale and added in
zmm registers (vpmulld), which makes I; M, the integer mins times the activations' 16-column
sums, takes 4 vpdpwssd per row. Those are the integers the other routes sum, and the float
steps after them are product.h's kfold, so a token's result is bitwise the same on every route
and width. A TDPBUSD's time does not depend on how many of its 16 tokens are used, so passes of
AMX_TOKENS tokens and more cost about what the weights take to read (docs/native.md, "AMX").

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

#if AMX
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} __attribute__((packed)) TileConfig;

static __thread int configured; /* the columns per TDPBUSD this thread's tiles are set for (0: none) */

/* tmm0-3: sums, 16 rows x 16 tokens (int32); tmm4-5: levels, 16 rows x k; tmm6-7: activations,
   k / 4 rows of 16 tokens x 4 columns. */
static void configure(int k) {
  if (configured == k) return;
  TileConfig c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int i = 0; i < 4; i++) c.rows[i] = 16, c.colsb[i] = 64;
  for (int i = 4; i < 6; i++) c.rows[i] = AMX_ROWS, c.colsb[i] = (uint16_t)k;
  for (int i = 6; i < 8; i++) c.rows[i] = (uint8_t)(k / 4), c.colsb[i] = 4 * TILE_T;
  _tile_loadconfig(&c);
  configured = k;
}

#define BARRIER() __asm__ volatile("" ::: "memory")
/* Columns at..at + k - 1 of the rows times the tokens' activations, into sums tile S. */
#define PIECE(S, A, B, at)                                                                       \
  do {                                                                                           \
    _tile_loadd(A, w + (at), (long)ldw);                                                         \
    _tile_loadd(B, tiles + (size_t)(at) * TILE_T, 4 * TILE_T);                                   \
    _tile_zero(S);                                                                               \
    _tile_dpbusd(S, A, B);                                                                       \
  } while (0)

enum { PIECES = ACT_BLOCK / 16 }; /* the most TDPBUSDs of one block (Q6_K's) */

/* The TDPBUSDs of block b (ACT_BLOCK / k of them), their sums stored at sums[piece]. */
static inline void issue(const uint8_t *w, size_t ldw, int k, const int8_t *tiles, int b,
                         int32_t sums[][AMX_ROWS * TILE_T]) {
  for (int at = ACT_BLOCK * b, piece = 0; at < ACT_BLOCK * (b + 1); at += 4 * k, piece += 4) {
    PIECE(0, 4, 6, at);
    PIECE(1, 5, 7, at + k);
    PIECE(2, 4, 6, at + 2 * k);
    PIECE(3, 5, 7, at + 3 * k);
    BARRIER();
    _tile_stored(0, sums[piece], 64);
    _tile_stored(1, sums[piece + 1], 64);
    _tile_stored(2, sums[piece + 2], 64);
    _tile_stored(3, sums[piece + 3], 64);
    BARRIER();
  }
}

/* Rows 0..R-1 of w against token group g (its first C tokens kept), into y[t * ldy + r]. The
   tile unit runs a block ahead of the zmm steps: they read sums stored a block earlier. */
static void amx_tile(const uint8_t *w, size_t ldw, int k, const Acts *a, int g, int R, int C, float *y, int ldy,
                     int add) {
  const int K = a->cols, B = blocks_per_row(K), pieces = ACT_BLOCK / k;
  const int8_t *tiles = a->tiles + (size_t)g * TILE_T * K;
  int32_t sums[2][PIECES][AMX_ROWS * TILE_T] __attribute__((aligned(64)));
  __m512 acc[AMX_ROWS];
  for (int r = 0; r < AMX_ROWS; r++) acc[r] = _mm512_setzero_ps();
  issue(w, ldw, k, tiles, 0, sums[0]);
  for (int b = 0; b < B; b++) {
    if (b + 1 < B) issue(w, ldw, k, tiles, b + 1, sums[(b + 1) % 2]);
    int32_t(*ready)[AMX_ROWS * TILE_T] = sums[b % 2];
    const int32_t *pairs = a->block_qsums + ((size_t)g * B + b) * 4 * TILE_T;
    const __m512 s = _mm512_load_ps(a->block_scales + ((size_t)g * B + b) * TILE_T);
    for (int r = 0; r < R; r++) {
      const uint8_t *row = w + r * ldw;
      const int16_t *ints = unpacked_ints(row, K) + ACT_BLOCK / 16 * b, *mints = unpacked_mints(row, K) + 8 * b;
      __m512i I = _mm512_setzero_si512(), M = _mm512_setzero_si512();
      for (int piece = 0; piece < pieces; piece++)
        I = _mm512_add_epi32(I, _mm512_mullo_epi32(_mm512_load_si512(ready[piece] + r * TILE_T),
                                                    _mm512_set1_epi32(ints[piece * k / 16])));
      for (int p = 0; p < 4; p++) {
        int32_t both; /* mints 2p and 2p + 1, as vpdpwssd pairs them */
        memcpy(&both, mints + 2 * p, 4);
        M = _mm512_dpwssd_epi32(M, _mm512_load_si512(pairs + p * TILE_T), _mm512_set1_epi32(both));
      }
      const __m512 d = _mm512_set1_ps(unpacked_d(row, K)[b / 2]), dmin = _mm512_set1_ps(unpacked_dmin(row, K)[b / 2]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(d, s), acc[r]); /* kfold, 16 tokens */
      acc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dmin, s), acc[r]);
    }
  }
  float out[TILE_T] __attribute__((aligned(64)));
  for (int r = 0; r < R; r++) {
    _mm512_store_ps(out, acc[r]);
    for (int t = 0; t < C; t++) put(y + (size_t)t * ldy + r, out[t], add);
  }
}

void amx_ktiles(const uint8_t *w, size_t ldw, int format, const Acts *a, int T, int rows, float *y, int ldy, int add) {
  const int k = format == Q6_K ? 16 : 32; /* columns of one integer scale */
  configure(k);
  BARRIER(); /* the rows matmul.c just unpacked */
  for (int r = 0; r < rows; r += AMX_ROWS)
    for (int g = 0; g * TILE_T < T; g++) {
      const int R = rows - r < AMX_ROWS ? rows - r : AMX_ROWS, C = T - g * TILE_T < TILE_T ? T - g * TILE_T : TILE_T;
      amx_tile(w + r * ldw, ldw, k, a, g, R, C, y + (size_t)g * TILE_T * ldy + r, ldy, add);
    }
}
#else
void amx_ktiles(const uint8_t *w, size_t ldw, int format, const Acts *a, int T, int rows, float *y, int ldy, int add) {
  (void)w, (void)ldw, (void)format, (void)a, (void)T, (void)rows, (void)y, (void)ldy, (void)add;
  abort(); /* amx_for is never true in this build */
}
#endif
