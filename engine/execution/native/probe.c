/* Probes of this CPU's limits for `lsp_server bench --kernels`, each on the calling thread: how
fast the products' own integer instruction runs on registers, and how fast memory is read.
Either is a ceiling the passes are measured against (a share of peak, a share of the read
floor), not a result of the decoder. */
#include <time.h>

#include "product.h"

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { CHAINS = 8 }; /* independent sums: more than the instruction's latency times its pipes */

/* int8 operations per second (a multiply and an add each) of `rounds` rounds of CHAINS
   products of 32 byte pairs on 256-bit registers, by the instruction that multiplies the bytes:
   vpdpbusd with AVX-512 VNNI, else vpmaddubsw, its 16-bit sums added up (vpaddw) as the
   AVX2 panels add a scale group's (panel_k.c). */
double draftline_int8_peak(long rounds) {
  __m256i sum[CHAINS], a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(5);
  for (int i = 0; i < CHAINS; i++) sum[i] = _mm256_set1_epi32(i);
  const double start = seconds();
  for (long n = 0; n < rounds; n++) {
#if VNNI
    for (int i = 0; i < CHAINS; i++) sum[i] = _mm256_dpbusd_epi32(sum[i], a, b);
#else
    for (int i = 0; i < CHAINS; i++) sum[i] = _mm256_add_epi16(sum[i], _mm256_maddubs_epi16(a, b));
#endif
    __asm__ volatile("" : "+x"(a), "+x"(b)); /* the operands are not known constants */
  }
  const double took = seconds() - start;
  __m256i all = sum[0];
  for (int i = 1; i < CHAINS; i++) all = _mm256_add_epi32(all, sum[i]);
  __asm__ volatile("" : : "x"(all));
  return (double)rounds * CHAINS * 32 * 2 / took;
}

/* Bytes per second of reading `bytes` (a multiple of 128) at p with 256-bit loads. */
double draftline_read_rate(const uint8_t *p, size_t bytes) {
  __m256i x[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  const double start = seconds();
  for (size_t i = 0; i < bytes; i += 128)
    for (int k = 0; k < 4; k++) x[k] = _mm256_xor_si256(x[k], _mm256_loadu_si256((const __m256i *)(p + i + 32 * k)));
  const double took = seconds() - start;
  const __m256i all = _mm256_or_si256(_mm256_or_si256(x[0], x[1]), _mm256_or_si256(x[2], x[3]));
  __asm__ volatile("" : : "x"(all));
  return (double)bytes / took;
}
