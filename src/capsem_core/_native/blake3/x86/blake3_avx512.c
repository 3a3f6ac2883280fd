/* BLAKE3 with AVX-512: sixteen lanes of 32-bit words per zmm register (blake3_x16.h).
 * Compiled with -mavx512f -mavx512vl and only called when the CPU and the OS both enable
 * AVX-512 (see blake3_dispatch.c). */
#define X16_KERNELS capsem_blake3_avx512_kernels
#define X16_NAME "avx512"
#include "blake3_x16.h"
