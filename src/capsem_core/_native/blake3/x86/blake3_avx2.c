/* BLAKE3 with AVX2: eight lanes of 32-bit words per register. Compiled with -mavx2 and
 * only called when the CPU reports AVX2 (see blake3_dispatch.c). */
#include <immintrin.h>

#include "blake3_impl.h"

#define LANES 8
/* A partial group costs as much as a full one; below three inputs rows are cheaper. */
#define LANES_MIN 3
typedef __m256i vec;

static inline vec v_add(vec a, vec b) { return _mm256_add_epi32(a, b); }
static inline vec v_xor(vec a, vec b) { return _mm256_xor_si256(a, b); }
static inline vec v_set1(uint32_t w) { return _mm256_set1_epi32((int)w); }
static inline vec v_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void v_store(void *p, vec v) { _mm256_storeu_si256((__m256i *)p, v); }
/* Byte shuffles for the rotations by 16 and 8. They are read from memory by each vpshufb
 * (inline asm, because GCC would otherwise pin them in two of the sixteen registers the
 * state needs, and spill state instead). */
static const uint8_t ROT16_MASK[32] __attribute__((aligned(32))) = {
    2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13};
static const uint8_t ROT8_MASK[32] __attribute__((aligned(32))) = {
    1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12, 1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12};
static inline vec v_rot16(vec x) {
    __asm__("vpshufb %1, %0, %0" : "+x"(x) : "m"(*(const __m256i *)ROT16_MASK));
    return x;
}
static inline vec v_rot8(vec x) {
    __asm__("vpshufb %1, %0, %0" : "+x"(x) : "m"(*(const __m256i *)ROT8_MASK));
    return x;
}
static inline vec v_rot12(vec x) { return _mm256_or_si256(_mm256_srli_epi32(x, 12), _mm256_slli_epi32(x, 20)); }
static inline vec v_rot7(vec x) { return _mm256_or_si256(_mm256_srli_epi32(x, 7), _mm256_slli_epi32(x, 25)); }

/* r[j] holds 4 words of lanes j and j + 4 (one per 128-bit half); afterwards r[w] holds
 * word w of lanes 0-3 and 4-7. Staying inside the halves avoids cross-half shuffles, which
 * some CPUs (AMD Zen 1) run very slowly. */
static inline void transpose4x2(vec r[4]) {
    vec t0 = _mm256_unpacklo_epi32(r[0], r[1]); /* words 0 1 of lanes 0, 1 (and 4, 5) */
    vec t1 = _mm256_unpackhi_epi32(r[0], r[1]); /* words 2 3 */
    vec t2 = _mm256_unpacklo_epi32(r[2], r[3]);
    vec t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    r[0] = _mm256_unpacklo_epi64(t0, t2);
    r[1] = _mm256_unpackhi_epi64(t0, t2);
    r[2] = _mm256_unpacklo_epi64(t1, t3);
    r[3] = _mm256_unpackhi_epi64(t1, t3);
}

static inline vec load_pair(const uint8_t *low, const uint8_t *high) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)low)),
                                   _mm_loadu_si128((const __m128i *)high), 1);
}

static inline void load_msg(const uint8_t *const blocks[LANES], size_t off, vec m[16]) {
    for (int q = 0; q < 4; q++) {
        for (int j = 0; j < 4; j++) m[4 * q + j] = load_pair(blocks[j] + off + 16 * q, blocks[j + 4] + off + 16 * q);
        transpose4x2(m + 4 * q);
    }
}

static inline void store_cvs(const vec cv[8], uint8_t *out) {
    for (int half = 0; half < 2; half++) {
        vec r[4];
        for (int w = 0; w < 4; w++) r[w] = cv[4 * half + w];
        transpose4x2(r);
        for (int j = 0; j < 4; j++) {
            _mm_storeu_si128((__m128i *)(out + 32 * j + 16 * half), _mm256_castsi256_si128(r[j]));
            _mm_storeu_si128((__m128i *)(out + 32 * (j + 4) + 16 * half), _mm256_extracti128_si256(r[j], 1));
        }
    }
}

#define LANES_KERNELS capsem_blake3_avx2_kernels
#include "blake3_lanes.h"
#include "blake3_rows.h"

const capsem_blake3_kernels capsem_blake3_avx2_kernels = {
    .name = "avx2",
    .compress = row_compress,
    .hash_strided = lanes_hash_strided,
    .hash_short = lanes_hash_short,
};
