/* zlib's acceptance rules for a raw-deflate stream, walked code by code without output.
 *
 * libdeflate (the fast path, archive_inflate.c) decodes some streams zlib refuses: more
 * than 286 literal/length or 30 distance codes in a dynamic header, literal/length symbols
 * 286-287 and distance symbols 30-31 (which deflate leaves undefined and libdeflate gives
 * meanings), and a few code-length sets zlib will not build a table from. No deflate writer
 * emits them, but a forged payload can, with hashes written to libdeflate's output; the
 * streaming cursor (zlib) refuses it, so the fast path must too. This walk runs after
 * libdeflate succeeded and rejects any stream breaking a rule of zlib's inflate (inflate.c,
 * inftrees.c): the stream is then read by the cursor, which names the failing segment.
 *
 * Speed: a walk needs only how many bits each literal or match takes: one table lookup
 * gives a literal/length code's bits with its extra bits, one more a distance code's with
 * its extra bits. Codes longer than a table are decoded bit by bit from the code-length
 * counts (puff's canonical decode), which also finds the codes an incomplete set leaves
 * unassigned. Stored blocks are skipped by their length. This costs about what libdeflate's
 * own decode does (the same chain of dependent lookups, less the copies).
 *
 * Bounds: the bit buffer loads 8 bytes at a time only while 8 remain, then byte by byte,
 * then zeros past the end (counted); a stream that consumes one of those zeros is refused.
 * Every step consumes at least one bit, so the walk ends within the input's bits. */
#include <string.h>
#include <pthread.h>

#include "archive_deflate_rules.h"

#define MAXBITS 15
#define LIT_BITS 10          /* tables rebuilt per dynamic block: small, as libdeflate's */
#define DIST_BITS 9
#define CODE_BITS 7          /* code-length codes are at most 7 bits: each fits its table */
#define NLEN_MAX 286         /* zlib: "too many length or distance symbols" */
#define NDIST_MAX 30
#define FIXED_NLEN 288       /* the fixed code assigns 286-287 and 30-31; using one is invalid */
#define FIXED_NDIST 32

/* A table entry: bits 0-4 how many bits to drop, bits 5-7 the kind, bits 8-15 the symbol
 * (code-length codes only); 0 where the code is longer than the table or unassigned.
 * K_LIT: a literal; K_LEN: a length code and its extra bits, a distance next; K_DIST: a
 * distance code and its extra bits. */
enum { K_SYM = 1, K_LIT, K_LEN, K_END, K_DIST, K_BAD };
enum { T_CODES, T_LIT, T_DIST };
#define ENTRY(kind, bits) ((uint16_t)((kind) << 5 | (bits)))
#define KIND(e) ((unsigned)(e) >> 5 & 7u)
#define BITS(e) ((unsigned)(e) & 31u)

/* A canonical Huffman code: counts per length, symbols in code order, entries by the low
 * input bits (LIT_BITS, DIST_BITS or CODE_BITS of them, by type). */
typedef struct {
    uint16_t count[MAXBITS + 1];
    uint16_t symbol[FIXED_NLEN];
    uint16_t fast[1u << LIT_BITS];
    int type;
} huff;

typedef struct {
    const uint8_t *start, *in, *end;
    uint64_t buf;
    unsigned cnt; /* valid bits in buf: at least 56 after a refill, each step takes <= 48 */
    size_t pad;   /* zero bytes loaded past the end */
} bitin;

static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6,
                                       7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static unsigned table_bits(int type) { return type == T_LIT ? LIT_BITS : type == T_DIST ? DIST_BITS : CODE_BITS; }

/* The entry of one symbol whose code is `len` bits. */
static uint16_t entry(int type, unsigned sym, unsigned len) {
    if (type == T_CODES) return (uint16_t)(sym << 8 | K_SYM << 5 | len);
    if (type == T_DIST) return sym < NDIST_MAX ? ENTRY(K_DIST, len + dist_extra[sym]) : ENTRY(K_BAD, len);
    if (sym < 256) return ENTRY(K_LIT, len);
    if (sym == 256) return ENTRY(K_END, len);
    return sym < NLEN_MAX ? ENTRY(K_LEN, len + len_extra[sym - 257]) : ENTRY(K_BAD, len);
}

