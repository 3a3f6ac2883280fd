/* BLAKE3 SIMD kernels written once for any lane count and any instruction set. Included by
 * x86/blake3_x16.h (16 lanes, the AVX-512 level), x86/blake3_avx2.c (8 lanes),
 * x86/blake3_sse41.c (4 lanes) and arm/blake3_neon.c (4 lanes), each compiled for its
 * instruction set, after they define:
 *
 *   LANES, LANES_MIN       lanes per vector; the fewest inputs worth a partial group
 *   vec                    a vector of LANES 32-bit words
 *   v_add v_xor v_set1 v_load v_store v_rot16 v_rot12 v_rot8 v_rot7
 *   load_msg(blocks, off, m)   m[w] = word w of the block at blocks[lane] + off, per lane
 *   store_cvs(cv, out)         lane j's 8 CV words to out + 32 * j, for every lane
 *                          (or, for four lanes, transpose4(r) and LANES_FROM_TRANSPOSE4:
 *                          r[j] holds 4 words of lane j, afterwards r[w] word w of each lane)
 *   LANES_KERNELS          the level's own kernel table (declared in blake3_impl.h)
 *
 * "Lanes" run one compression per lane side by side (chunks of one input, parent nodes,
 * or different small inputs). The blocks that must go one after another are each level's
 * own compress (x86/blake3_rows.h on x86). Nothing here names an instruction set. */
#include <string.h>

#include "blake3_impl.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

#if defined(LANES_FROM_TRANSPOSE4)
/* Four lanes: a block is four 16-byte rows per lane, each group of four transposed. */
static inline void load_msg(const uint8_t *const blocks[LANES], size_t off, vec m[16]) {
    for (int q = 0; q < 4; q++) {
        for (int j = 0; j < 4; j++) m[4 * q + j] = v_load(blocks[j] + off + 16 * q);
        transpose4(m + 4 * q);
    }
}

static inline void store_cvs(const vec cv[8], uint8_t *out) {
    for (int half = 0; half < 2; half++) {
        vec r[4];
        for (int w = 0; w < 4; w++) r[w] = cv[4 * half + w];
        transpose4(r);
        for (int j = 0; j < 4; j++) v_store(out + 32 * j + 16 * half, r[j]);
    }
}
#endif

/* ---- lanes ------------------------------------------------------------------------- */

/* Four G functions side by side, each step done for all four before the next, on sixteen
 * named state vectors: only the state and a temporary stay live, so they fit the registers. */
#define LANES_ADD3(a, b, x) v_add(v_add(a, b), x)
/* Half of four G functions: message words s[k], s[2 + k], s[4 + k], s[6 + k], rotations rd, rb. */
#define LANES_HALF(a0, b0, c0, d0, a1, b1, c1, d1, a2, b2, c2, d2, a3, b3, c3, d3, s, k, rd, rb)  \
    a0 = LANES_ADD3(a0, b0, m[s[k]]); a1 = LANES_ADD3(a1, b1, m[s[2 + k]]);                      \
    a2 = LANES_ADD3(a2, b2, m[s[4 + k]]); a3 = LANES_ADD3(a3, b3, m[s[6 + k]]);                  \
    d0 = rd(v_xor(d0, a0)); d1 = rd(v_xor(d1, a1)); d2 = rd(v_xor(d2, a2)); d3 = rd(v_xor(d3, a3)); \
    c0 = v_add(c0, d0); c1 = v_add(c1, d1); c2 = v_add(c2, d2); c3 = v_add(c3, d3);              \
    b0 = rb(v_xor(b0, c0)); b1 = rb(v_xor(b1, c1)); b2 = rb(v_xor(b2, c2)); b3 = rb(v_xor(b3, c3));
#define LANES_G4(...)                           \
    LANES_HALF(__VA_ARGS__, 0, v_rot16, v_rot12) \
    LANES_HALF(__VA_ARGS__, 1, v_rot8, v_rot7)

