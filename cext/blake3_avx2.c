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
static inline vec v_rot16(vec x) {
    return _mm256_shuffle_epi8(x, _mm256_setr_epi8(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13,
                                                   2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
}
static inline vec v_rot8(vec x) {
    return _mm256_shuffle_epi8(x, _mm256_setr_epi8(1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12,
                                                   1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12));
}
static inline vec v_rot12(vec x) { return _mm256_or_si256(_mm256_srli_epi32(x, 12), _mm256_slli_epi32(x, 20)); }
static inline vec v_rot7(vec x) { return _mm256_or_si256(_mm256_srli_epi32(x, 7), _mm256_slli_epi32(x, 25)); }

/* r[j] holds 8 words of lane j; afterwards r[w] holds word w of every lane. */
static inline void transpose8(vec r[8]) {
    vec t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);     /* words 0 1 | 4 5 of lanes i, i+1 */
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]); /* words 2 3 | 6 7 */
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);         /* word 0 | 4 of lanes i..i+3 */
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);     /* word 1 | 5 */
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]); /* word 2 | 6 */
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]); /* word 3 | 7 */
    }
    for (int w = 0; w < 4; w++) {
        r[w] = _mm256_permute2x128_si256(u[w], u[w + 4], 0x20);
        r[w + 4] = _mm256_permute2x128_si256(u[w], u[w + 4], 0x31);
    }
}

static inline void load_msg(const uint8_t *const blocks[LANES], size_t off, vec m[16]) {
    for (int half = 0; half < 2; half++) {
        for (int j = 0; j < 8; j++) m[8 * half + j] = v_load(blocks[j] + off + 32 * half);
        transpose8(m + 8 * half);
    }
}

static inline void store_cvs(const vec cv[8], uint8_t *out) {
    vec r[8];
    for (int w = 0; w < 8; w++) r[w] = cv[w];
    transpose8(r);
    for (int j = 0; j < 8; j++) v_store(out + 32 * j, r[j]);
}

/* Rows pick their message words with two 8-word permutes (one per half of the block) and a
 * blend: index bit 3 says which half a word comes from, vpermd reads only bits 0-2. */
typedef struct {
    __m256i lo, hi;
} row_msg;

static inline void row_load(const uint8_t *block, row_msg *mm) {
    mm->lo = _mm256_loadu_si256((const __m256i *)block);
    mm->hi = _mm256_loadu_si256((const __m256i *)(block + 32));
}

static inline void row_pick(const row_msg *mm, const uint8_t *s, __m128i *x, __m128i *y) {
    const __m256i idx = _mm256_setr_epi32(s[0], s[2], s[4], s[6], s[1], s[3], s[5], s[7]);
    const __m256i from_hi = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7));
    __m256i words = _mm256_blendv_epi8(_mm256_permutevar8x32_epi32(mm->lo, idx),
                                       _mm256_permutevar8x32_epi32(mm->hi, idx), from_hi);
    *x = _mm256_castsi256_si128(words);
    *y = _mm256_extracti128_si256(words, 1);
}

#include "blake3_lanes.h"

const capsem_blake3_kernels capsem_blake3_avx2_kernels = {
    .name = "avx2",
    .compress = row_compress,
    .hash_strided = lanes_hash_strided,
    .hash_small = lanes_hash_small,
};
