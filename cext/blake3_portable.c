/* Portable BLAKE3: compression function, chunk state and the chaining-value stack.
 * Straight from the specification; the SIMD files speed up the same steps. */
#include <string.h>

#include "blake3.h"

enum {
    CHUNK_START = 1u << 0,
    CHUNK_END = 1u << 1,
    PARENT = 1u << 2,
    ROOT = 1u << 3,
    KEYED_HASH = 1u << 4,
};

static const uint32_t IV[8] = {
    0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
    0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u,
};

/* The message schedule: round r reads words in the order of the permutation applied r times. */
static const uint8_t SCHEDULE[7][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8},
    {3, 4, 10, 12, 13, 2, 7, 14, 6, 5, 9, 0, 11, 15, 8, 1},
    {10, 7, 12, 9, 14, 3, 13, 15, 4, 0, 11, 2, 5, 8, 1, 6},
    {12, 13, 9, 11, 15, 10, 14, 8, 7, 2, 5, 3, 0, 1, 6, 4},
    {9, 14, 11, 5, 8, 12, 15, 1, 13, 3, 0, 10, 2, 6, 4, 7},
    {11, 15, 5, 0, 1, 9, 8, 6, 14, 10, 2, 12, 3, 4, 7, 13},
};

static inline uint32_t rotr32(uint32_t w, unsigned c) { return (w >> c) | (w << (32 - c)); }

static inline uint32_t load32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void store32(uint8_t *p, uint32_t w) {
    p[0] = (uint8_t)w; p[1] = (uint8_t)(w >> 8); p[2] = (uint8_t)(w >> 16); p[3] = (uint8_t)(w >> 24);
}

static inline void g(uint32_t *s, int a, int b, int c, int d, uint32_t x, uint32_t y) {
    s[a] = s[a] + s[b] + x; s[d] = rotr32(s[d] ^ s[a], 16);
    s[c] = s[c] + s[d];     s[b] = rotr32(s[b] ^ s[c], 12);
    s[a] = s[a] + s[b] + y; s[d] = rotr32(s[d] ^ s[a], 8);
    s[c] = s[c] + s[d];     s[b] = rotr32(s[b] ^ s[c], 7);
}

