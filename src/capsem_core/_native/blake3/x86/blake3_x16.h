/* BLAKE3 sixteen lanes at a time, written with the compiler's generic vectors (16 x 32-bit
 * words, 64 bytes; GCC and clang both have them) rather than intrinsics. Included by two
 * files that differ only in the instruction set they are compiled for:
 *
 *   blake3_avx512.c        -mavx512f -mavx512vl: one zmm register per vector, vprord for
 *                          the rotations, vpermt2d for the transposes (the "avx512" level);
 *   blake3_avx512_avx2.c   -mavx2: the compiler splits every vector operation in two; the same C,
 *                          so the avx512 level's code runs, and is tested, on any AVX2 CPU
 *                          (the "avx512-on-avx2" level, never chosen automatically).
 *
 * The including file defines X16_KERNELS (the table's symbol) and X16_NAME. */
#include <string.h>

#include "blake3_impl.h"

#define LANES 16
/* Fewer inputs go through rows. Set by analogy with AVX2's 3 of 8 lanes, not measured:
 * no AVX-512 CPU was at hand. */
#define LANES_MIN 4
typedef uint32_t vec __attribute__((vector_size(64)));
typedef int32_t vec_index __attribute__((vector_size(64)));

static inline vec v_add(vec a, vec b) { return a + b; }
static inline vec v_xor(vec a, vec b) { return a ^ b; }
static inline vec v_set1(uint32_t w) { return (vec){w, w, w, w, w, w, w, w, w, w, w, w, w, w, w, w}; }
static inline vec v_load(const void *p) {
    vec v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void v_store(void *p, vec v) { memcpy(p, &v, sizeof v); }
/* GCC and clang turn (x >> n) | (x << (32 - n)) into vprord where AVX-512 has it. */
static inline vec v_rot16(vec x) { return (x >> 16) | (x << 16); }
static inline vec v_rot12(vec x) { return (x >> 12) | (x << 20); }
static inline vec v_rot8(vec x) { return (x >> 8) | (x << 24); }
static inline vec v_rot7(vec x) { return (x >> 7) | (x << 25); }

/* One stage of the 16 x 16 transpose: rows i and i + d (i with bit d clear) swap their
 * off-diagonal d-wide column blocks. After d = 8, 4, 2, 1 row w holds column w. Indices
 * below 16 pick from the first row, 16 and up from the second (one vpermt2d each). GCC
 * takes the indices as a vector, clang as constant arguments: one list serves both. */
#if defined(__clang__)
#define X16_SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define X16_SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (vec_index){__VA_ARGS__})
#endif
#define X16_LO_8 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define X16_HI_8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define X16_LO_4 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define X16_HI_4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define X16_LO_2 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define X16_HI_2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define X16_LO_1 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define X16_HI_1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#define X16_STAGE(r, d, LO, HI)                          \
    for (int i = 0; i < 16; i++) {                       \
        if (i & (d)) continue;                           \
        vec lo = X16_SHUFFLE(r[i], r[i + (d)], LO);      \
        vec hi = X16_SHUFFLE(r[i], r[i + (d)], HI);      \
        r[i] = lo;                                       \
        r[i + (d)] = hi;                                 \
    }

static inline void transpose16(vec r[16]) {
    X16_STAGE(r, 8, X16_LO_8, X16_HI_8)
    X16_STAGE(r, 4, X16_LO_4, X16_HI_4)
    X16_STAGE(r, 2, X16_LO_2, X16_HI_2)
    X16_STAGE(r, 1, X16_LO_1, X16_HI_1)
}

static inline void load_msg(const uint8_t *const blocks[LANES], size_t off, vec m[16]) {
    for (int j = 0; j < LANES; j++) m[j] = v_load(blocks[j] + off);
    transpose16(m);
}

static inline void store_cvs(const vec cv[8], uint8_t *out) {
    for (int w = 0; w < 8; w++) {
        for (int j = 0; j < LANES; j++) capsem_blake3_store32(out + 32 * j + 4 * w, cv[w][j]);
    }
}

#define LANES_KERNELS X16_KERNELS
#include "blake3_lanes.h"
#include "blake3_rows.h"

const capsem_blake3_kernels X16_KERNELS = {
    .name = X16_NAME,
    .compress = row_compress,
    .hash_strided = lanes_hash_strided,
    .hash_short = lanes_hash_short,
};