ALWAYS_INLINE void lanes_compress(vec cv[8], const vec m[16], vec counter_lo, vec counter_hi, vec block_len,
                                  vec flags) {
    vec v0 = cv[0], v1 = cv[1], v2 = cv[2], v3 = cv[3], v4 = cv[4], v5 = cv[5], v6 = cv[6], v7 = cv[7];
    vec v8 = v_set1(CAPSEM_BLAKE3_IV[0]), v9 = v_set1(CAPSEM_BLAKE3_IV[1]);
    vec v10 = v_set1(CAPSEM_BLAKE3_IV[2]), v11 = v_set1(CAPSEM_BLAKE3_IV[3]);
    vec v12 = counter_lo, v13 = counter_hi, v14 = block_len, v15 = flags;
#pragma GCC unroll 7
    for (int r = 0; r < 7; r++) {
        const uint8_t *col = CAPSEM_BLAKE3_SCHEDULE[r], *diag = CAPSEM_BLAKE3_SCHEDULE[r] + 8;
        LANES_G4(v0, v4, v8, v12, v1, v5, v9, v13, v2, v6, v10, v14, v3, v7, v11, v15, col)
        LANES_G4(v0, v5, v10, v15, v1, v6, v11, v12, v2, v7, v8, v13, v3, v4, v9, v14, diag)
    }
    cv[0] = v_xor(v0, v8); cv[1] = v_xor(v1, v9); cv[2] = v_xor(v2, v10); cv[3] = v_xor(v3, v11);
    cv[4] = v_xor(v4, v12); cv[5] = v_xor(v5, v13); cv[6] = v_xor(v6, v14); cv[7] = v_xor(v7, v15);
}

/* Up to LANES strided inputs of nblocks blocks; idle lanes repeat the last input and their
 * CVs are dropped. Every block is loaded before any CV is stored (in-place parents). */
static void lanes_group(const uint8_t *first, size_t stride, size_t count, size_t nblocks, const uint32_t key[8],
                        uint64_t counter, uint64_t step, uint32_t flags, uint32_t flags_start, uint32_t flags_end,
                        uint8_t *out) {
    const uint8_t *blocks[LANES];
    uint32_t lo[LANES], hi[LANES];
    for (size_t j = 0; j < LANES; j++) {
        size_t k = j < count ? j : count - 1;
        uint64_t c = counter + k * step;
        blocks[j] = first + k * stride;
        lo[j] = (uint32_t)c;
        hi[j] = (uint32_t)(c >> 32);
    }
    vec cv[8], m[16];
    for (int i = 0; i < 8; i++) cv[i] = v_set1(key[i]);
    const vec counter_lo = v_load(lo), counter_hi = v_load(hi), block_len = v_set1(CAPSEM_BLAKE3_BLOCK_LEN);
    for (size_t b = 0; b < nblocks; b++) {
        uint32_t f = flags | (b == 0 ? flags_start : 0) | (b + 1 == nblocks ? flags_end : 0);
        load_msg(blocks, b * CAPSEM_BLAKE3_BLOCK_LEN, m);
        /* The lanes read LANES streams side by side, more than the hardware prefetcher
         * follows: ask for each lane's next block while this one is compressed. Its last
         * byte, so a block that straddles two cache lines (inputs are rarely 64-byte
         * aligned) has both on the way. From memory (an archive's bytes in the page cache)
         * this took AVX-512 on a Zen 4 from 3.1-3.6 to 4.0-4.4 GB/s at any alignment; from
         * cache it changes nothing. A prefetch never faults, past a map's end included. */
        for (size_t j = 0; j < LANES; j++) __builtin_prefetch(blocks[j] + (b + 2) * CAPSEM_BLAKE3_BLOCK_LEN - 1);
        lanes_compress(cv, m, counter_lo, counter_hi, block_len, v_set1(f));
    }
    if (count == LANES) {
        store_cvs(cv, out);
    } else {
        uint8_t whole[LANES * 32];
        store_cvs(cv, whole);
        memcpy(out, whole, 32 * count);
    }
}

