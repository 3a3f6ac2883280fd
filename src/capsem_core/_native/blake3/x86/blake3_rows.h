/* BLAKE3 "rows" for the x86 levels: one compression with the state's four rows in four
 * 128-bit registers (SSE4.1 instructions), for the blocks that must go one after another.
 * Included by x86/blake3_sse41.c, x86/blake3_avx2.c and x86/blake3_x16.h, each compiled with
 * flags that imply SSE4.1. */
#ifndef CAPSEM_BLAKE3_X86_ROWS_H
#define CAPSEM_BLAKE3_X86_ROWS_H

#include <immintrin.h>

#include "blake3_impl.h"

#define ROWS_INLINE static inline __attribute__((always_inline))

ROWS_INLINE __m128i row_rot(__m128i x, int c) { return _mm_or_si128(_mm_srli_epi32(x, c), _mm_slli_epi32(x, 32 - c)); }

ROWS_INLINE void row_g(__m128i *a, __m128i *b, __m128i *c, __m128i *d, __m128i x, __m128i y) {
    const __m128i rot16 = _mm_setr_epi8(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    const __m128i rot8 = _mm_setr_epi8(1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12);
    *a = _mm_add_epi32(_mm_add_epi32(*a, *b), x); *d = _mm_shuffle_epi8(_mm_xor_si128(*d, *a), rot16);
    *c = _mm_add_epi32(*c, *d);                   *b = row_rot(_mm_xor_si128(*b, *c), 12);
    *a = _mm_add_epi32(_mm_add_epi32(*a, *b), y); *d = _mm_shuffle_epi8(_mm_xor_si128(*d, *a), rot8);
    *c = _mm_add_epi32(*c, *d);                   *b = row_rot(_mm_xor_si128(*b, *c), 7);
}

/* Two words from a and two from b (shufps on integer data). */
#define PICK(a, b, imm) _mm_castps_si128(_mm_shuffle_ps(_mm_castsi128_ps(a), _mm_castsi128_ps(b), (imm)))

/* Message rows of one round: column step x0 = m0 m2 m4 m6, y0 = m1 m3 m5 m7, diagonal step
 * x1 = m8 m10 m12 m14, y1 = m9 m11 m13 m15, where m is the round's permuted message. The
 * next round's message is m[P] with P = 2 6 3 10 7 0 4 13 1 11 12 5 9 14 15 8, so its rows
 * are x0 = m2 m3 m7 m4, y0 = m6 m10 m0 m13, x1 = m1 m12 m9 m15, y1 = m11 m5 m14 m8. */
ROWS_INLINE void row_permute(__m128i *x0, __m128i *y0, __m128i *x1, __m128i *y1) {
    __m128i nx0 = _mm_shuffle_epi32(PICK(*x0, *y0, _MM_SHUFFLE(3, 1, 2, 1)), _MM_SHUFFLE(1, 3, 2, 0));
    __m128i ny0 = _mm_blend_epi16(_mm_shuffle_epi32(PICK(*x0, *y1, _MM_SHUFFLE(2, 2, 3, 0)), _MM_SHUFFLE(2, 0, 0, 1)),
                                  *x1, 0x0C);
    __m128i nx1 = PICK(_mm_blend_epi16(*y0, *x1, 0x30), *y1, _MM_SHUFFLE(3, 0, 2, 0));
    __m128i ny1 = PICK(_mm_blend_epi16(*y1, *y0, 0x30), *x1, _MM_SHUFFLE(0, 3, 2, 1));
    *x0 = nx0;
    *y0 = ny0;
    *x1 = nx1;
    *y1 = ny1;
}

/* rows a = v0..3, b = v4..7, c = v8..11, d = v12..15: the column step is G on each lane. For
 * the diagonal step, rotate b, c, d left by 1, 2, 3 lanes so lane k holds (vk, v4+(k+1)%4, ...). */
static void row_compress(const uint32_t cv[8], const uint8_t block[CAPSEM_BLAKE3_BLOCK_LEN], uint32_t block_len,
                         uint64_t counter, uint32_t flags, uint32_t out[16]) {
    const __m128i cv_lo = _mm_loadu_si128((const __m128i *)cv), cv_hi = _mm_loadu_si128((const __m128i *)(cv + 4));
    __m128i a = cv_lo, b = cv_hi, c = _mm_loadu_si128((const __m128i *)CAPSEM_BLAKE3_IV);
    __m128i d = _mm_setr_epi32((int)(uint32_t)counter, (int)(uint32_t)(counter >> 32), (int)block_len, (int)flags);
    const __m128i w0 = _mm_loadu_si128((const __m128i *)block), w1 = _mm_loadu_si128((const __m128i *)(block + 16));
    const __m128i w2 = _mm_loadu_si128((const __m128i *)(block + 32)), w3 = _mm_loadu_si128((const __m128i *)(block + 48));
    __m128i x0 = PICK(w0, w1, _MM_SHUFFLE(2, 0, 2, 0)), y0 = PICK(w0, w1, _MM_SHUFFLE(3, 1, 3, 1));
    __m128i x1 = PICK(w2, w3, _MM_SHUFFLE(2, 0, 2, 0)), y1 = PICK(w2, w3, _MM_SHUFFLE(3, 1, 3, 1));
#pragma GCC unroll 7
    for (int r = 0; r < 7; r++) {
        if (r) row_permute(&x0, &y0, &x1, &y1);
        row_g(&a, &b, &c, &d, x0, y0);
        b = _mm_shuffle_epi32(b, 0x39);
        c = _mm_shuffle_epi32(c, 0x4E);
        d = _mm_shuffle_epi32(d, 0x93);
        row_g(&a, &b, &c, &d, x1, y1);
        b = _mm_shuffle_epi32(b, 0x93);
        c = _mm_shuffle_epi32(c, 0x4E);
        d = _mm_shuffle_epi32(d, 0x39);
    }
    _mm_storeu_si128((__m128i *)out, _mm_xor_si128(a, c));
    _mm_storeu_si128((__m128i *)(out + 4), _mm_xor_si128(b, d));
    _mm_storeu_si128((__m128i *)(out + 8), _mm_xor_si128(c, cv_lo));
    _mm_storeu_si128((__m128i *)(out + 12), _mm_xor_si128(d, cv_hi));
}

#endif
