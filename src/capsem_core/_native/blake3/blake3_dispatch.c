/* BLAKE3 tree and SIMD dispatch: chunk and parent nodes, the chaining-value stack, the
 * one-shot and many-input entry points, and the choice of SIMD level. The levels
 * (blake3_portable.c, x86/blake3_sse41.c, x86/blake3_avx2.c, x86/blake3_avx512.c,
 * arm/blake3_neon.c) only compress;
 * everything here is shared by all of them, so a level cannot change the tree. */
#include <string.h>

#include "blake3_impl.h"

#define CHUNK_LEN CAPSEM_BLAKE3_CHUNK_LEN
#define BLOCK_LEN CAPSEM_BLAKE3_BLOCK_LEN
#define BLOCKS_PER_CHUNK (CHUNK_LEN / BLOCK_LEN)
/* A subtree hashed in one go keeps its chunk CVs on the stack: 256 chunks = 8 KiB. */
#define SUBTREE_CHUNKS 256
#define SUBTREE_BYTES ((size_t)SUBTREE_CHUNKS * CHUNK_LEN)

typedef capsem_blake3_kernels kernels_t;

/* ---- SIMD level -------------------------------------------------------------------- */

/* The SIMD kernels are built only for their own targets: x86/ for x86-64, where CMake
 * defines CAPSEM_HAVE_X86_SIMD, and arm/ for arm64, where it defines CAPSEM_HAVE_NEON_SIMD.
 * Elsewhere only portable is offered. The names and numbers stay the same on every machine. */
static const char *const LEVEL_NAMES[CAPSEM_BLAKE3_LEVELS] = {
    "portable", "sse41", "avx2", "avx512", "avx512-on-avx2", "neon",
};

static const kernels_t *const LEVEL_KERNELS[CAPSEM_BLAKE3_LEVELS] = {
    &capsem_blake3_portable_kernels,
#if defined(CAPSEM_HAVE_X86_SIMD)
    &capsem_blake3_sse41_kernels,
    &capsem_blake3_avx2_kernels,
    &capsem_blake3_avx512_kernels,
    &capsem_blake3_avx512_on_avx2_kernels,
#else
    NULL, NULL, NULL, NULL,
#endif
#if defined(CAPSEM_HAVE_NEON_SIMD)
    &capsem_blake3_neon_kernels,
#else
    NULL,
#endif
};

/* The levels the automatic choice tries, fastest first; portable when none passes. A build
 * has either the x86 levels or neon, never both. */
static const int PREFERRED[] = {CAPSEM_BLAKE3_NEON, CAPSEM_BLAKE3_AVX512, CAPSEM_BLAKE3_AVX2, CAPSEM_BLAKE3_SSE41};

