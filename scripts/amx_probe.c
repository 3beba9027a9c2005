// AMX probe for the native decoder (docs/native.md, "AMX route"): a Q4_K-like product
// (4-bit levels, a 6-bit integer scale per 32 columns, int8 activations) of a 1536 x 1536 matrix
// for N = 1..16 tokens on one core, in exact int32 sums: AMX (one TDPBUSD per 32-column
// sub-block and 16 rows, its int32 tile scaled and added in zmm registers) against AVX-512 VNNI
// (maddubs + vpdpwssd with the scale, the arithmetic of engine/execution/native/narrow_k.c). It checks
// that both give the same integers, then times them. Needs a CPU and kernel with AMX:
//   gcc -O3 -march=native -o /tmp/amx_probe scripts/amx_probe.c && /tmp/amx_probe
// GCC's tile intrinsics do not tell the compiler they read or write memory: without the
// barriers below, the unpacked rows were still in registers when TILELOADD read them.
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#define M 1536
#define K 1536
#define SB 32
typedef struct { uint8_t palette, start; uint8_t r[14]; uint16_t colsb[16]; uint8_t rows[16]; } __attribute__((packed)) cfg_t;

static double now(void){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9; }

static uint8_t packed[M*K/2]; static uint8_t sc[M*(K/SB)]; static int8_t act[16*K]; // act[t][k]
static int8_t bvnni[K/SB][SB/4][16*4]; // per sub-block, B tile: rows k/4, cols token*4+k%4
static int32_t out_amx[M][16], out_ref[M][16];

static void ref(int N){ // VNNI: maddubs (u8 x s8 -> s16 pairs) then vpdpwssd with the scale
  for(int r=0;r<M;r++) for(int t=0;t<N;t++){
    __m512i acc=_mm512_setzero_si512();
    for(int j=0;j<K/SB;j+=2){ // 64 columns: two sub-blocks
      const uint8_t*p=packed+(size_t)r*K/2+j*SB/2; // 32 bytes: 64 nibbles (low: first 32 cols of the pair? keep simple: byte i -> cols i and i+32)
      __m256i b=_mm256_loadu_si256((const __m256i*)p);
      __m512i q=_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(b,_mm256_set1_epi8(15))),_mm256_and_si256(_mm256_srli_epi16(b,4),_mm256_set1_epi8(15)),1);
      __m512i a=_mm512_loadu_si512(act+t*K+j*SB);
      __m512i s16=_mm512_maddubs_epi16(q,a);
      __m512i scv=_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(sc[r*(K/SB)+j])),_mm256_set1_epi16(sc[r*(K/SB)+j+1]),1);
      acc=_mm512_dpwssd_epi32(acc,s16,scv);
    }
    out_ref[r][t]=_mm512_reduce_add_epi32(acc);
  }
}

static void amx(int N){
  uint8_t abuf[2][16*SB] __attribute__((aligned(64))); int32_t cbuf[4][16*16] __attribute__((aligned(64)));
  for(int r0=0;r0<M;r0+=16){
    __m512i acc[16]; for(int i=0;i<16;i++) acc[i]=_mm512_setzero_si512();
    for(int j0=0;j0<K/SB;j0+=4){
      for(int jj=0;jj<4;jj+=2){ // unpack two sub-blocks (64 cols) for 16 rows
        for(int i=0;i<16;i++){
          __m256i b=_mm256_loadu_si256((const __m256i*)(packed+(size_t)(r0+i)*K/2+(j0+jj)*SB/2));
          _mm256_store_si256((__m256i*)(abuf[0]+i*SB),_mm256_and_si256(b,_mm256_set1_epi8(15)));
          _mm256_store_si256((__m256i*)(abuf[1]+i*SB),_mm256_and_si256(_mm256_srli_epi16(b,4),_mm256_set1_epi8(15)));
        }
        __asm__ volatile("" ::: "memory");
        _tile_loadd(4,abuf[0],SB); _tile_loadd(5,abuf[1],SB);
        _tile_loadd(6,bvnni[j0+jj],64); _tile_loadd(7,bvnni[j0+jj+1],64);
        if(jj==0){ _tile_zero(0); _tile_zero(1); _tile_dpbusd(0,4,6); _tile_dpbusd(1,5,7); }
        else { _tile_zero(2); _tile_zero(3); _tile_dpbusd(2,4,6); _tile_dpbusd(3,5,7); }
      }
      _tile_stored(0,cbuf[0],64); _tile_stored(1,cbuf[1],64); _tile_stored(2,cbuf[2],64); _tile_stored(3,cbuf[3],64);
      __asm__ volatile("" ::: "memory");
      for(int c=0;c<4;c++) for(int i=0;i<16;i++){
        __m512i s=_mm512_load_si512(cbuf[c]+i*16);
        acc[i]=_mm512_add_epi32(acc[i],_mm512_mullo_epi32(s,_mm512_set1_epi32(sc[(r0+i)*(K/SB)+j0+c])));
      }
    }
    for(int i=0;i<16;i++) _mm512_storeu_si512(out_amx[r0+i],acc[i]);
  }
}

int main(void){
  if(syscall(SYS_arch_prctl,0x1023,18)){ puts("no AMX permission"); return 1; }
  srand(1); for(size_t i=0;i<sizeof packed;i++) packed[i]=rand(); for(size_t i=0;i<sizeof sc;i++) sc[i]=rand()%64;
  for(size_t i=0;i<sizeof act;i++) act[i]=(int8_t)(rand()%255-127);
  for(int j=0;j<K/SB;j++) for(int kk=0;kk<SB;kk++) for(int t=0;t<16;t++) bvnni[j][kk/4][t*4+kk%4]=act[t*K+j*SB+kk];
  cfg_t cfg; memset(&cfg,0,sizeof cfg); cfg.palette=1;
  for(int i=0;i<4;i++){cfg.rows[i]=16;cfg.colsb[i]=64;} for(int i=4;i<6;i++){cfg.rows[i]=16;cfg.colsb[i]=SB;} for(int i=6;i<8;i++){cfg.rows[i]=SB/4;cfg.colsb[i]=64;}
  _tile_loadconfig(&cfg);
  amx(16); ref(16);
  for(int r=0;r<M;r++) for(int t=0;t<16;t++) if(out_amx[r][t]!=out_ref[r][t]){ printf("mismatch r%d t%d %d %d\n",r,t,out_amx[r][t],out_ref[r][t]); return 1; }
  puts("exact: AMX == VNNI for every row and token");
  for(int N=1;N<=16;N*=2){
    double best_a=1e9,best_r=1e9;
    for(int rep=0;rep<7;rep++){ double t0=now(); amx(N); double t1=now(); ref(N); double t2=now(); if(t1-t0<best_a)best_a=t1-t0; if(t2-t1<best_r)best_r=t2-t1; }
    double macs=(double)M*K*N;
    printf("N=%2d  AMX %.3f ms (%.0f GMAC/s)   VNNI %.3f ms (%.0f GMAC/s)\n",N,best_a*1e3,macs/best_a/1e9,best_r*1e3,macs/best_r/1e9);
  }
  _tile_release();
}
