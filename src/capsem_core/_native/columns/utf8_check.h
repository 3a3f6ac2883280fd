/* Whether bytes are valid UTF-8 as RFC 3629 defines it (what Python's strict decoder and
 * Arrow's utf8 type accept): no overlong forms, no surrogates (U+D800..U+DFFF), nothing past
 * U+10FFFF. A text is checked in one piece (a value on overflow pages is gathered first,
 * scan_leaves.h); the state machine would also carry across pieces. ASCII runs are taken
 * eight bytes at a time. */
#ifndef CAPSEM_UTF8_CHECK_H
#define CAPSEM_UTF8_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint8_t need;   /* continuation bytes still owed */
    uint8_t lo, hi; /* the range the next continuation byte must fall in */
    uint8_t bad;
} cs_utf8;

static inline void cs_utf8_start(cs_utf8 *s) {
    s->need = 0;
    s->lo = 0x80;
    s->hi = 0xBF;
    s->bad = 0;
}

static inline void cs_utf8_feed(cs_utf8 *s, const uint8_t *p, size_t n) {
    size_t i = 0;
    if (s->bad) return;
    while (i < n) {
        if (s->need == 0) {
            while (i + 32 <= n) { /* four words at a time: one test for 32 ASCII bytes */
                uint64_t a, b, c, d;
                memcpy(&a, p + i, 8);
                memcpy(&b, p + i + 8, 8);
                memcpy(&c, p + i + 16, 8);
                memcpy(&d, p + i + 24, 8);
                if ((a | b | c | d) & 0x8080808080808080ull) break;
                i += 32;
            }
            while (i + 8 <= n) {
                uint64_t w;
                memcpy(&w, p + i, 8);
                if (w & 0x8080808080808080ull) break;
                i += 8;
            }
            if (i >= n) break;
            uint8_t c = p[i++];
            if (c < 0x80) continue;
            if (c < 0xC2 || c > 0xF4) {
                s->bad = 1;
                return;
            }
            if (c < 0xE0) {
                s->need = 1;
            } else if (c < 0xF0) {
                s->need = 2;
                s->lo = c == 0xE0 ? 0xA0 : 0x80; /* E0: no overlong form */
                s->hi = c == 0xED ? 0x9F : 0xBF; /* ED: no surrogate */
            } else {
                s->need = 3;
                s->lo = c == 0xF0 ? 0x90 : 0x80; /* F0: no overlong form */
                s->hi = c == 0xF4 ? 0x8F : 0xBF; /* F4: nothing past U+10FFFF */
            }
        } else {
            uint8_t c = p[i++];
            if (c < s->lo || c > s->hi) {
                s->bad = 1;
                return;
            }
            s->need--;
            s->lo = 0x80;
            s->hi = 0xBF;
        }
    }
}

/* 1 when everything fed was valid UTF-8 and no character is left open. */
static inline int cs_utf8_valid(const cs_utf8 *s) { return !s->bad && s->need == 0; }

/* 1 when all n bytes are ASCII: one test for a short value (two overlapping loads), a word
 * at a time for a long one. Most of a ledger's texts are short ASCII ids and names. */
static inline int cs_ascii(const uint8_t *p, size_t n) {
    uint64_t acc = 0, w;
    uint32_t a, b;
    if (n >= 8) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            memcpy(&w, p + i, 8);
            acc |= w;
        }
        memcpy(&w, p + n - 8, 8);
        return !((acc | w) & 0x8080808080808080ull);
    }
    if (n >= 4) {
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4);
        return !((a | b) & 0x80808080u);
    }
    for (size_t i = 0; i < n; i++) acc |= p[i];
    return !(acc & 0x80);
}

static inline int cs_utf8_check(const uint8_t *p, size_t n) {
    if (cs_ascii(p, n)) return 1;
    cs_utf8 s;
    cs_utf8_start(&s);
    cs_utf8_feed(&s, p, n);
    return cs_utf8_valid(&s);
}

#endif
