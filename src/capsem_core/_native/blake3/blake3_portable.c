/* Portable BLAKE3 compression function, straight from the specification. It is the level
 * every CPU has and the reference the SIMD kernels are tested against. */
#include "blake3_impl.h"

static inline uint32_t rotr32(uint32_t w, unsigned c) { return (w >> c) | (w << (32 - c)); }

static inline void g(uint32_t *s, int a, int b, int c, int d, uint32_t x, uint32_t y) {
    s[a] = s[a] + s[b] + x; s[d] = rotr32(s[d] ^ s[a], 16);
    s[c] = s[c] + s[d];     s[b] = rotr32(s[b] ^ s[c], 12);
    s[a] = s[a] + s[b] + y; s[d] = rotr32(s[d] ^ s[a], 8);
    s[c] = s[c] + s[d];     s[b] = rotr32(s[b] ^ s[c], 7);
}

void capsem_blake3_compress_portable(const uint32_t cv[8], const uint8_t block[CAPSEM_BLAKE3_BLOCK_LEN],
                                     uint32_t block_len, uint64_t counter, uint32_t flags, uint32_t out[16]) {
    uint32_t m[16], s[16];
    for (int i = 0; i < 16; i++) m[i] = capsem_blake3_load32(block + 4 * i);
    for (int i = 0; i < 8; i++) s[i] = cv[i];
    s[8] = CAPSEM_BLAKE3_IV[0]; s[9] = CAPSEM_BLAKE3_IV[1]; s[10] = CAPSEM_BLAKE3_IV[2]; s[11] = CAPSEM_BLAKE3_IV[3];
    s[12] = (uint32_t)counter; s[13] = (uint32_t)(counter >> 32);
    s[14] = block_len; s[15] = flags;
    for (int r = 0; r < 7; r++) {
        const uint8_t *w = CAPSEM_BLAKE3_SCHEDULE[r];
        g(s, 0, 4, 8, 12, m[w[0]], m[w[1]]);
        g(s, 1, 5, 9, 13, m[w[2]], m[w[3]]);
        g(s, 2, 6, 10, 14, m[w[4]], m[w[5]]);
        g(s, 3, 7, 11, 15, m[w[6]], m[w[7]]);
        g(s, 0, 5, 10, 15, m[w[8]], m[w[9]]);
        g(s, 1, 6, 11, 12, m[w[10]], m[w[11]]);
        g(s, 2, 7, 8, 13, m[w[12]], m[w[13]]);
        g(s, 3, 4, 9, 14, m[w[14]], m[w[15]]);
    }
    for (int i = 0; i < 8; i++) {
        out[i] = s[i] ^ s[i + 8];
        out[i + 8] = s[i + 8] ^ cv[i];
    }
}

const capsem_blake3_kernels capsem_blake3_portable_kernels = {
    .name = "portable",
    .compress = capsem_blake3_compress_portable,
    .hash_strided = NULL,
    .hash_short = NULL,
};