static size_t lanes_hash_strided(const uint8_t *base, size_t stride, size_t n, size_t nblocks, const uint32_t key[8],
                                 uint64_t counter, uint64_t step, uint32_t flags, uint32_t flags_start,
                                 uint32_t flags_end, uint8_t *out) {
    size_t done = 0;
    while (n - done >= LANES_MIN) {
        size_t count = n - done < LANES ? n - done : LANES;
        lanes_group(base + done * stride, stride, count, nblocks, key, counter + done * step, step, flags,
                    flags_start, flags_end, out + 32 * done);
        done += count;
    }
    return done;
}

/* Many short inputs (up to CAPSEM_BLAKE3_SHORT_CHUNKS chunks each, hash mode). The work is
 * a stream of chunks, input after input; each lane walks one chunk block by block and takes
 * the next chunk of the stream as soon as it finishes, so inputs of any mix of lengths keep
 * the lanes busy without sorting. A one-chunk input is its own root (the common body); the
 * chunk CVs of a longer one wait in a slot until its last chunk is done, then its parents
 * are compressed one after another. */
#define SHORT_IDLE (-2)
#define SHORT_ROOT (-1)

typedef struct {
    uint8_t cvs[CAPSEM_BLAKE3_SHORT_CHUNKS * 32];
    size_t pending; /* chunks not yet done; 0: the slot is free */
    size_t chunks;
    uint8_t *dst;
} short_slot;

typedef struct {
    const uint8_t *base;
    const uint64_t *offsets, *lengths;
    size_t n, next;
    uint8_t *out;
    /* the input whose chunks are being handed out */
    const uint8_t *cur_src;
    size_t cur_len, cur_chunk, cur_chunks;
    int cur_slot;
    /* per lane: the chunk it walks */
    const uint8_t *src[LANES];
    size_t left[LANES];
    uint8_t *dst[LANES];
    int slot[LANES]; /* SHORT_IDLE, SHORT_ROOT (a one-chunk input), or the slot of its input */
    _Alignas(32) uint32_t start[LANES], chunk[LANES];
    _Alignas(32) uint32_t cv[8][LANES]; /* word-major, so each row loads as one vector */
    short_slot slots[LANES];
} short_lanes;

static const size_t SHORT_MAX_LEN = (size_t)CAPSEM_BLAKE3_SHORT_CHUNKS * CAPSEM_BLAKE3_CHUNK_LEN;

/* Gives lane j the next chunk of the stream; 0 when the stream is over. */
static int short_take(short_lanes *s, size_t j) {
    if (s->cur_chunk == s->cur_chunks) {
        while (s->next < s->n && s->lengths[s->next] > SHORT_MAX_LEN) s->next++;
        if (s->next == s->n) {
            s->slot[j] = SHORT_IDLE;
            return 0;
        }
        size_t i = s->next++;
        s->cur_src = s->base + s->offsets[i];
        s->cur_len = (size_t)s->lengths[i];
        s->cur_chunk = 0;
        s->cur_chunks = s->cur_len <= CAPSEM_BLAKE3_CHUNK_LEN ? 1 : (s->cur_len + CAPSEM_BLAKE3_CHUNK_LEN - 1) / CAPSEM_BLAKE3_CHUNK_LEN;
        s->cur_slot = SHORT_ROOT;
        if (s->cur_chunks == 1) {
            s->dst[j] = s->out + 32 * i;
        } else {
            /* Inputs in flight each hold a lane other than j: a slot is free. */
            int k = 0;
            while (s->slots[k].pending) k++;
            s->slots[k].pending = s->slots[k].chunks = s->cur_chunks;
            s->slots[k].dst = s->out + 32 * i;
            s->cur_slot = k;
        }
    }
    size_t c = s->cur_chunk++;
    size_t offset = c * CAPSEM_BLAKE3_CHUNK_LEN, rest = s->cur_len - offset;
    s->src[j] = s->cur_src + offset;
    s->left[j] = rest < CAPSEM_BLAKE3_CHUNK_LEN ? rest : CAPSEM_BLAKE3_CHUNK_LEN;
    s->slot[j] = s->cur_slot;
    s->chunk[j] = (uint32_t)c;
    s->start[j] = CHUNK_START;
    for (int w = 0; w < 8; w++) s->cv[w][j] = CAPSEM_BLAKE3_IV[w];
    return 1;
}

