/* BLAKE3 with NEON (AArch64 Advanced SIMD): four lanes of 32-bit words per register, the
 * lanes of blake3_lanes.h. NEON is part of every AArch64 CPU (Linux arm64, Apple Silicon),
 * so this file needs no flag and the CPU is not asked; the dispatcher still trusts the level
 * only once it passes its self-check. Blocks that must go one after another use the portable
 * compression: one compression has too little parallelism for four lanes to pay off there. */
#include <arm_neon.h>

#include "blake3_impl.h"

#if !defined(__aarch64__) || !defined(__ARM_NEON) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "blake3_neon.c is for little-endian AArch64 targets (CMake adds it only for them)"
#endif

#define LANES 4
/* A partial group costs as much as a full one; a single input is cheaper one block at a time. */
#define LANES_MIN 2
typedef uint32x4_t vec;

static inline vec v_add(vec a, vec b) { return vaddq_u32(a, b); }
static inline vec v_xor(vec a, vec b) { return veorq_u32(a, b); }
static inline vec v_set1(uint32_t w) { return vdupq_n_u32(w); }
/* Byte loads: the pointers (input blocks, word arrays) need not be 16-byte aligned, and the
 * words are little-endian in memory as BLAKE3 reads them. */
static inline vec v_load(const void *p) { return vreinterpretq_u32_u8(vld1q_u8((const uint8_t *)p)); }
static inline void v_store(void *p, vec v) { vst1q_u8((uint8_t *)p, vreinterpretq_u8_u32(v)); }
/* Rotation by 16 swaps the halves of each word; the others shift left, then shift right and
 * insert (sri) the bits that fell off. */
static inline vec v_rot16(vec x) { return vreinterpretq_u32_u16(vrev32q_u16(vreinterpretq_u16_u32(x))); }
static inline vec v_rot12(vec x) { return vsriq_n_u32(vshlq_n_u32(x, 20), x, 12); }
static inline vec v_rot8(vec x) { return vsriq_n_u32(vshlq_n_u32(x, 24), x, 8); }
static inline vec v_rot7(vec x) { return vsriq_n_u32(vshlq_n_u32(x, 25), x, 7); }

/* r[j] holds 4 words of lane j; afterwards r[w] holds word w of every lane. */
static inline void transpose4(vec r[4]) {
    uint32x4x2_t t01 = vtrnq_u32(r[0], r[1]); /* val[0]: words 0 2 of lanes 0 1 interleaved; val[1]: 1 3 */
    uint32x4x2_t t23 = vtrnq_u32(r[2], r[3]);
    r[0] = vcombine_u32(vget_low_u32(t01.val[0]), vget_low_u32(t23.val[0]));
    r[1] = vcombine_u32(vget_low_u32(t01.val[1]), vget_low_u32(t23.val[1]));
    r[2] = vcombine_u32(vget_high_u32(t01.val[0]), vget_high_u32(t23.val[0]));
    r[3] = vcombine_u32(vget_high_u32(t01.val[1]), vget_high_u32(t23.val[1]));
}

/* load_msg and store_cvs come from transpose4 (blake3_lanes.h). */
#define LANES_FROM_TRANSPOSE4
#define LANES_KERNELS capsem_blake3_neon_kernels
#include "blake3_lanes.h"

const capsem_blake3_kernels capsem_blake3_neon_kernels = {
    .name = "neon",
    .compress = capsem_blake3_compress_portable,
    .hash_strided = lanes_hash_strided,
    .hash_short = lanes_hash_short,
};