static inline uint64_t load_le64(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

/* 0 once a loaded zero past the end has been consumed: the stream is truncated. The bits
 * above cnt are the stream's own next bits (or zero), so OR-ing them in again is harmless. */
static inline int refill(bitin *b) {
    if (b->end - b->in >= 8) {
        b->buf |= load_le64(b->in) << b->cnt;
        b->in += (63 - b->cnt) >> 3;
        b->cnt |= 56;
        return 1;
    }
    if (b->pad * 8 > b->cnt) return 0;
    while (b->cnt < 56) {
        uint64_t byte = 0;
        if (b->in < b->end) byte = *b->in++;
        else b->pad++;
        b->buf |= byte << b->cnt;
        b->cnt += 8;
    }
    return 1;
}

static inline void drop(bitin *b, unsigned n) {
    b->buf >>= n;
    b->cnt -= n;
}

/* The code from lengths[0, n) under zlib's inftrees.c rules: not over-subscribed; complete,
 * except that a literal/length or distance code may be empty or a single 1-bit code; the
 * code-length code must be complete. */
static int build(huff *h, const uint8_t *lengths, unsigned n, int type) {
    uint16_t offs[MAXBITS + 2];
    unsigned bits = table_bits(type);
    memset(h->count, 0, sizeof h->count);
    for (unsigned s = 0; s < n; s++) h->count[lengths[s]]++;
    h->count[0] = 0;
    h->type = type;
    memset(h->fast, 0, sizeof h->fast[0] << bits);
    unsigned max = MAXBITS;
    while (max > 0 && h->count[max] == 0) max--;
    if (max == 0) return type != T_CODES; /* every code of an empty set is invalid */
    int left = 1;
    for (unsigned len = 1; len <= MAXBITS; len++) {
        left = (left << 1) - h->count[len];
        if (left < 0) return 0;
    }
    if (left > 0 && (type == T_CODES || max != 1)) return 0;
    offs[1] = 0;
    for (unsigned len = 1; len <= MAXBITS; len++) offs[len + 1] = (uint16_t)(offs[len] + h->count[len]);
    for (unsigned s = 0; s < n; s++) {
        if (lengths[s]) h->symbol[offs[lengths[s]]++] = (uint16_t)s;
    }
    /* Canonical codes in order, each written bit-reversed (deflate sends codes MSB first)
     * into every table slot whose low `len` bits it is. */
    unsigned code = 0, i = 0;
    for (unsigned len = 1; len <= bits; len++) {
        for (unsigned k = 0; k < h->count[len]; k++, i++, code++) {
            unsigned rev = 0;
            for (unsigned j = 0; j < len; j++) rev |= ((code >> j) & 1u) << (len - 1 - j);
            uint16_t e = entry(type, h->symbol[i], len);
            for (unsigned slot = rev; slot < (1u << bits); slot += 1u << len) h->fast[slot] = e;
        }
        code <<= 1;
    }
    return 1;
}

/* The entry of a code longer than the table, decoded bit by bit (puff's canonical decode);
 * K_BAD for a code the set does not assign. Reads at most 15 bits of `bits`. */
static uint16_t slow_entry(const huff *h, uint64_t bits) {
    int code = 0, first = 0, index = 0;
    for (unsigned len = 1; len <= MAXBITS; len++) {
        code |= (int)(bits & 1);
        bits >>= 1;
        int count = h->count[len];
        if (code - count < first) return entry(h->type, h->symbol[index + (code - first)], len);
        index += count;
        first = (first + count) << 1;
        code <<= 1;
    }
    return ENTRY(K_BAD, 0);
}

/* A Huffman block's codes through its end-of-block, the bit state in locals: one refill a
 * round, a literal or a match (at most 20 + 28 bits). */
static int walk_codes(bitin *b, const huff *lit, const huff *dist) {
    uint64_t buf = b->buf;
    unsigned cnt = b->cnt;
    const uint8_t *p = b->in, *end = b->end;
    for (;;) {
        if (end - p >= 8) {
            buf |= load_le64(p) << cnt;
            p += (63 - cnt) >> 3;
            cnt |= 56;
        } else {
            b->buf = buf, b->cnt = cnt, b->in = p;
            if (!refill(b)) return 0;
            buf = b->buf, cnt = b->cnt, p = b->in;
        }
        uint16_t e = lit->fast[buf & ((1u << LIT_BITS) - 1)];
        if (KIND(e) == K_LIT) {
            buf >>= BITS(e);
            cnt -= BITS(e);
            continue;
        }
        if (!e) e = slow_entry(lit, buf);
        buf >>= BITS(e);
        cnt -= BITS(e);
        if (KIND(e) == K_LIT) continue;
        if (KIND(e) != K_LEN) {
            b->buf = buf, b->cnt = cnt, b->in = p;
            return KIND(e) == K_END; /* else "invalid literal/length code" */
        }
        e = dist->fast[buf & ((1u << DIST_BITS) - 1)];
        if (!e) e = slow_entry(dist, buf);
        if (KIND(e) != K_DIST) return 0; /* "invalid distance code" */
        buf >>= BITS(e);
        cnt -= BITS(e);
    }
}

/* A dynamic block's header (HLIT, HDIST, HCLEN, the code lengths) into lit and dist. */
static int read_dynamic(bitin *b, huff *lit, huff *dist) {
    static const uint8_t order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
    uint8_t lengths[NLEN_MAX + NDIST_MAX];
    uint8_t code_lengths[19] = {0};
    if (!refill(b)) return 0;
    unsigned nlen = (unsigned)(b->buf & 31) + 257, ndist = (unsigned)(b->buf >> 5 & 31) + 1;
    unsigned ncode = (unsigned)(b->buf >> 10 & 15) + 4;
    drop(b, 14);
    if (nlen > NLEN_MAX || ndist > NDIST_MAX) return 0;
    for (unsigned k = 0; k < ncode; k++) {
        if (!refill(b)) return 0;
        code_lengths[order[k]] = (uint8_t)(b->buf & 7);
        drop(b, 3);
    }
    /* lit's storage holds the code-length code until the lengths are read. */
    if (!build(lit, code_lengths, 19, T_CODES)) return 0; /* "invalid code lengths set" */
    unsigned have = 0, total = nlen + ndist;
    while (have < total) {
        if (!refill(b)) return 0;
        uint16_t e = lit->fast[b->buf & ((1u << CODE_BITS) - 1)];
        if (!e) return 0; /* unreachable: the code-length code is complete */
        drop(b, BITS(e));
        unsigned sym = e >> 8;
        if (sym < 16) {
            lengths[have++] = (uint8_t)sym;
            continue;
        }
        unsigned rep;
        uint8_t value = 0;
        if (sym == 16) {
            if (have == 0) return 0; /* "invalid bit length repeat" */
            value = lengths[have - 1];
            rep = 3 + (unsigned)(b->buf & 3);
            drop(b, 2);
        } else if (sym == 17) {
            rep = 3 + (unsigned)(b->buf & 7);
            drop(b, 3);
        } else {
            rep = 11 + (unsigned)(b->buf & 127);
            drop(b, 7);
        }
        if (rep > total - have) return 0; /* "invalid bit length repeat" */
        memset(lengths + have, value, rep);
        have += rep;
    }
    if (lengths[256] == 0) return 0; /* "invalid code -- missing end-of-block" */
    return build(lit, lengths, nlen, T_LIT) && build(dist, lengths + nlen, ndist, T_DIST);
}

static huff fixed_lit, fixed_dist;
static pthread_once_t fixed_once = PTHREAD_ONCE_INIT;

static void build_fixed(void) {
    uint8_t lengths[FIXED_NLEN];
    memset(lengths, 8, 144);
    memset(lengths + 144, 9, 112);
    memset(lengths + 256, 7, 24);
    memset(lengths + 280, 8, 8);
    build(&fixed_lit, lengths, FIXED_NLEN, T_LIT);
    memset(lengths, 5, FIXED_NDIST);
    build(&fixed_dist, lengths, FIXED_NDIST, T_DIST);
}

int capsem_deflate_zlib_accepts(const uint8_t *in, size_t len) {
    if (pthread_once(&fixed_once, build_fixed) != 0) return 0;
    huff lit, dist;
    bitin b = {in, in, in + len, 0, 0, 0};
    int final = 0;
    while (!final) {
        if (!refill(&b)) return 0;
        final = (int)(b.buf & 1);
        unsigned type = (unsigned)(b.buf >> 1 & 3);
        drop(&b, 3);
        if (type == 0) {
            /* To the byte boundary; the next unread byte is what was loaded less what the
             * buffer still holds. */
            drop(&b, b.cnt & 7u);
            size_t next = (size_t)(b.in - b.start) + b.pad - b.cnt / 8;
            if (next > len || len - next < 4) return 0;
            unsigned stored = in[next] | (unsigned)in[next + 1] << 8;
            unsigned check = in[next + 2] | (unsigned)in[next + 3] << 8;
            if (stored != (~check & 0xFFFFu)) return 0; /* "invalid stored block lengths" */
            if (len - next - 4 < stored) return 0;
            b.in = in + next + 4 + stored;
            b.buf = 0;
            b.cnt = 0;
            b.pad = 0;
        } else if (type == 1) {
            if (!walk_codes(&b, &fixed_lit, &fixed_dist)) return 0;
        } else if (type == 2) {
            if (!read_dynamic(&b, &lit, &dist) || !walk_codes(&b, &lit, &dist)) return 0;
        } else {
            return 0; /* "invalid block type" */
        }
    }
    return b.pad * 8 <= b.cnt;
}
