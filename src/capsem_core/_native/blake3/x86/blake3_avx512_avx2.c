/* The avx512 level's C (blake3_x16.h) compiled for AVX2 instead: every 64-byte vector
 * operation becomes two 32-byte ones, and the kernel computes exactly what the avx512
 * level computes. It exists so that code runs under the test suite on CPUs without
 * AVX-512; the dispatcher never chooses it by itself. */
#define X16_KERNELS capsem_blake3_avx512_on_avx2_kernels
#define X16_NAME "avx512-on-avx2"
#include "blake3_x16.h"
