/* BLAKE3 with SSE4.1: four lanes of 32-bit words per register. Compiled with -msse4.1 and
 * only called when the CPU reports SSE4.1 (see blake3_dispatch.c). */
#include <immintrin.h>

#include "blake3_impl.h"

#define LANES 4
/* A partial group costs as much as a full one; a single input is cheaper as rows. */
#define LANES_MIN 2
typedef __m128i vec;

static inline vec v_add(vec a, vec b) { return _mm_add_epi32(a, b); }
static inline vec v_xor(vec a, vec b) { return _mm_xor_si128(a, b); }
static inline vec v_set1(uint32_t w) { return _mm_set1_epi32((int)w); }
static inline vec v_load(const void *p) { return _mm_loadu_si128((const __m128i *)p); }
static inline void v_store(void *p, vec v) { _mm_storeu_si128((__m128i *)p, v); }
/* Byte shuffles for the rotations by 16 and 8, read from memory by each pshufb (inline
 * asm, so that GCC keeps the sixteen registers for the state). */
static const uint8_t ROT16_MASK[16] __attribute__((aligned(16))) = {2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13};
static const uint8_t ROT8_MASK[16] __attribute__((aligned(16))) = {1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12};
static inline vec v_rot16(vec x) {
    __asm__("pshufb %1, %0" : "+x"(x) : "m"(*(const __m128i *)ROT16_MASK));
    return x;
}
static inline vec v_rot8(vec x) {
    __asm__("pshufb %1, %0" : "+x"(x) : "m"(*(const __m128i *)ROT8_MASK));
    return x;
}
static inline vec v_rot12(vec x) { return _mm_or_si128(_mm_srli_epi32(x, 12), _mm_slli_epi32(x, 20)); }
static inline vec v_rot7(vec x) { return _mm_or_si128(_mm_srli_epi32(x, 7), _mm_slli_epi32(x, 25)); }

/* r[j] holds 4 words of lane j; afterwards r[w] holds word w of every lane. */
static inline void transpose4(vec r[4]) {
    vec t0 = _mm_unpacklo_epi32(r[0], r[1]); /* words 0 1 of lanes 0, 1 */
    vec t1 = _mm_unpackhi_epi32(r[0], r[1]); /* words 2 3 */
    vec t2 = _mm_unpacklo_epi32(r[2], r[3]);
    vec t3 = _mm_unpackhi_epi32(r[2], r[3]);
    r[0] = _mm_unpacklo_epi64(t0, t2);
    r[1] = _mm_unpackhi_epi64(t0, t2);
    r[2] = _mm_unpacklo_epi64(t1, t3);
    r[3] = _mm_unpackhi_epi64(t1, t3);
}

/* load_msg and store_cvs come from transpose4 (blake3_lanes.h). */
#define LANES_FROM_TRANSPOSE4
#define LANES_KERNELS capsem_blake3_sse41_kernels
#include "blake3_lanes.h"
#include "blake3_rows.h"

const capsem_blake3_kernels capsem_blake3_sse41_kernels = {
    .name = "sse41",
    .compress = row_compress,
    .hash_strided = lanes_hash_strided,
    .hash_short = lanes_hash_short,
};