/* Lane j's chunk is done: its CV is the digest, or joins its input's slot. */
static void short_done(short_lanes *s, size_t j) {
    uint8_t *to = s->slot[j] == SHORT_ROOT ? s->dst[j] : s->slots[s->slot[j]].cvs + 32 * s->chunk[j];
    for (int w = 0; w < 8; w++) capsem_blake3_store32(to + 4 * w, s->cv[w][j]);
    if (s->slot[j] != SHORT_ROOT) {
        short_slot *slot = &s->slots[s->slot[j]];
        if (--slot->pending == 0) capsem_blake3_root_from_cvs(&LANES_KERNELS, slot->cvs, slot->chunks, slot->dst);
    }
}

static void lanes_hash_short(const uint8_t *base, const uint64_t *offsets, const uint64_t *lengths, size_t n,
                             uint8_t *out) {
    static const uint8_t zero_block[CAPSEM_BLAKE3_BLOCK_LEN];
    short_lanes s;
    s.base = base;
    s.offsets = offsets;
    s.lengths = lengths;
    s.n = n;
    s.next = 0;
    s.out = out;
    s.cur_chunk = s.cur_chunks = 0;
    for (size_t k = 0; k < LANES; k++) s.slots[k].pending = 0;
    _Alignas(32) uint8_t pad[LANES][CAPSEM_BLAKE3_BLOCK_LEN];
    _Alignas(32) uint32_t block_len[LANES], flags[LANES];
    const uint8_t *blocks[LANES];
    size_t busy = 0;
    for (size_t j = 0; j < LANES; j++) busy += (size_t)short_take(&s, j);
    while (busy > 0) {
        for (size_t j = 0; j < LANES; j++) {
            uint32_t end = CHUNK_END | (s.slot[j] == SHORT_ROOT ? ROOT : 0);
            if (s.slot[j] == SHORT_IDLE) {
                blocks[j] = zero_block;
                block_len[j] = 0;
                flags[j] = 0;
            } else if (s.left[j] >= CAPSEM_BLAKE3_BLOCK_LEN) {
                blocks[j] = s.src[j];
                block_len[j] = CAPSEM_BLAKE3_BLOCK_LEN;
                flags[j] = s.start[j] | (s.left[j] == CAPSEM_BLAKE3_BLOCK_LEN ? end : 0);
            } else {
                /* Zero-padded: never read past the input. */
                memset(pad[j], 0, sizeof pad[j]);
                if (s.left[j]) memcpy(pad[j], s.src[j], s.left[j]);
                blocks[j] = pad[j];
                block_len[j] = (uint32_t)s.left[j];
                flags[j] = s.start[j] | end;
            }
        }
        vec cv[8], m[16];
        for (int w = 0; w < 8; w++) cv[w] = v_load(s.cv[w]);
        load_msg(blocks, 0, m);
        lanes_compress(cv, m, v_load(s.chunk), v_set1(0), v_load(block_len), v_load(flags));
        for (int w = 0; w < 8; w++) v_store(s.cv[w], cv[w]);
        for (size_t j = 0; j < LANES; j++) {
            if (s.slot[j] == SHORT_IDLE) continue;
            if (s.left[j] > CAPSEM_BLAKE3_BLOCK_LEN) {
                s.src[j] += CAPSEM_BLAKE3_BLOCK_LEN;
                s.left[j] -= CAPSEM_BLAKE3_BLOCK_LEN;
                s.start[j] = 0;
            } else {
                short_done(&s, j);
                busy -= 1 - (size_t)short_take(&s, j);
            }
        }
    }
}