/* Full 16-word output of the compression function. */
static void compress(const uint32_t cv[8], const uint8_t block[CAPSEM_BLAKE3_BLOCK_LEN],
                     uint8_t block_len, uint64_t counter, uint8_t flags, uint32_t out[16]) {
    uint32_t m[16], s[16];
    for (int i = 0; i < 16; i++) m[i] = load32(block + 4 * i);
    for (int i = 0; i < 8; i++) s[i] = cv[i];
    s[8] = IV[0]; s[9] = IV[1]; s[10] = IV[2]; s[11] = IV[3];
    s[12] = (uint32_t)counter; s[13] = (uint32_t)(counter >> 32);
    s[14] = block_len; s[15] = flags;
    for (int r = 0; r < 7; r++) {
        const uint8_t *w = SCHEDULE[r];
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

/* What a chunk or parent node leaves before the caller decides whether it is the root. */
typedef struct {
    uint32_t cv[8];
    uint8_t block[CAPSEM_BLAKE3_BLOCK_LEN];
    uint64_t counter;
    uint8_t block_len;
    uint8_t flags;
} output_t;

static void output_cv(const output_t *o, uint8_t out[32]) {
    uint32_t words[16];
    compress(o->cv, o->block, o->block_len, o->counter, o->flags, words);
    for (int i = 0; i < 8; i++) store32(out + 4 * i, words[i]);
}

static void output_root(const output_t *o, uint8_t *out, size_t out_len) {
    uint64_t block_counter = 0;
    uint8_t tmp[64];
    while (out_len > 0) {
        uint32_t words[16];
        compress(o->cv, o->block, o->block_len, block_counter, (uint8_t)(o->flags | ROOT), words);
        for (int i = 0; i < 16; i++) store32(tmp + 4 * i, words[i]);
        size_t take = out_len < 64 ? out_len : 64;
        memcpy(out, tmp, take);
        out += take;
        out_len -= take;
        block_counter++;
    }
}

static void chunk_init(capsem_blake3_chunk_state *c, const uint32_t key[8], uint64_t counter, uint8_t flags) {
    memcpy(c->cv, key, sizeof c->cv);
    c->chunk_counter = counter;
    memset(c->buf, 0, sizeof c->buf);
    c->buf_len = 0;
    c->blocks_compressed = 0;
    c->flags = flags;
}

static size_t chunk_len(const capsem_blake3_chunk_state *c) {
    return (size_t)c->blocks_compressed * CAPSEM_BLAKE3_BLOCK_LEN + c->buf_len;
}

static uint8_t chunk_start_flag(const capsem_blake3_chunk_state *c) {
    return c->blocks_compressed == 0 ? CHUNK_START : 0;
}

static void chunk_update(capsem_blake3_chunk_state *c, const uint8_t *in, size_t len) {
    while (len > 0) {
        /* Only compress a full buffer once more input follows: the last block needs CHUNK_END. */
        if (c->buf_len == CAPSEM_BLAKE3_BLOCK_LEN) {
            uint32_t words[16];
            compress(c->cv, c->buf, CAPSEM_BLAKE3_BLOCK_LEN, c->chunk_counter,
                     (uint8_t)(c->flags | chunk_start_flag(c)), words);
            memcpy(c->cv, words, sizeof c->cv);
            c->blocks_compressed++;
            c->buf_len = 0;
            memset(c->buf, 0, sizeof c->buf);
        }
        size_t want = CAPSEM_BLAKE3_BLOCK_LEN - c->buf_len;
        size_t take = len < want ? len : want;
        memcpy(c->buf + c->buf_len, in, take);
        c->buf_len = (uint8_t)(c->buf_len + take);
        in += take;
        len -= take;
    }
}

static output_t chunk_output(const capsem_blake3_chunk_state *c) {
    output_t o;
    memcpy(o.cv, c->cv, sizeof o.cv);
    memcpy(o.block, c->buf, sizeof o.block);
    o.block_len = c->buf_len;
    o.counter = c->chunk_counter;
    o.flags = (uint8_t)(c->flags | chunk_start_flag(c) | CHUNK_END);
    return o;
}

static output_t parent_output(const uint8_t left_right[64], const uint32_t key[8], uint8_t flags) {
    output_t o;
    memcpy(o.cv, key, sizeof o.cv);
    memcpy(o.block, left_right, 64);
    o.block_len = CAPSEM_BLAKE3_BLOCK_LEN;
    o.counter = 0;
    o.flags = (uint8_t)(flags | PARENT);
    return o;
}

static void hasher_init_common(capsem_blake3_hasher *self, const uint32_t key[8], uint8_t flags) {
    memcpy(self->key, key, sizeof self->key);
    chunk_init(&self->chunk, key, 0, flags);
    self->cv_stack_len = 0;
}

void capsem_blake3_hasher_init(capsem_blake3_hasher *self) { hasher_init_common(self, IV, 0); }

void capsem_blake3_hasher_init_keyed(capsem_blake3_hasher *self, const uint8_t key[CAPSEM_BLAKE3_KEY_LEN]) {
    uint32_t words[8];
    for (int i = 0; i < 8; i++) words[i] = load32(key + 4 * i);
    hasher_init_common(self, words, KEYED_HASH);
}

/* Merge completed subtrees: after chunk number total_chunks (1-based) is done, every
 * trailing zero bit of total_chunks is one pair of equal-sized subtrees to join. */
static void push_chunk_cv(capsem_blake3_hasher *self, uint8_t cv[32], uint64_t total_chunks) {
    while ((total_chunks & 1) == 0) {
        uint8_t pair[64];
        self->cv_stack_len--;
        memcpy(pair, self->cv_stack + (size_t)self->cv_stack_len * 32, 32);
        memcpy(pair + 32, cv, 32);
        output_t parent = parent_output(pair, self->key, self->chunk.flags);
        output_cv(&parent, cv);
        total_chunks >>= 1;
    }
    memcpy(self->cv_stack + (size_t)self->cv_stack_len * 32, cv, 32);
    self->cv_stack_len++;
}

void capsem_blake3_hasher_update(capsem_blake3_hasher *self, const void *input, size_t input_len) {
    const uint8_t *in = (const uint8_t *)input;
    while (input_len > 0) {
        if (chunk_len(&self->chunk) == CAPSEM_BLAKE3_CHUNK_LEN) {
            /* A full chunk is only finished once more input proves it is not the last one. */
            output_t o = chunk_output(&self->chunk);
            uint8_t cv[32];
            output_cv(&o, cv);
            uint64_t total = self->chunk.chunk_counter + 1;
            push_chunk_cv(self, cv, total);
            chunk_init(&self->chunk, self->key, total, self->chunk.flags);
        }
        size_t want = CAPSEM_BLAKE3_CHUNK_LEN - chunk_len(&self->chunk);
        size_t take = input_len < want ? input_len : want;
        chunk_update(&self->chunk, in, take);
        in += take;
        input_len -= take;
    }
}

void capsem_blake3_hasher_finalize(const capsem_blake3_hasher *self, uint8_t *out, size_t out_len) {
    output_t o = chunk_output(&self->chunk);
    size_t remaining = self->cv_stack_len;
    while (remaining > 0) {
        uint8_t pair[64];
        remaining--;
        memcpy(pair, self->cv_stack + remaining * 32, 32);
        output_cv(&o, pair + 32);
        o = parent_output(pair, self->key, self->chunk.flags);
    }
    output_root(&o, out, out_len);
}

void capsem_blake3_hash(const void *input, size_t input_len, uint8_t out[CAPSEM_BLAKE3_OUT_LEN]) {
    capsem_blake3_hasher h;
    capsem_blake3_hasher_init(&h);
    capsem_blake3_hasher_update(&h, input, input_len);
    capsem_blake3_hasher_finalize(&h, out, CAPSEM_BLAKE3_OUT_LEN);
}

void capsem_blake3_hash_many(const uint8_t *base, const uint64_t *offsets, const uint64_t *lengths,
                             size_t n, uint8_t *out) {
    for (size_t i = 0; i < n; i++) capsem_blake3_hash(base + offsets[i], (size_t)lengths[i], out + 32 * i);
}
