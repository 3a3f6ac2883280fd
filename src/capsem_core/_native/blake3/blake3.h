/* BLAKE3 (hash mode and keyed mode, extendable output), written for capsem-core from
 * the published BLAKE3 specification. Used to check segment and body digests. */
#ifndef CAPSEM_BLAKE3_H
#define CAPSEM_BLAKE3_H

#include <stddef.h>
#include <stdint.h>

#define CAPSEM_BLAKE3_OUT_LEN 32
#define CAPSEM_BLAKE3_KEY_LEN 32
#define CAPSEM_BLAKE3_BLOCK_LEN 64
#define CAPSEM_BLAKE3_CHUNK_LEN 1024
#define CAPSEM_BLAKE3_MAX_DEPTH 54

typedef struct {
    uint32_t cv[8];
    uint64_t chunk_counter;
    uint8_t buf[CAPSEM_BLAKE3_BLOCK_LEN];
    uint8_t buf_len;
    uint8_t blocks_compressed;
    uint8_t flags;
} capsem_blake3_chunk_state;

typedef struct {
    uint32_t key[8];
    capsem_blake3_chunk_state chunk;
    uint8_t cv_stack_len;
    uint8_t cv_stack[(CAPSEM_BLAKE3_MAX_DEPTH + 1) * CAPSEM_BLAKE3_OUT_LEN];
} capsem_blake3_hasher;

void capsem_blake3_hasher_init(capsem_blake3_hasher *self);
void capsem_blake3_hasher_init_keyed(capsem_blake3_hasher *self, const uint8_t key[CAPSEM_BLAKE3_KEY_LEN]);
void capsem_blake3_hasher_update(capsem_blake3_hasher *self, const void *input, size_t input_len);
/* Writes out_len bytes of output (any length: extendable output). */
void capsem_blake3_hasher_finalize(const capsem_blake3_hasher *self, uint8_t *out, size_t out_len);

/* One-shot 32-byte digest of a buffer. Safe to call without the GIL. */
void capsem_blake3_hash(const void *input, size_t input_len, uint8_t out[CAPSEM_BLAKE3_OUT_LEN]);

/* Hashes n independent inputs: input i is base[offsets[i] .. offsets[i] + lengths[i]),
 * and its 32-byte digest goes to out + 32 * i. Safe to call without the GIL. */
void capsem_blake3_hash_many(const uint8_t *base, const uint64_t *offsets, const uint64_t *lengths,
                             size_t n, uint8_t *out);

/* SIMD levels. The best one the CPU supports is chosen on first use; every level gives the
 * same bytes, so switching only changes speed. */
#define CAPSEM_BLAKE3_PORTABLE 0
#define CAPSEM_BLAKE3_SSE41 1
#define CAPSEM_BLAKE3_AVX2 2
#define CAPSEM_BLAKE3_AVX512 3
/* The avx512 level's code compiled for AVX2 (tests): runs wherever AVX2 does, never chosen
 * by the dispatcher itself. */
#define CAPSEM_BLAKE3_AVX512_ON_AVX2 4
/* arm64 only (every AArch64 CPU has NEON). */
#define CAPSEM_BLAKE3_NEON 5
#define CAPSEM_BLAKE3_LEVELS 6

/* The level in use. */
int capsem_blake3_level(void);
/* The level chosen on first use: the fastest this CPU supports that passes
 * capsem_blake3_level_self_check (neon on arm64; avx512, avx2, sse41 on x86-64, in that
 * order; else portable), computed once. */
int capsem_blake3_max_level(void);
/* 1 if this CPU (and its OS) can run the level, else 0. */
int capsem_blake3_level_supported(int level);
/* 1 if the level runs here and gives the portable level's digests on a fixed probe (one-shot
 * lengths around block, chunk and lane edges, and one many-input call), else 0. The
 * automatic choice only takes a level that passes. */
int capsem_blake3_level_self_check(int level);
/* Forces a level (tests and benchmarks). Returns 0, or -1 if the level is unknown or the CPU
 * lacks it (nothing changes then). Calls already running finish on the level they began with. */
int capsem_blake3_set_level(int level);
/* "portable", "sse41", "avx2", "avx512", "avx512-on-avx2", "neon"; NULL for an unknown level. */
const char *capsem_blake3_level_name(int level);

#endif
