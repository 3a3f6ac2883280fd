/* BLAKE3 internals shared by the portable code, the SIMD kernels and the dispatcher:
 * domain flags, constants, and the table of functions one SIMD level provides. */
#ifndef CAPSEM_BLAKE3_IMPL_H
#define CAPSEM_BLAKE3_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "blake3.h"

enum {
    CHUNK_START = 1u << 0,
    CHUNK_END = 1u << 1,
    PARENT = 1u << 2,
    ROOT = 1u << 3,
    KEYED_HASH = 1u << 4,
};

static const uint32_t CAPSEM_BLAKE3_IV[8] = {
    0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
    0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u,
};

/* The message schedule: round r reads words in the order of the permutation applied r times. */
static const uint8_t CAPSEM_BLAKE3_SCHEDULE[7][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8},
    {3, 4, 10, 12, 13, 2, 7, 14, 6, 5, 9, 0, 11, 15, 8, 1},
    {10, 7, 12, 9, 14, 3, 13, 15, 4, 0, 11, 2, 5, 8, 1, 6},
    {12, 13, 9, 11, 15, 10, 14, 8, 7, 2, 5, 3, 0, 1, 6, 4},
    {9, 14, 11, 5, 8, 12, 15, 1, 13, 3, 0, 10, 2, 6, 4, 7},
    {11, 15, 5, 0, 1, 9, 8, 6, 14, 10, 2, 12, 3, 4, 7, 13},
};

static inline uint32_t capsem_blake3_load32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void capsem_blake3_store32(uint8_t *p, uint32_t w) {
    p[0] = (uint8_t)w; p[1] = (uint8_t)(w >> 8); p[2] = (uint8_t)(w >> 16); p[3] = (uint8_t)(w >> 24);
}

/* Inputs up to this many chunks go through a level's hash_short (lanes across inputs);
 * longer ones are hashed one at a time, with their own chunks in lanes. */
#define CAPSEM_BLAKE3_SHORT_CHUNKS 16

/* What one SIMD level provides. The dispatcher owns the tree; a level only compresses. */
typedef struct {
    const char *name;
    /* One compression of one block; writes the full 16-word output (the first 8 are the new CV). */
    void (*compress)(const uint32_t cv[8], const uint8_t block[CAPSEM_BLAKE3_BLOCK_LEN], uint32_t block_len,
                     uint64_t counter, uint32_t flags, uint32_t out[16]);
    /* Input i (0 <= i < n) is nblocks whole blocks at base + i * stride, counter + i * counter_step;
     * its 32-byte CV goes to out + 32 * i. The first block adds flags_start, the last flags_end.
     * Hashes a prefix of the inputs several at a time and returns its length; the caller
     * compresses the rest one by one. out may equal base when stride >= 64 (parent levels
     * reduce in place): each group is read whole before its outputs are written. NULL: none. */
    size_t (*hash_strided)(const uint8_t *base, size_t stride, size_t n, size_t nblocks, const uint32_t key[8],
                           uint64_t counter, uint64_t counter_step, uint32_t flags, uint32_t flags_start,
                           uint32_t flags_end, uint8_t *out);
    /* capsem_blake3_hash_many restricted to the inputs of at most CAPSEM_BLAKE3_SHORT_CHUNKS
     * chunks (it skips the others, which the dispatcher hashes one at a time). NULL: none. */
    void (*hash_short)(const uint8_t *base, const uint64_t *offsets, const uint64_t *lengths, size_t n,
                       uint8_t *out);
} capsem_blake3_kernels;

extern const capsem_blake3_kernels capsem_blake3_portable_kernels;
/* x86/ only (CAPSEM_HAVE_X86_SIMD): */
extern const capsem_blake3_kernels capsem_blake3_sse41_kernels;
extern const capsem_blake3_kernels capsem_blake3_avx2_kernels;
extern const capsem_blake3_kernels capsem_blake3_avx512_kernels;
extern const capsem_blake3_kernels capsem_blake3_avx512_on_avx2_kernels;
/* arm/ only (CAPSEM_HAVE_NEON_SIMD): */
extern const capsem_blake3_kernels capsem_blake3_neon_kernels;

/* The 32-byte hash-mode digest of an input whose n >= 2 chunk CVs are cvs (overwritten):
 * its parents level by level, the last one as the root. For kernels that hash the chunks of
 * several inputs together. */
void capsem_blake3_root_from_cvs(const capsem_blake3_kernels *k, uint8_t *cvs, size_t n, uint8_t out[32]);

void capsem_blake3_compress_portable(const uint32_t cv[8], const uint8_t block[CAPSEM_BLAKE3_BLOCK_LEN],
                                     uint32_t block_len, uint64_t counter, uint32_t flags, uint32_t out[16]);

#endif
