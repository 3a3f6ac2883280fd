/* Body hashes as session.db writes them: "blake3:" followed by 64 lower-case hex digits.
 * Shared by the index scan (a million rows at a time) and the archive reader (one row). */
#include <string.h>

#include <pthread.h>

#include "body_hash.h"

#if !defined(__SSE2__)
/* The byte of every two-character hex pair, indexed by the pair's two bytes (first byte
 * low), or 0x100 when either is not a lower-case hex digit (upper case included: Capsem
 * writes lower case and compares the text, so "ABC..." would not match either). One lookup
 * per output byte; the pairs in use touch a few dozen cache lines of the 128 KiB table. */
static uint16_t hex_pairs[1 << 16];
static pthread_once_t hex_once = PTHREAD_ONCE_INIT;

static int hex_digit(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static void hex_init(void) {
    for (int a = 0; a < 256; a++) {
        for (int b = 0; b < 256; b++) {
            int hi = hex_digit(a), lo = hex_digit(b);
            hex_pairs[a | b << 8] = (uint16_t)(hi < 0 || lo < 0 ? 0x100 : hi << 4 | lo);
        }
    }
}
#endif

#if defined(__SSE2__)
#include <emmintrin.h>

/* 32 hex characters -> 16 bytes; 0 unless every character is 0-9 or a-f (the table's rule).
 * Sixteen characters per compare instead of one lookup per pair. SSE2 is part of x86-64,
 * so there is no run-time dispatch; other machines take the table. */
static int hex32(const unsigned char *h, uint8_t *out) {
    const __m128i zero_m1 = _mm_set1_epi8('0' - 1), nine_p1 = _mm_set1_epi8('9' + 1);
    const __m128i a_m1 = _mm_set1_epi8('a' - 1), f_p1 = _mm_set1_epi8('f' + 1);
    const __m128i ascii0 = _mm_set1_epi8('0'), gap = _mm_set1_epi8('a' - '0' - 10);
    const __m128i low_nibble_pair = _mm_set1_epi16(0x00F0);
    __m128i pairs[2];
    int valid = 0xFFFF;
    for (int k = 0; k < 2; k++) {
        __m128i c = _mm_loadu_si128((const __m128i *)(h + 16 * k));
        /* Signed compares: bytes >= 0x80 are negative and fail both ranges. */
        __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(c, zero_m1), _mm_cmplt_epi8(c, nine_p1));
        __m128i alpha = _mm_and_si128(_mm_cmpgt_epi8(c, a_m1), _mm_cmplt_epi8(c, f_p1));
        valid &= _mm_movemask_epi8(_mm_or_si128(digit, alpha));
        __m128i v = _mm_sub_epi8(_mm_sub_epi8(c, ascii0), _mm_and_si128(alpha, gap));
        /* Each 16-bit lane holds (first digit, second digit): first << 4 | second. */
        pairs[k] = _mm_or_si128(_mm_and_si128(_mm_slli_epi16(v, 4), low_nibble_pair), _mm_srli_epi16(v, 8));
    }
    _mm_storeu_si128((__m128i *)out, _mm_packus_epi16(pairs[0], pairs[1]));
    return valid == 0xFFFF;
}
#endif

int capsem_parse_body_hash(const unsigned char *text, int len, uint8_t out[32]) {
    if (!text || len != 71 || memcmp(text, "blake3:", 7) != 0) return 0;
    const unsigned char *h = text + 7;
#if defined(__SSE2__)
    int ok = hex32(h, out);
    ok &= hex32(h + 32, out + 16);
    return ok;
#else
    pthread_once(&hex_once, hex_init);
    uint16_t bad = 0;
    for (int i = 0; i < 32; i++) {
        uint16_t v = hex_pairs[h[2 * i] | h[2 * i + 1] << 8];
        bad |= v;
        out[i] = (uint8_t)v;
    }
    return !(bad & 0x100);
#endif
}
