/* One pass of a Llama-family model on the CPU: a prefill chunk, a decoding step or a
verification pass of a chain or a token tree.

Why: in eager PyTorch a one-token pass of a small model is mostly per-op overhead (~1,600 ops
of ~7 us each), and converting a GGUF's blocks to torch's formats costs start-up time and
memory. Here a whole pass is one call that reads every matrix in its stored format (a GGUF
file's own blocks where it is mapped, or the torch backend's int4/int8): every layer's norm,
products (matmul.c), rotary, cache writes and attention, then the final norm and the head.

Exactness by construction: every output element (a row of a matrix times a token's vector, a
query head's attention for one token) is computed by one thread with a fixed order of
operations that does not depend on the pass width, the thread count or the other tokens, so
a token's logits are bitwise the same in a 13-token pass as in a one-token pass. Activations
are quantized per token (quantize.c); sums are float32; the KV cache is bf16.

Needs AVX2 and FMA (compiled with -march=native at first use; engine/execution/native/__init__.py).
*/
#include <immintrin.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "native.h"

/* limits the Python side checks (engine/execution/native/__init__.py) */
enum { MAX_THREADS = 64, MAX_GROUP = 8, MAX_HEAD_DIM = 256 };

typedef struct {
  const float *attn_norm, *ffn_norm, *bqkv; /* bqkv may be NULL */
  Matrix wqkv, wo, w_gate_up, w_down;       /* w_gate_up: gate rows, then up rows */
} Layer;

typedef struct {
  int32_t n_layers, dim, n_heads, n_kv_heads, head_dim, ffn_dim, max_len;
  int32_t rotary_pairs; /* rotate adjacent pairs (GGUF's Q/K row order for llama) instead of halves */
  float eps;
  const Layer *layers;
  const float *norm;
  Matrix head;
  uint16_t *k_cache, *v_cache; /* bf16 [n_layers, n_kv_heads, max_len, head_dim] */
  const float *cos, *sin;      /* [max_len, head_dim], halves alike */
} Model;

/* Version of the structs above and in native.h; the Python mirror checks it. */
int draftline_abi(void) { return 4; }

static inline __m256 load_bf16x8(const uint16_t *p) {
  __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static inline float sum8(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_movehdup_ps(a));
  return _mm_cvtss_f32(a);
}

static void add_bias(const float *bias, int T, float *y, int ldy, int n0, int n1) {
  for (int t = 0; t < T; t++)
    for (int n = n0; n < n1; n++) y[(size_t)t * ldy + n] += bias[n];
}

/* ---- the rest of a layer ---- */

static void rms_norm(const float *x, const float *weight, int dim, float eps, float *out) {
  float ss = 0;
  for (int i = 0; i < dim; i++) ss += x[i] * x[i];
  float r = 1.0f / sqrtf(ss / dim + eps);
  for (int i = 0; i < dim; i++) out[i] = x[i] * r * weight[i];
}

/* Rotary embedding on one head: rotating halves (Hugging Face's rotate_half), or adjacent
   pairs, which is the same rotation of the same numbers where a GGUF of the llama family stores
   each head's Q/K rows interleaved (llama.cpp's converter permutes them): element 2i there is
   element i of the Hugging Face row, 2i + 1 is i + hd/2. */
static void rotate(float *v, const float *cos, const float *sin, int hd, int pairs) {
  const int h = hd / 2;
  for (int i = 0; i < h; i++) {
    const int j = pairs ? 2 * i : i, k = pairs ? 2 * i + 1 : i + h;
    const float a = v[j], b = v[k];
    v[j] = a * cos[i] - b * sin[i];
    v[k] = b * cos[i] + a * sin[i];
  }
}

/* e^x for 8 lanes (Cephes' expf: relative error ~1e-7). Results of x <= -88 are exactly 0. */
static inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-88.0f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* act[i] = silu(gate[i]) * up[i], 8 at a time (n is a multiple of 8). */
static void swiglu(const float *gate, const float *up, int n, float *act) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int i = 0; i < n; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i);
    __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_storeu_ps(act + i, _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_loadu_ps(up + i)));
  }
}

