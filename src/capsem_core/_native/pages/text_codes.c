/* Text codes (see text_codes.h): open addressing over 32-bit entry numbers, entries in one
 * array (short texts inside them), longer texts in chunks of an arena that never moves them. */
#include <stdlib.h>
#include <string.h>

#include "big_alloc.h"
#include "text_codes.h"

#define ARENA_CHUNK (1u << 20)
#define INLINE 32u

/* A slot holds an entry's code and the low half of its hash (which places it), so most
 * probes that do not match never touch the entry, and growing never reads one. */
typedef struct {
    uint32_t code; /* 0: empty */
    uint32_t low;
} slot;

/* A text of at most INLINE bytes is kept in its entry (one memory access to compare it);
 * a longer one in the arena. */
typedef struct {
    uint32_t len;
    union {
        uint8_t bytes[INLINE];
        const uint8_t *far;
    } text;
} entry;

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    uint8_t bytes[];
} chunk;

struct capsem_codes {
    uint64_t seed;
    slot *slots;
    uint32_t mask;
    entry *entries; /* [count]; code = index + 1 */
    uint32_t count, cap;
    chunk *arena;
};

static inline uint64_t load8(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* A keyed multiply-mix over 8-byte words. Speed matters more than strength: a ledger that
 * finds collisions only meets the probe bound, never a wrong code. */
static inline uint64_t text_hash(uint64_t seed, const uint8_t *p, uint32_t len) {
    const uint64_t m = 0x9E3779B97F4A7C15ull;
    uint64_t h = seed ^ ((uint64_t)len * m);
    const uint8_t *end = p + len;
    while (end - p > 8) {
        h = (h ^ load8(p)) * m;
        h ^= h >> 29;
        p += 8;
    }
    /* The last 1 to 8 bytes: one load ending at the text's end (it may overlap bytes
     * already mixed in, which is harmless; the length is mixed in too). */
    uint64_t tail = 0;
    if (len >= 8) {
        tail = load8(end - 8);
    } else {
        for (const uint8_t *q = p; q < end; q++) tail = (tail << 8) | *q;
    }
    h = (h ^ tail ^ ((uint64_t)len << 56)) * m;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    return h;
}

/* Byte equality of two texts of `len` bytes, without a call for the short ones. */
static inline int same(const uint8_t *a, const uint8_t *b, uint32_t len) {
    while (len >= 8) {
        if (load8(a) != load8(b)) return 0;
        a += 8;
        b += 8;
        len -= 8;
    }
    for (uint32_t i = 0; i < len; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static inline const uint8_t *entry_text(const entry *e) { return e->len <= INLINE ? e->text.bytes : e->text.far; }

capsem_codes *capsem_codes_new(uint64_t seed) {
    capsem_codes *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->seed = seed;
    t->mask = 4095;
    t->slots = capsem_big_alloc_table(((size_t)t->mask + 1) * sizeof *t->slots);
    t->cap = 2048;
    t->entries = capsem_big_alloc_table((size_t)t->cap * sizeof *t->entries);
    if (!t->slots || !t->entries) {
        capsem_codes_free(t);
        return NULL;
    }
    return t;
}

void capsem_codes_free(capsem_codes *t) {
    if (!t) return;
    chunk *c = t->arena;
    while (c) {
        chunk *next = c->next;
        free(c);
        c = next;
    }
    capsem_big_free(t->slots, ((size_t)t->mask + 1) * sizeof *t->slots);
    capsem_big_free(t->entries, (size_t)t->cap * sizeof *t->entries);
    free(t);
}

uint32_t capsem_codes_count(const capsem_codes *t) { return t->count; }

const uint8_t *capsem_codes_text(const capsem_codes *t, uint32_t code, uint32_t *len) {
    if (code == 0 || code > t->count) return NULL;
    const entry *e = &t->entries[code - 1];
    *len = e->len;
    return entry_text(e);
}

static const uint8_t *keep(capsem_codes *t, const uint8_t *p, uint32_t len) {
    chunk *c = t->arena;
    if (!c || c->cap - c->used < len) {
        size_t cap = len > ARENA_CHUNK ? len : ARENA_CHUNK;
        chunk *n = malloc(sizeof *n + cap);
        if (!n) return NULL;
        n->next = c;
        n->used = 0;
        n->cap = cap;
        t->arena = c = n;
    }
    uint8_t *at = c->bytes + c->used;
    memcpy(at, p, len);
    c->used += len;
    return at;
}

/* Double the slots (kept at most half full) and place every code again. */
static int grow(capsem_codes *t) {
    uint32_t mask = t->mask * 2 + 1;
    slot *slots = capsem_big_alloc_table(((size_t)mask + 1) * sizeof *slots);
    if (!slots) return -1;
    for (uint32_t i = 0; i <= t->mask; i++) {
        slot old = t->slots[i];
        if (!old.code) continue;
        uint32_t s = old.low & mask;
        while (slots[s].code) s = (s + 1) & mask;
        slots[s] = old;
    }
    capsem_big_free(t->slots, ((size_t)t->mask + 1) * sizeof *t->slots);
    t->slots = slots;
    t->mask = mask;
    return 0;
}

uint64_t capsem_codes_hash(const capsem_codes *t, const uint8_t *p, uint32_t len) {
    return text_hash(t->seed, p, len);
}

void capsem_codes_prefetch(const capsem_codes *t, uint64_t hash) {
    __builtin_prefetch(&t->slots[(uint32_t)hash & t->mask]);
}

void capsem_codes_prefetch_entry(const capsem_codes *t, uint64_t hash) {
    /* The entry a hit compares, when the slot holds one (it may have moved by the time of
     * the add: this only asks for memory). */
    const slot *x = &t->slots[(uint32_t)hash & t->mask];
    if (x->code && x->code <= t->count) __builtin_prefetch(&t->entries[x->code - 1]);
}

int64_t capsem_codes_add_hashed(capsem_codes *t, uint64_t h, const uint8_t *p, uint32_t len) {
    uint32_t low = (uint32_t)h;
    uint32_t s = low & t->mask;
    for (unsigned probe = 0;; probe++) {
        slot x = t->slots[s];
        if (!x.code) break;
        if (x.low == low) {
            const entry *e = &t->entries[x.code - 1];
            if (e->len == len && same(entry_text(e), p, len)) return x.code;
        }
        if (probe >= CAPSEM_CODES_MAX_PROBE) return -1;
        s = (s + 1) & t->mask;
    }
    if (t->count >= CAPSEM_CODES_MAX) return -1;
    if (t->count == t->cap) {
        uint32_t cap = t->cap * 2;
        entry *grown = capsem_big_realloc(t->entries, (size_t)t->cap * sizeof *grown, (size_t)cap * sizeof *grown);
        if (!grown) return 0;
        capsem_big_offer_huge(grown, (size_t)cap * sizeof *grown);   /* entries are read at random */
        t->entries = grown;
        t->cap = cap;
    }
    entry *e = &t->entries[t->count];
    e->len = len;
    if (len <= INLINE) {
        memcpy(e->text.bytes, p, len);
    } else {
        const uint8_t *kept = keep(t, p, len);
        if (!kept) return 0;
        e->text.far = kept;
    }
    t->slots[s].code = ++t->count;
    t->slots[s].low = low;
    if ((uint64_t)t->count * 2 > t->mask && grow(t) != 0) return 0;
    return t->count;
}

uint32_t capsem_codes_find(const capsem_codes *t, const uint8_t *p, uint32_t len) {
    uint64_t h = text_hash(t->seed, p, len);
    uint32_t low = (uint32_t)h;
    uint32_t s = low & t->mask;
    for (unsigned probe = 0; probe <= CAPSEM_CODES_MAX_PROBE; probe++) {
        slot x = t->slots[s];
        if (!x.code) return 0;
        if (x.low == low) {
            const entry *e = &t->entries[x.code - 1];
            if (e->len == len && same(entry_text(e), p, len)) return x.code;
        }
        s = (s + 1) & t->mask;
    }
    return 0;
}