static int cpu_has(int level) {
    if (level == CAPSEM_BLAKE3_PORTABLE) return 1;
    if (LEVEL_KERNELS[level] == NULL) return 0;
    /* Advanced SIMD is mandatory in the AArch64 architecture: every arm64 CPU runs it. */
    if (level == CAPSEM_BLAKE3_NEON) return 1;
#if defined(CAPSEM_HAVE_X86_SIMD) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    if (level == CAPSEM_BLAKE3_SSE41) return __builtin_cpu_supports("sse4.1");
    if (level == CAPSEM_BLAKE3_AVX2 || level == CAPSEM_BLAKE3_AVX512_ON_AVX2) return __builtin_cpu_supports("avx2");
    /* libgcc reports AVX-512 only when the OS also saves the zmm state (XCR0). */
    if (level == CAPSEM_BLAKE3_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
#endif
    return 0;
}

/* -1 until first use; then the level every call starts with. */
static int active_level = -1;

int capsem_blake3_level_supported(int level) {
    return level >= 0 && level < CAPSEM_BLAKE3_LEVELS && cpu_has(level);
}

int capsem_blake3_level(void) {
    int level = __atomic_load_n(&active_level, __ATOMIC_ACQUIRE);
    if (level < 0) {
        int unset = -1;
        __atomic_compare_exchange_n(&active_level, &unset, capsem_blake3_max_level(), 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
        level = __atomic_load_n(&active_level, __ATOMIC_ACQUIRE);
    }
    return level;
}

int capsem_blake3_set_level(int level) {
    if (!capsem_blake3_level_supported(level)) return -1;
    __atomic_store_n(&active_level, level, __ATOMIC_RELEASE);
    return 0;
}

const char *capsem_blake3_level_name(int level) {
    if (level < 0 || level >= CAPSEM_BLAKE3_LEVELS) return NULL;
    return LEVEL_NAMES[level];
}

static const kernels_t *kernels(void) { return LEVEL_KERNELS[capsem_blake3_level()]; }

/* ---- nodes ------------------------------------------------------------------------- */

/* The last compression of a chunk or parent, held back until we know whether it is the root
 * (the root adds ROOT and may be expanded to any output length). */
typedef struct {
    uint32_t cv[8];
    uint8_t block[BLOCK_LEN];
    uint64_t counter;
    uint32_t block_len;
    uint32_t flags;
} node_t;

static void store_cv(uint8_t out[32], const uint32_t cv[8]) {
    for (int i = 0; i < 8; i++) capsem_blake3_store32(out + 4 * i, cv[i]);
}

static void node_cv(const kernels_t *k, const node_t *n, uint8_t out[32]) {
    uint32_t words[16];
    k->compress(n->cv, n->block, n->block_len, n->counter, n->flags, words);
    store_cv(out, words);
}

static void node_root(const kernels_t *k, const node_t *n, uint8_t *out, size_t out_len) {
    /* Extendable output: the root compression again with the output block number as counter. */
    for (uint64_t counter = 0; out_len > 0; counter++) {
        uint32_t words[16];
        uint8_t bytes[64];
        k->compress(n->cv, n->block, n->block_len, counter, n->flags | ROOT, words);
        for (int i = 0; i < 16; i++) capsem_blake3_store32(bytes + 4 * i, words[i]);
        size_t take = out_len < 64 ? out_len : 64;
        memcpy(out, bytes, take);
        out += take;
        out_len -= take;
    }
}

static void parent_node(const uint8_t left_right[64], const uint32_t key[8], uint32_t flags, node_t *n) {
    memcpy(n->cv, key, sizeof n->cv);
    memcpy(n->block, left_right, BLOCK_LEN);
    n->counter = 0;
    n->block_len = BLOCK_LEN;
    n->flags = flags | PARENT;
}

/* One chunk (0 to 1024 bytes) read straight from the input. */
static void chunk_node(const kernels_t *k, const uint8_t *in, size_t len, const uint32_t key[8], uint64_t counter,
                       uint32_t flags, node_t *n) {
    uint32_t cv[8], words[16];
    uint32_t start = CHUNK_START;
    memcpy(cv, key, sizeof cv);
    while (len > BLOCK_LEN) {
        k->compress(cv, in, BLOCK_LEN, counter, flags | start, words);
        memcpy(cv, words, sizeof cv);
        in += BLOCK_LEN;
        len -= BLOCK_LEN;
        start = 0;
    }
    memcpy(n->cv, cv, sizeof cv);
    memset(n->block, 0, BLOCK_LEN);
    if (len) memcpy(n->block, in, len);
    n->counter = counter;
    n->block_len = (uint32_t)len;
    n->flags = flags | start | CHUNK_END;
}

/* CVs of n inputs of nblocks whole blocks each: the level's lanes take what they can, the
 * rest is compressed one input at a time. */
static void hash_strided(const kernels_t *k, const uint8_t *base, size_t stride, size_t n, size_t nblocks,
                         const uint32_t key[8], uint64_t counter, uint64_t step, uint32_t flags, uint32_t flags_start,
                         uint32_t flags_end, uint8_t *out) {
    size_t i = k->hash_strided
                   ? k->hash_strided(base, stride, n, nblocks, key, counter, step, flags, flags_start, flags_end, out)
                   : 0;
    for (; i < n; i++) {
        uint32_t cv[8], words[16];
        const uint8_t *in = base + i * stride;
        memcpy(cv, key, sizeof cv);
        for (size_t b = 0; b < nblocks; b++) {
            uint32_t f = flags | (b == 0 ? flags_start : 0) | (b + 1 == nblocks ? flags_end : 0);
            k->compress(cv, in + b * BLOCK_LEN, BLOCK_LEN, counter + i * step, f, words);
            memcpy(cv, words, sizeof cv);
        }
        store_cv(out + 32 * i, cv);
    }
}

/* The top node over n >= 2 CVs in a row (overwritten): one level of parents at a time,
 * pairs from the left, an odd last CV rising unchanged, which is BLAKE3's left-full tree. */
static void top_of_cvs(const kernels_t *k, uint8_t *cvs, size_t n, const uint32_t key[8], uint32_t flags,
                       node_t *top) {
    while (n > 2) {
        size_t pairs = n / 2;
        hash_strided(k, cvs, 64, pairs, 1, key, 0, 0, flags | PARENT, 0, 0, cvs);
        if (n & 1) memmove(cvs + 32 * pairs, cvs + 32 * (n - 1), 32);
        n = pairs + (n & 1);
    }
    parent_node(cvs, key, flags, top);
}

/* The top node of the tree over in[0 .. len), whose first chunk is number counter, for at
 * most SUBTREE_CHUNKS chunks: every chunk CV at once, then the parents above them. */
static void subtree_node(const kernels_t *k, const uint8_t *in, size_t len, const uint32_t key[8], uint64_t counter,
                         uint32_t flags, node_t *top) {
    if (len <= CHUNK_LEN) {
        chunk_node(k, in, len, key, counter, flags, top);
        return;
    }
    uint8_t cvs[SUBTREE_CHUNKS * 32];
    size_t n = len / CHUNK_LEN, rest = len % CHUNK_LEN;
    hash_strided(k, in, CHUNK_LEN, n, BLOCKS_PER_CHUNK, key, counter, 1, flags, CHUNK_START, CHUNK_END, cvs);
    if (rest) {
        node_t last;
        chunk_node(k, in + n * CHUNK_LEN, rest, key, counter + n, flags, &last);
        node_cv(k, &last, cvs + 32 * n);
        n++;
    }
    top_of_cvs(k, cvs, n, key, flags, top);
}

void capsem_blake3_root_from_cvs(const kernels_t *k, uint8_t *cvs, size_t n, uint8_t out[32]) {
    node_t top;
    top_of_cvs(k, cvs, n, CAPSEM_BLAKE3_IV, 0, &top);
    node_root(k, &top, out, 32);
}

/* ---- the chaining-value stack (incremental hasher) ---------------------------------- */

static void chunk_init(capsem_blake3_chunk_state *c, const uint32_t key[8], uint64_t counter, uint8_t flags) {
    memcpy(c->cv, key, sizeof c->cv);
    c->chunk_counter = counter;
    memset(c->buf, 0, sizeof c->buf);
    c->buf_len = 0;
    c->blocks_compressed = 0;
    c->flags = flags;
}

static size_t chunk_len(const capsem_blake3_chunk_state *c) {
    return (size_t)c->blocks_compressed * BLOCK_LEN + c->buf_len;
}

static uint32_t chunk_start_flag(const capsem_blake3_chunk_state *c) {
    return c->blocks_compressed == 0 ? CHUNK_START : 0;
}

static void chunk_update(const kernels_t *k, capsem_blake3_chunk_state *c, const uint8_t *in, size_t len) {
    while (len > 0) {
        /* Only compress a full buffer once more input follows: the last block needs CHUNK_END. */
        if (c->buf_len == BLOCK_LEN) {
            uint32_t words[16];
            k->compress(c->cv, c->buf, BLOCK_LEN, c->chunk_counter, c->flags | chunk_start_flag(c), words);
            memcpy(c->cv, words, sizeof c->cv);
            c->blocks_compressed++;
            c->buf_len = 0;
            memset(c->buf, 0, sizeof c->buf);
        }
        size_t want = BLOCK_LEN - c->buf_len;
        size_t take = len < want ? len : want;
        memcpy(c->buf + c->buf_len, in, take);
        c->buf_len = (uint8_t)(c->buf_len + take);
        in += take;
        len -= take;
    }
}

static void chunk_state_node(const capsem_blake3_chunk_state *c, node_t *n) {
    memcpy(n->cv, c->cv, sizeof n->cv);
    memcpy(n->block, c->buf, BLOCK_LEN);
    n->counter = c->chunk_counter;
    n->block_len = c->buf_len;
    n->flags = c->flags | chunk_start_flag(c) | CHUNK_END;
}

static void hasher_init_common(capsem_blake3_hasher *self, const uint32_t key[8], uint8_t flags) {
    memcpy(self->key, key, sizeof self->key);
    chunk_init(&self->chunk, key, 0, flags);
    self->cv_stack_len = 0;
}

void capsem_blake3_hasher_init(capsem_blake3_hasher *self) { hasher_init_common(self, CAPSEM_BLAKE3_IV, 0); }

void capsem_blake3_hasher_init_keyed(capsem_blake3_hasher *self, const uint8_t key[CAPSEM_BLAKE3_KEY_LEN]) {
    uint32_t words[8];
    for (int i = 0; i < 8; i++) words[i] = capsem_blake3_load32(key + 4 * i);
    hasher_init_common(self, words, KEYED_HASH);
}

/* Pushes the CV of a finished subtree that has more input after it. The stack then holds one
 * CV per set bit of total_chunks (largest subtree at the bottom): merge the top two until so. */
static void push_cv(const kernels_t *k, capsem_blake3_hasher *self, const uint8_t cv[32], uint64_t total_chunks) {
    memcpy(self->cv_stack + (size_t)self->cv_stack_len * 32, cv, 32);
    self->cv_stack_len++;
    while (self->cv_stack_len > (unsigned)__builtin_popcountll(total_chunks)) {
        node_t parent;
        self->cv_stack_len--;
        uint8_t *left = self->cv_stack + (size_t)(self->cv_stack_len - 1) * 32;
        parent_node(left, self->key, self->chunk.flags, &parent);
        node_cv(k, &parent, left);
    }
}

/* Joins the node on the right of everything on the stack into the root's node. */
static void fold_stack(const kernels_t *k, const capsem_blake3_hasher *self, node_t *n) {
    for (size_t i = self->cv_stack_len; i-- > 0;) {
        uint8_t pair[64];
        memcpy(pair, self->cv_stack + i * 32, 32);
        node_cv(k, n, pair + 32);
        parent_node(pair, self->key, self->chunk.flags, n);
    }
}

void capsem_blake3_hasher_update(capsem_blake3_hasher *self, const void *input, size_t input_len) {
    const kernels_t *k = kernels();
    const uint8_t *in = (const uint8_t *)input;
    while (input_len > 0) {
        size_t have = chunk_len(&self->chunk);
        if (have == CHUNK_LEN) {
            /* A full chunk is only finished once more input proves it is not the last one. */
            node_t n;
            uint8_t cv[32];
            chunk_state_node(&self->chunk, &n);
            node_cv(k, &n, cv);
            uint64_t total = self->chunk.chunk_counter + 1;
            push_cv(k, self, cv, total);
            chunk_init(&self->chunk, self->key, total, self->chunk.flags);
            have = 0;
        }
        if (have == 0 && input_len > CHUNK_LEN) {
            /* Whole chunks with input after them: one power-of-two subtree, aligned to its own
             * size so that it is a node of the final tree, hashed several chunks at a time. */
            uint64_t counter = self->chunk.chunk_counter;
            uint64_t size = SUBTREE_CHUNKS;
            while (size * CHUNK_LEN >= input_len) size >>= 1;
            while (counter & (size - 1)) size >>= 1;
            node_t n;
            uint8_t cv[32];
            subtree_node(k, in, (size_t)size * CHUNK_LEN, self->key, counter, self->chunk.flags, &n);
            node_cv(k, &n, cv);
            push_cv(k, self, cv, counter + size);
            chunk_init(&self->chunk, self->key, counter + size, self->chunk.flags);
            in += size * CHUNK_LEN;
            input_len -= size * CHUNK_LEN;
            continue;
        }
        size_t want = CHUNK_LEN - have;
        size_t take = input_len < want ? input_len : want;
        chunk_update(k, &self->chunk, in, take);
        in += take;
        input_len -= take;
    }
}

void capsem_blake3_hasher_finalize(const capsem_blake3_hasher *self, uint8_t *out, size_t out_len) {
    const kernels_t *k = kernels();
    node_t n;
    chunk_state_node(&self->chunk, &n);
    fold_stack(k, self, &n);
    node_root(k, &n, out, out_len);
}

/* ---- one-shot ---------------------------------------------------------------------- */

/* Whole subtrees while more than one subtree's worth is left (each is then known not to be
 * the root), and the remainder, at most one subtree, as the node that joins the stack. */
static void hash_oneshot(const kernels_t *k, const uint8_t *in, size_t len, const uint32_t key[8], uint8_t flags,
                         uint8_t *out, size_t out_len) {
    node_t n;
    if (len <= SUBTREE_BYTES) {
        subtree_node(k, in, len, key, 0, flags, &n);
    } else {
        capsem_blake3_hasher stack;
        uint64_t counter = 0;
        hasher_init_common(&stack, key, flags);
        while (len > SUBTREE_BYTES) {
            uint8_t cv[32];
            subtree_node(k, in, SUBTREE_BYTES, key, counter, flags, &n);
            node_cv(k, &n, cv);
            counter += SUBTREE_CHUNKS;
            push_cv(k, &stack, cv, counter);
            in += SUBTREE_BYTES;
            len -= SUBTREE_BYTES;
        }
        subtree_node(k, in, len, key, counter, flags, &n);
        fold_stack(k, &stack, &n);
    }
    node_root(k, &n, out, out_len);
}

void capsem_blake3_hash(const void *input, size_t input_len, uint8_t out[CAPSEM_BLAKE3_OUT_LEN]) {
    hash_oneshot(kernels(), (const uint8_t *)input, input_len, CAPSEM_BLAKE3_IV, 0, out, CAPSEM_BLAKE3_OUT_LEN);
}

static void hash_many_with(const kernels_t *k, const uint8_t *base, const uint64_t *offsets, const uint64_t *lengths,
                           size_t n, uint8_t *out) {
    /* The lanes take the short inputs together (bodies of one chunk or less are the common
     * case); longer ones are hashed one at a time, each with its own chunks in lanes. */
    if (k->hash_short) k->hash_short(base, offsets, lengths, n, out);
    for (size_t i = 0; i < n; i++) {
        if (k->hash_short && lengths[i] <= (uint64_t)CAPSEM_BLAKE3_SHORT_CHUNKS * CHUNK_LEN) continue;
        hash_oneshot(k, base + offsets[i], (size_t)lengths[i], CAPSEM_BLAKE3_IV, 0, out + 32 * i, 32);
    }
}

void capsem_blake3_hash_many(const uint8_t *base, const uint64_t *offsets, const uint64_t *lengths,
                             size_t n, uint8_t *out) {
    hash_many_with(kernels(), base, offsets, lengths, n, out);
}

/* ---- choosing the level ------------------------------------------------------------ */

/* -1 until first asked; then the level capsem_blake3_max_level chose. */
static int best_level = -1;

#define PROBE_BYTES (20 * CHUNK_LEN + 17)
#define PROBE_SLICES 40

int capsem_blake3_level_self_check(int level) {
    if (!capsem_blake3_level_supported(level)) return 0;
    const kernels_t *k = LEVEL_KERNELS[level], *ref = &capsem_blake3_portable_kernels;
    uint8_t probe[PROBE_BYTES];
    for (size_t i = 0; i < PROBE_BYTES; i++) probe[i] = (uint8_t)((i * i + 7 * i) % 251);
    /* One-shot lengths around block, chunk and lane-group edges; then one hash_many call
     * over slices of every length class, so the lanes meet partial groups and long inputs. */
    static const size_t lengths[] = {0, 1, 64, 65, 1023, 1024, 1025, 2048, 4097, 8 * 1024, 16 * 1024 + 1,
                                     PROBE_BYTES};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        uint8_t got[32], want[32];
        hash_oneshot(k, probe, lengths[i], CAPSEM_BLAKE3_IV, 0, got, 32);
        hash_oneshot(ref, probe, lengths[i], CAPSEM_BLAKE3_IV, 0, want, 32);
        if (memcmp(got, want, 32) != 0) return 0;
    }
    uint64_t offs[PROBE_SLICES], lens[PROBE_SLICES];
    uint8_t got[PROBE_SLICES * 32], want[PROBE_SLICES * 32];
    for (size_t i = 0; i < PROBE_SLICES; i++) {
        lens[i] = (i * 977) % (i % 5 == 4 ? 18 * CHUNK_LEN : CHUNK_LEN + 1);
        offs[i] = (i * 131) % (PROBE_BYTES - lens[i] + 1);
    }
    hash_many_with(k, probe, offs, lens, PROBE_SLICES, got);
    hash_many_with(ref, probe, offs, lens, PROBE_SLICES, want);
    return memcmp(got, want, sizeof got) == 0;
}

int capsem_blake3_max_level(void) {
    int level = __atomic_load_n(&best_level, __ATOMIC_ACQUIRE);
    if (level >= 0) return level;
    /* A SIMD level that the development machine could not run (AVX-512) is trusted only once
     * it gives portable's digests here, on this CPU; otherwise the next one down is used. */
    level = CAPSEM_BLAKE3_PORTABLE;
    for (size_t i = 0; i < sizeof PREFERRED / sizeof PREFERRED[0]; i++) {
        if (capsem_blake3_level_self_check(PREFERRED[i])) {
            level = PREFERRED[i];
            break;
        }
    }
    __atomic_store_n(&best_level, level, __ATOMIC_RELEASE);
    return level;
}