/* The query heads that share KV head `kv_head`, for tokens t0..t1-1 of the pass (at most
   ATTN_TOKENS), each against the positions it may see: the first `start` of the cache, then
   the new ones its row of `local` allows. Positions are visited in order, so each token's
   sums run over the same sequence as in a one-token pass at its place; each key and value
   row is read from the cache once for all of these tokens and heads (at long contexts the
   cache, not the arithmetic, is what costs). scratch: ATTN_TOKENS * heads * (start + T + 8
   + head_dim) + VALUE_ROWS * head_dim floats. out: the pass's attention output [T, heads of the
   model * head_dim]. */
enum { ATTN_TOKENS = 4, VALUE_ROWS = 64 };

/* Attention's vectors: 16 floats where AVX-512 runs, else 8 (head dims are multiples of 16).
   Scores are made VEC positions at a time, one accumulator per position, and `lane_sums` adds
   each accumulator's lanes in a fixed tree, the same for every position: a score is the same
   number at every pass width on one machine. Each value lane adds its rows in order. */
#if defined(__AVX512F__)
enum { VEC = 16 };
typedef __m512 Vec;
static inline Vec vec_bf16(const uint16_t *p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
/* Lane i: the sum of v[i]'s lanes: pairs within 128-bit quarters (lanes 2 apart, then 1), then
   the quarters (1 apart, then 2). */
static inline Vec lane_sums(const Vec v[VEC]) {
  Vec s8[8], s4[4], s2[2];
  for (int i = 0; i < 8; i++)
    s8[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; i++) {
    const __m512d a = _mm512_castps_pd(s8[2 * i]), b = _mm512_castps_pd(s8[2 * i + 1]);
    s4[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  for (int i = 0; i < 2; i++)
    s2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s4[2 * i], s4[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_f32x4(s4[2 * i], s4[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(s2[0], s2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(s2[0], s2[1], _MM_SHUFFLE(3, 1, 3, 1)));
}
/* The lanes of v set in `mask`, in order, to out. */
static inline void store_seen(float *out, Vec v, unsigned mask) {
  _mm512_mask_compressstoreu_ps(out, (__mmask16)mask, v);
}
#define vec_load _mm512_loadu_ps
#define vec_store _mm512_storeu_ps
#define vec_fma _mm512_fmadd_ps
#define vec_mul _mm512_mul_ps
#define vec_set1 _mm512_set1_ps
#define vec_zero _mm512_setzero_ps
#else
enum { VEC = 8 };
typedef __m256 Vec;
#define vec_bf16 load_bf16x8
/* As above, on 8 lanes: pairs within 128-bit halves (lanes 2 apart, then 1), then the halves. */
static inline Vec lane_sums(const Vec v[VEC]) {
  Vec s4[4], s2[2];
  for (int i = 0; i < 4; i++)
    s4[i] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 2; i++) {
    const __m256d a = _mm256_castps_pd(s4[2 * i]), b = _mm256_castps_pd(s4[2 * i + 1]);
    s2[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
  }
  return _mm256_add_ps(_mm256_permute2f128_ps(s2[0], s2[1], 0x20), _mm256_permute2f128_ps(s2[0], s2[1], 0x31));
}
static inline void store_seen(float *out, Vec v, unsigned mask) {
  float lanes[VEC];
  _mm256_storeu_ps(lanes, v);
  for (int i = 0, n = 0; i < VEC; i++)
    if (mask >> i & 1) out[n++] = lanes[i];
}
#define vec_load _mm256_loadu_ps
#define vec_store _mm256_storeu_ps
#define vec_fma _mm256_fmadd_ps
#define vec_mul _mm256_mul_ps
#define vec_set1 _mm256_set1_ps
#define vec_zero _mm256_setzero_ps
#endif

/* Which of the tokens t0..t0+B-1 see position j (sees[b]); if any does, the cache row at j
   (keys or values) as float32 in `row`. */
static inline __attribute__((always_inline)) int row_seen(const uint16_t *rows, int j, int hd, int start, int T,
                                                          int t0, int B,
                           const uint8_t *local, int sees[], Vec row[]) {
  int any = 0;
  for (int b = 0; b < B; b++) any |= sees[b] = j < start || local[(t0 + b) * T + (j - start)];
  if (any)
    for (int d = 0; d < hd / VEC; d++) row[d] = vec_bf16(rows + (size_t)j * hd + VEC * d);
  return any;
}

/* Each token's scaled scores q.k for the positions it sees, per head, in order of position:
   scores [b][h][i] (rows `stride` apart), count[b] of them. Keys are read VEC positions at a
   time (aligned, so a position is always the same lane), converted to float once for all of
   these tokens and heads. */
static inline __attribute__((always_inline)) void key_scores(const uint16_t *k, int hd, int heads, int kv_head,
                                                             const float *qkv, int nqkv, int T, int t0, int B,
                                                             int start, const uint8_t *local, int stride,
                                                             float *scores, int count[]) {
  const float scale = 1.0f / sqrtf((float)hd);
  float keys[VEC][MAX_HEAD_DIM] __attribute__((aligned(64)));
  for (int j0 = 0; j0 < start + T; j0 += VEC) {
    const int n = start + T - j0 < VEC ? start + T - j0 : VEC;
    unsigned seen[ATTN_TOKENS], any = 0;
    for (int b = 0; b < B; b++) {
      seen[b] = 0;
      for (int i = 0; i < n; i++) seen[b] |= (unsigned)(j0 + i < start || local[(t0 + b) * T + (j0 + i - start)]) << i;
      any |= seen[b];
    }
    if (!any) continue;
    for (int i = 0; i < VEC; i++)
      for (int d = 0; d < hd / VEC; d++)
        vec_store(keys[i] + VEC * d, i < n ? vec_bf16(k + (size_t)(j0 + i) * hd + VEC * d) : vec_zero());
    for (int b = 0; b < B; b++) {
      if (!seen[b]) continue;
      const float *q = qkv + (size_t)(t0 + b) * nqkv + kv_head * heads * hd;
      for (int h = 0; h < heads; h++) {
        Vec dot[VEC];
        for (int i = 0; i < VEC; i++) {
          dot[i] = vec_zero();
          for (int d = 0; d < hd / VEC; d++)
            dot[i] = vec_fma(vec_load(q + h * hd + VEC * d), vec_load(keys[i] + VEC * d), dot[i]);
        }
        const Vec scaled = vec_mul(lane_sums(dot), vec_set1(scale));
        store_seen(scores + (size_t)(b * heads + h) * stride + count[b], scaled, seen[b]);
      }
      count[b] += __builtin_popcount(seen[b]);
    }
  }
}

/* Scores to exp(score - their max), in place; total[b][h]: their sum. */
static inline void exp_scores(float *scores, int stride, int B, int heads, const int count[],
                              float total[][MAX_GROUP]) {
  for (int b = 0; b < B; b++)
    for (int h = 0; h < heads; h++) { /* padded with -inf, which gives exactly 0 */
      float *seen = scores + (size_t)(b * heads + h) * stride;
      const int padded = (count[b] + 7) / 8 * 8;
      for (int i = count[b]; i < padded; i++) seen[i] = -INFINITY;
      __m256 top = _mm256_set1_ps(-INFINITY);
      for (int i = 0; i < padded; i += 8) top = _mm256_max_ps(top, _mm256_loadu_ps(seen + i));
      top = _mm256_max_ps(top, _mm256_permute2f128_ps(top, top, 1));
      top = _mm256_max_ps(top, _mm256_shuffle_ps(top, top, _MM_SHUFFLE(1, 0, 3, 2)));
      top = _mm256_max_ps(top, _mm256_shuffle_ps(top, top, _MM_SHUFFLE(2, 3, 0, 1)));
      __m256 sum = _mm256_setzero_ps();
      for (int i = 0; i < padded; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(seen + i), top));
        _mm256_storeu_ps(seen + i, e);
        sum = _mm256_add_ps(sum, e);
      }
      total[b][h] = sum8(sum);
    }
}

/* acc [b][h][d]: each (token, head)'s value rows weighted by its exp scores, added in order of
   position. Blocks of VALUE_ROWS positions are converted to float once (after acc, in
   scratch), then each (token, head) adds the rows it sees into accumulators held in registers. */
static inline __attribute__((always_inline)) void value_sums(const uint16_t *v, int hd, int heads, int T, int t0,
                                                             int B, int start, const uint8_t *local, int stride,
                                                             const float *scores, float *acc) {
  int sees[ATTN_TOKENS], at[ATTN_TOKENS] = {0};
  Vec row[MAX_HEAD_DIM / VEC];
  memset(acc, 0, sizeof(float) * (size_t)B * heads * hd);
  float *values = acc + (size_t)ATTN_TOKENS * heads * hd; /* [VALUE_ROWS][hd] */
  uint8_t seen_by[VALUE_ROWS][ATTN_TOKENS];
  for (int j0 = 0; j0 < start + T; j0 += VALUE_ROWS) {
    int rows = 0;
    for (int j = j0; j < j0 + VALUE_ROWS && j < start + T; j++) {
      if (!row_seen(v, j, hd, start, T, t0, B, local, sees, row)) continue;
      for (int d = 0; d < hd / VEC; d++) vec_store(values + (size_t)rows * hd + VEC * d, row[d]);
      for (int b = 0; b < B; b++) seen_by[rows][b] = (uint8_t)sees[b];
      rows++;
    }
    for (int b = 0; b < B; b++) {
      int used = 0;
      for (int h = 0; h < heads; h++) {
        const float *probs = scores + (size_t)(b * heads + h) * stride + at[b];
        float *a = acc + (size_t)(b * heads + h) * hd;
        Vec sum[MAX_HEAD_DIM / VEC];
        for (int d = 0; d < hd / VEC; d++) sum[d] = vec_load(a + VEC * d);
        used = 0;
        for (int r = 0; r < rows; r++) {
          if (!seen_by[r][b]) continue;
          const Vec p = vec_set1(probs[used++]);
          for (int d = 0; d < hd / VEC; d++) sum[d] = vec_fma(p, vec_load(values + (size_t)r * hd + VEC * d), sum[d]);
        }
        for (int d = 0; d < hd / VEC; d++) vec_store(a + VEC * d, sum[d]);
      }
      at[b] += used;
    }
  }
}

/* Attention of tokens t0..t1-1 for the query heads of one KV head: scores, their softmax, the
   weighted values, each token on its own and in order of position (exact, decoder.c's top). */
static inline __attribute__((always_inline)) void attend_hd(const Model *m, int hd, int layer, int kv_head,
                                                            const float *qkv, int nqkv, int T, int t0, int t1,
                                                            int start, const uint8_t *local, float *scratch,
                                                            float *out) {
  const int heads = m->n_heads / m->n_kv_heads, B = t1 - t0, stride = start + T + 8;
  const size_t base = ((size_t)layer * m->n_kv_heads + kv_head) * m->max_len * hd;
  float *scores = scratch, *acc = scratch + (size_t)ATTN_TOKENS * heads * stride; /* [b][h][i], [b][h][d] */
  int count[ATTN_TOKENS] = {0};
  float total[ATTN_TOKENS][MAX_GROUP];
  key_scores(m->k_cache + base, hd, heads, kv_head, qkv, nqkv, T, t0, B, start, local, stride, scores, count);
  exp_scores(scores, stride, B, heads, count, total);
  value_sums(m->v_cache + base, hd, heads, T, t0, B, start, local, stride, scores, acc);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < heads; h++) {
      __m256 inverse = _mm256_set1_ps(1.0f / total[b][h]);
      const float *a = acc + (size_t)(b * heads + h) * hd;
      float *o = out + (size_t)(t0 + b) * m->n_heads * hd + (kv_head * heads + h) * hd;
      for (int d = 0; d < hd / 8; d++) _mm256_storeu_ps(o + 8 * d, _mm256_mul_ps(_mm256_loadu_ps(a + 8 * d), inverse));
    }
}

/* The common head dims as constants, so that the loops over a row unroll. */
static void attend(const Model *m, int layer, int kv_head, const float *qkv, int nqkv, int T, int t0, int t1,
                   int start, const uint8_t *local, float *scratch, float *out) {
  switch (m->head_dim) {
    case 64: attend_hd(m, 64, layer, kv_head, qkv, nqkv, T, t0, t1, start, local, scratch, out); break;
    case 128: attend_hd(m, 128, layer, kv_head, qkv, nqkv, T, t0, t1, start, local, scratch, out); break;
    default: attend_hd(m, m->head_dim, layer, kv_head, qkv, nqkv, T, t0, t1, start, local, scratch, out);
  }
}

/* ---- threads ---- */

/* Threads meet at barriers between the steps of a pass. A waiting thread spins a little (the
   others are usually microseconds behind), then sleeps on a futex, giving its core back: on a
   machine shared with other work, a thread that lost its core must get one to finish. */
typedef struct {
  atomic_int waiting, generation, sleepers;
  int threads;
} Barrier;

enum { SPINS = 200 }; /* a few microseconds: longer spins cost a shared machine (measured) */

static void futex(atomic_int *at, int op, int value) { syscall(SYS_futex, at, op, value, NULL, NULL, 0); }

static void barrier_wait(Barrier *b) {
  const int generation = atomic_load(&b->generation);
  if (atomic_fetch_add(&b->waiting, 1) == b->threads - 1) {
    atomic_store(&b->waiting, 0);
    atomic_fetch_add(&b->generation, 1);
    if (atomic_load(&b->sleepers)) futex(&b->generation, FUTEX_WAKE_PRIVATE, INT_MAX);
    return;
  }
  for (int spins = 0; spins < SPINS; spins++) {
    if (atomic_load(&b->generation) != generation) return;
    _mm_pause();
  }
  atomic_fetch_add(&b->sleepers, 1);
  while (atomic_load(&b->generation) == generation) futex(&b->generation, FUTEX_WAIT_PRIVATE, generation);
  atomic_fetch_sub(&b->sleepers, 1);
}

/* Work is handed out in chunks that threads claim as they come free (rows of a product, heads,
   tokens): a thread slowed by another process leaves its share to the others. Which thread
   computes a chunk never changes its result. */
enum { CHUNK_ROWS = 64, STEPS = 9 }; /* STEPS: claimed steps per layer (and for the final ones) */

typedef struct {
  const Model *m;
  int T, start, threads;
  const int32_t *pos;
  const uint8_t *local;
  float *x, *logits;                     /* the residual stream [T, dim]; logits [T, head.rows] or NULL */
  int states;                            /* the final normed states are wanted in x */
  float *h, *qkv, *attn, *act, *gate_up; /* shared by the threads */
  Acts normed, attended, activated;      /* h, attn and act, quantized for the products */
  atomic_int *next;                      /* [STEPS * (n_layers + 1)]: each step's next chunk */
  char *private_memory;                  /* each thread's own, `private_bytes` apart */
  size_t private_bytes, products_bytes;
  Barrier barrier;
  atomic_int ready; /* set once `threads` says how many threads did start */
  int first_layer;          /* layers before it ran in a stopped pass: x is their output */
  const volatile int *stop; /* a caller's flag, read between layers; NULL: runs whole */
  atomic_int stopped;       /* layers done, set by thread 0 before a layer's last barrier: all then leave */
} Pass;

typedef struct {
  Pass *pass;
  int id;
} Worker;

/* Rows per chunk of a product of `rows` rows: twice CHUNK_ROWS where that still leaves each
   thread four chunks or more. A chunk's first tiles were prefetched (narrow.h) by whichever
   thread took the chunk before it, into that thread's caches, so fewer chunks cost less: on two
   threads the 1.5B's one- and four-token passes took about 5% less time with 128 rows than with
   64; with many threads, a product of few rows keeps enough chunks to share out. */
static int chunk_rows(const Pass *p, int rows) {
  return rows >= 4 * p->threads * 2 * CHUNK_ROWS ? 2 * CHUNK_ROWS : CHUNK_ROWS;
}

/* The next unclaimed chunk of `step` (of `chunks`), or -1. */
static int claim(Pass *p, int step, int chunks) {
  const int i = atomic_fetch_add(&p->next[step], 1);
  return i < chunks ? i : -1;
}

/* Rows of `w` in chunks: y (+)= x . w for the rows each claim gets. */
static void product_rows(Pass *p, int step, const Matrix *w, const Acts *x, float *y, int ldy, int add, void *scratch) {
  const int size = chunk_rows(p, w->rows), chunks = (w->rows + size - 1) / size;
  for (int c; (c = claim(p, step, chunks)) >= 0;) {
    const int end = (c + 1) * size < w->rows ? (c + 1) * size : w->rows;
    matmul(w, x, p->T, y, ldy, c * size, end, add, scratch);
  }
}

/* Tokens per claim: whole groups where the AMX route lays them out as tiles (acts_quantize),
   else one. */
static int tokens_per_claim(const Acts *a) { return a->tiles ? TILE_T : 1; }

/* Tokens in chunks: each quantized. */
static void quantize_tokens(Pass *p, int step, Acts *a) {
  const int n = tokens_per_claim(a);
  for (int c; (c = claim(p, step, (p->T + n - 1) / n)) >= 0;)
    acts_quantize(a, c * n, (c + 1) * n < p->T ? (c + 1) * n : p->T);
}

/* Tokens in chunks: each normalized (x -> h) and quantized. */
static void norm_tokens(Pass *p, int step, const float *weight) {
  const int D = p->m->dim, n = tokens_per_claim(&p->normed);
  for (int c; (c = claim(p, step, (p->T + n - 1) / n)) >= 0;) {
    const int t0 = c * n, t1 = t0 + n < p->T ? t0 + n : p->T;
    for (int t = t0; t < t1; t++) rms_norm(p->x + (size_t)t * D, weight, D, p->m->eps, p->h + (size_t)t * D);
    acts_quantize(&p->normed, t0, t1);
  }
}

/* The fused Q/K/V product for one head of the nh + 2 nkv heads of each token, then rotary on a
   query or key, and a key or value into the cache. */
static void qkv_head(Pass *p, const Layer *L, int layer, int head, void *scratch) {
  const Model *m = p->m;
  const int hd = m->head_dim, nh = m->n_heads, nkv = m->n_kv_heads, nqkv = (nh + 2 * nkv) * hd;
  matmul(&L->wqkv, &p->normed, p->T, p->qkv, nqkv, head * hd, (head + 1) * hd, 0, scratch);
  if (L->bqkv) add_bias(L->bqkv, p->T, p->qkv, nqkv, head * hd, (head + 1) * hd);
  for (int t = 0; t < p->T; t++) {
    float *v = p->qkv + (size_t)t * nqkv + (size_t)head * hd;
    if (head < nh + nkv)
      rotate(v, m->cos + (size_t)p->pos[t] * hd, m->sin + (size_t)p->pos[t] * hd, hd, m->rotary_pairs);
    if (head < nh) continue;
    const int g = (head - nh) % nkv;
    uint16_t *cache = head < nh + nkv ? m->k_cache : m->v_cache;
    uint16_t *at = cache + (((size_t)layer * nkv + g) * m->max_len + p->start + t) * hd;
    for (int d = 0; d < hd; d++) at[d] = f32_to_bf16(v[d]);
  }
}

/* One thread's part of every step; threads meet at a barrier wherever a step reads what
   others wrote. */
static void *run_worker(void *arg) {
  Worker *w = arg;
  Pass *p = w->pass;
  while (!atomic_load(&p->ready)) sched_yield();
  const Model *m = p->m;
  const int T = p->T, D = m->dim, hd = m->head_dim;
  const int nh = m->n_heads, nkv = m->n_kv_heads, F = m->ffn_dim;
  char *own = p->private_memory + (size_t)w->id * p->private_bytes;
  void *products = own; /* matmul's scratch, then attention's */
  float *scores = (float *)(own + p->products_bytes);
  for (int l = p->first_layer; l < m->n_layers; l++) {
    const Layer *L = &m->layers[l];
    const int step = STEPS * l;
    norm_tokens(p, step, L->attn_norm);
    barrier_wait(&p->barrier);
    for (int head; (head = claim(p, step + 1, nh + 2 * nkv)) >= 0;) qkv_head(p, L, l, head, products);
    barrier_wait(&p->barrier);
    /* A pass that outputs nothing (a prefill) needs of the last layer only its keys and values:
       the rest of it would make states no one reads. */
    if (l == m->n_layers - 1 && !p->logits && !p->states) return NULL;
    const int blocks = (T + ATTN_TOKENS - 1) / ATTN_TOKENS; /* attention: (KV head, block of tokens) */
    for (int i; (i = claim(p, step + 2, nkv * blocks)) >= 0;) {
      const int t0 = i / nkv * ATTN_TOKENS, t1 = t0 + ATTN_TOKENS < T ? t0 + ATTN_TOKENS : T;
      attend(m, l, i % nkv, p->qkv, (nh + 2 * nkv) * hd, T, t0, t1, p->start, p->local, scores, p->attn);
    }
    barrier_wait(&p->barrier);
    quantize_tokens(p, step + 3, &p->attended);
    barrier_wait(&p->barrier);
    product_rows(p, step + 4, &L->wo, &p->attended, p->x, D, 1, products);
    barrier_wait(&p->barrier);
    norm_tokens(p, step + 5, L->ffn_norm);
    barrier_wait(&p->barrier);
    /* MLP: a chunk is matching gate and up rows, so its thread applies SiLU */
    const int size = chunk_rows(p, F);
    for (int c; (c = claim(p, step + 6, (F + size - 1) / size)) >= 0;) {
      const int a = c * size, b = a + size < F ? a + size : F;
      matmul(&L->w_gate_up, &p->normed, T, p->gate_up, 2 * F, a, b, 0, products);
      matmul(&L->w_gate_up, &p->normed, T, p->gate_up, 2 * F, F + a, F + b, 0, products);
      for (int t = 0; t < T; t++)
        swiglu(p->gate_up + (size_t)t * 2 * F + a, p->gate_up + (size_t)t * 2 * F + F + a, b - a,
               p->act + (size_t)t * F + a);
    }
    barrier_wait(&p->barrier);
    quantize_tokens(p, step + 7, &p->activated);
    barrier_wait(&p->barrier);
    product_rows(p, step + 8, &L->w_down, &p->activated, p->x, D, 1, products);
    if (w->id == 0 && p->stop && *p->stop) atomic_store(&p->stopped, l + 1);
    barrier_wait(&p->barrier); /* every thread reads the same `stopped` after it */
    if (atomic_load(&p->stopped)) return NULL;
  }
  const int step = STEPS * m->n_layers;
  norm_tokens(p, step, m->norm);
  barrier_wait(&p->barrier);
  if (p->logits) product_rows(p, step + 1, &m->head, &p->normed, p->logits, m->head.rows, 0, products);
  for (int t; (t = claim(p, step + 2, T)) >= 0;) /* x is read by nobody now: the normed states replace it */
    memcpy(p->x + (size_t)t * D, p->h + (size_t)t * D, sizeof(float) * D);
  return NULL;
}

static size_t up64(size_t n) { return (n + 63) / 64 * 64; }

/* Bytes a pass allocates: shared [T, ...] buffers, then each thread's own. */
static void pass_bytes(const Model *m, int T, int start, size_t *shared, size_t *products, size_t *own) {
  const int D = m->dim, F = m->ffn_dim, nh = m->n_heads, hd = m->head_dim;
  const int nqkv = (nh + 2 * m->n_kv_heads) * hd, group = nh / m->n_kv_heads;
  *shared = up64(sizeof(float) * (size_t)T * (D + nqkv + nh * hd + 3 * F)) + up64(acts_bytes(T, D)) +
            up64(acts_bytes(T, nh * hd)) + up64(acts_bytes(T, F)) + up64(sizeof(atomic_int) * STEPS * (m->n_layers + 1));
  int widest = D > F ? D : F;
  widest = nh * hd > widest ? nh * hd : widest;
  *products = up64(matmul_scratch(widest));
  *own = *products + up64(sizeof(float) * ((size_t)ATTN_TOKENS * group * (start + T + 8 + hd) + VALUE_ROWS * hd));
}

size_t draftline_scratch_bytes(const Model *m, int T, int start, int threads) {
  size_t shared, products, own;
  pass_bytes(m, T, start, &shared, &products, &own);
  return shared + own * threads;
}

/* y [T, w->rows] = x [T, w->cols] . w, on one thread (an output head outside a pass; tests). */
int draftline_matmul(const Matrix *w, int T, const float *x, float *y) {
  const size_t acts = up64(acts_bytes(T, w->cols));
  char *memory = aligned_alloc(64, acts + up64(matmul_scratch(w->cols)));
  if (!memory) return -1;
  Acts a = acts_init(memory, T, w->cols, x);
  a.forms = acts_forms(w);
  acts_quantize(&a, 0, T);
  matmul(w, &a, T, y, w->rows, 0, w->rows, 0, memory + acts);
  free(memory);
  return 0;
}

/* Rows `ids` of a matrix as float32 (embedding lookups, tests), as the products see its weights. */
void draftline_rows(const Matrix *w, const int64_t *ids, int n, float *out) {
  for (int i = 0; i < n; i++) dequantize_row(w, (int)ids[i], out + (size_t)i * w->cols);
}

/* A pass of T tokens at cache positions start..start+T-1 (rotary positions `pos`; new token t
   attends to new token u iff local[t * T + u]). x [T, dim]: the input vectors, replaced by the
   final normed hidden states where `states` (or logits) are asked for; with neither, the pass
   only fills the cache and x is left undefined. logits [T, head.rows], or NULL for none.
   `stop`: NULL, or a flag the caller may set while the pass runs (a cancelled prefill): the
   pass then ends after the layer in flight, having written these positions' keys and values
   in the layers done, and x holds the residual stream after them. The same pass started again
   at `first_layer` = those layers, on that x, goes on where it stopped (a pass from the start
   has first_layer 0). Returns 0, the layers done (at least 1) when stopped, or -1 when out of
   memory. */
int draftline_forward(const Model *m, int T, int start, const int32_t *pos, const uint8_t *local, float *x,
                      float *logits, int states, int threads, const volatile int *stop, int first_layer) {
  if (threads < 1) threads = 1;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  const int D = m->dim, F = m->ffn_dim, nh = m->n_heads, hd = m->head_dim;
  const int nqkv = (nh + 2 * m->n_kv_heads) * hd;
  size_t shared, products, own;
  pass_bytes(m, T, start, &shared, &products, &own);
  char *memory = aligned_alloc(64, shared + own * threads);
  if (!memory) return -1;
  Pass pass = {.m = m, .T = T, .start = start, .threads = threads, .pos = pos, .local = local, .x = x,
               .logits = logits, .states = states, .private_bytes = own, .products_bytes = products};
  pass.h = (float *)memory;
  pass.qkv = pass.h + (size_t)T * D;
  pass.attn = pass.qkv + (size_t)T * nqkv;
  pass.act = pass.attn + (size_t)T * nh * hd;
  pass.gate_up = pass.act + (size_t)T * F;
  char *at = memory + up64(sizeof(float) * (size_t)T * (D + nqkv + nh * hd + 3 * F));
  pass.normed = acts_init(at, T, D, pass.h);
  at += up64(acts_bytes(T, D));
  pass.attended = acts_init(at, T, nh * hd, pass.attn);
  at += up64(acts_bytes(T, nh * hd));
  pass.activated = acts_init(at, T, F, pass.act);
  at += up64(acts_bytes(T, F));
  pass.normed.forms = acts_forms(&m->head), pass.attended.forms = pass.activated.forms = 0;
  for (int l = 0; l < m->n_layers; l++) { /* only the forms some matrix multiplies are made */
    const Layer *L = &m->layers[l];
    pass.normed.forms |= acts_forms(&L->wqkv) | acts_forms(&L->w_gate_up);
    pass.attended.forms |= acts_forms(&L->wo), pass.activated.forms |= acts_forms(&L->w_down);
  }
  pass.next = (atomic_int *)at;
  for (int i = 0; i < STEPS * (m->n_layers + 1); i++) atomic_init(&pass.next[i], 0);
  pass.private_memory = memory + shared;
  atomic_init(&pass.barrier.waiting, 0);
  atomic_init(&pass.barrier.generation, 0);
  atomic_init(&pass.barrier.sleepers, 0);
  atomic_init(&pass.ready, 0);
  atomic_init(&pass.stopped, 0);
  pass.stop = stop;
  pass.first_layer = first_layer;
  pthread_t ids[MAX_THREADS];
  Worker workers[MAX_THREADS];
  int started = 1;
  for (int i = 0; i < threads; i++) workers[i] = (Worker){&pass, i};
  while (started < threads && pthread_create(&ids[started], NULL, run_worker, &workers[started]) == 0) started++;
  pass.threads = pass.barrier.threads = started; /* fewer if the system refused a thread */
  atomic_store(&pass.ready, 1);
  run_worker(&workers[0]);
  for (int i = 1; i < started; i++) pthread_join(ids[i], NULL);
  free(memory);
  return atomic_load(&pass.stopped);
}
