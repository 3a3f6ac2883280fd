/* One row of a records scan (page_records.h): the scan's state, the record header walked to
 * each chosen column, and that column's value written at the row's index (integers, event
 * ids, digests, texts end to end, texts of CODE columns coded a batch at a time). Included by
 * page_records.c alone, whose leaf loop calls read_row for every cell: keeping these in its
 * translation unit lets the compiler inline them there as before the file was split. */
#ifndef CAPSEM_PAGE_RECORD_ROW_H
#define CAPSEM_PAGE_RECORD_ROW_H

#include <stdint.h>
#include <string.h>

#include "big_alloc.h"
#include "body_hash.h"
#include "page_payload.h"
#include "page_records.h"

#define MAX_PREFETCH_LINES 8u
#define FIRST_ROWS 4096u
/* A record header longer than this is not one a ledger's tables write (each column's serial
 * type takes at most 9 bytes). */
#define MAX_HEADER 4096u
/* The previous value of a text column, kept to skip the codes for runs of equal texts. */
#define LAST_TEXT 64u
/* Texts coded in one batch (about a leaf page's), so the memory their codes probe is asked
 * for before it is needed: a ledger's ids are too many for the codes to stay in cache. */
#define PENDING 2048u
#define ARENA (64u * 1024u)

typedef struct {
    uint32_t len, have;
    int64_t code;
    uint8_t bytes[LAST_TEXT];
} last_text;

/* A text waiting for its code (see flush). */
typedef struct {
    uint64_t hash;
    const uint8_t *p;
    uint32_t len;
    uint32_t col;
    uint64_t row;
    int32_t same; /* an earlier entry of the batch with the same text, or -1 */
    int64_t code;
} pending;

typedef struct {
    capsem_rec_file f;   /* f.pages: b-tree and overflow pages read: at most page_count, or the tree loops */
    capsem_rec_column *cols;
    size_t ncols;
    uint64_t rows, cap;
    uint32_t steps;
    uint32_t lines;      /* cache lines of a cell the last row's values spanned (prefetch_cell) */
    last_text last[CAPSEM_REC_MAX_COLUMNS];
    int32_t prev[CAPSEM_REC_MAX_COLUMNS]; /* the batch's last entry of each column, or -1 */
    size_t npend, arena_used;
    pending pend[PENDING];
    uint8_t arena[ARENA];
    uint8_t header[MAX_HEADER];
    uint8_t text[CAPSEM_REC_MAX_TEXT];
} scan;

static int grow_rows(scan *s) {
    uint64_t cap = s->cap ? s->cap * 2 : FIRST_ROWS;
    for (size_t i = 0; i < s->ncols; i++) {
        capsem_rec_column *c = &s->cols[i];
        int64_t *v = capsem_big_realloc(c->values, c->capacity * sizeof *v, cap * sizeof *v);
        if (!v) return CAPSEM_REC_NO_MEMORY;
        c->values = v;
        c->capacity = cap;
        if (c->kind == CAPSEM_REC_DIGEST) {
            uint8_t *b = capsem_big_realloc(c->bytes, c->bytes_cap, cap * 32);
            if (!b) return CAPSEM_REC_NO_MEMORY;
            c->bytes = b;
            c->bytes_cap = cap * 32;
        }
    }
    s->cap = cap;
    return CAPSEM_REC_OK;
}

/* Append [off, off + len) of the payload to a TEXT column's bytes: values[row] its start. */
static int append_text(scan *s, capsem_rec_column *c, payload *p, uint32_t off, uint32_t len) {
    c->values[s->rows] = (int64_t)c->nbytes;
    if (len == 0) return CAPSEM_REC_OK; /* no bytes to read, and maybe no buffer yet */
    if (c->bytes_cap - c->nbytes < len) {
        uint64_t want = c->bytes_cap ? c->bytes_cap : ARENA;
        while (want - c->nbytes < len) want *= 2; /* len < 2^31: a few doublings at most */
        uint8_t *b = capsem_big_realloc(c->bytes, c->bytes_cap, want);
        if (!b) return CAPSEM_REC_NO_MEMORY;
        c->bytes = b;
        c->bytes_cap = want;
    }
    uint8_t *dst = c->bytes + c->nbytes;
    const uint8_t *src = capsem_payload_bytes(&s->f, p, off, len, dst);
    if (!src) return CAPSEM_REC_UNREADABLE;
    if (src != dst) memcpy(dst, src, len);
    c->nbytes += len;
    return CAPSEM_REC_OK;
}

/* Each byte's value as a lower-case hex digit, 0x10 for any other byte. */
static const uint8_t HEX_DIGIT[256] = {
#define X16 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10
    X16, X16, X16,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, /* 0x30: the digits */
    X16, X16,
    0x10, 10, 11, 12, 13, 14, 15, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, /* 0x60: a-f */
    X16, X16, X16, X16, X16, X16, X16, X16, X16,
#undef X16
};

#define HEX_LEN 12u

/* A HEX column's value for serial type t of `size` bytes at `off` (see page_records.h). The
 * digits are read without a branch each: ids are random, a branch on digit or letter would be
 * mispredicted half the time. */
static int hex_value(scan *s, capsem_rec_column *c, payload *p, uint64_t t, uint32_t off, uint32_t size) {
    int64_t *out = &c->values[s->rows];
    *out = CAPSEM_REC_NULL;
    if (t < 13 || !(t & 1) || size != HEX_LEN) {
        c->odd++;
        return CAPSEM_REC_OK;
    }
    uint8_t text[HEX_LEN];
    const uint8_t *b = capsem_payload_bytes(&s->f, p, off, size, text);
    if (!b) return CAPSEM_REC_UNREADABLE;
    uint64_t v = 0;
    unsigned bad = 0;
    for (unsigned k = 0; k < HEX_LEN; k++) {
        unsigned d = HEX_DIGIT[b[k]];
        bad |= d;
        v = (v << 4) | (d & 0xF);
    }
    if (bad & 0x10)
        c->odd++;
    else
        *out = (int64_t)v;
    return CAPSEM_REC_OK;
}

/* A DIGEST column's value for serial type t of `size` bytes at `off` (see page_records.h). */
static int digest_value(scan *s, capsem_rec_column *c, payload *p, uint64_t t, uint32_t off, uint32_t size) {
    uint8_t *out = c->bytes + 32 * s->rows;
    memset(out, 0, 32);
    if (t < 13 || !(t & 1)) {
        c->values[s->rows] = -1;
        return CAPSEM_REC_OK;
    }
    c->values[s->rows] = 0;
    if (size != CAPSEM_BODY_HASH_TEXT_LEN) return CAPSEM_REC_OK;
    uint8_t text[CAPSEM_BODY_HASH_TEXT_LEN];
    const uint8_t *b = capsem_payload_bytes(&s->f, p, off, size, text);
    if (!b) return CAPSEM_REC_UNREADABLE;
    if (capsem_parse_body_hash(b, (int)size, out)) {
        c->values[s->rows] = 1;
    } else {
        memset(out, 0, 32);
    }
    return CAPSEM_REC_OK;
}

static inline int same_bytes(const uint8_t *a, const uint8_t *b, uint32_t len) {
    uint64_t x, y;
    for (; len >= 8; a += 8, b += 8, len -= 8) {
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y) return 0;
    }
    for (uint32_t i = 0; i < len; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* Code the queued texts: ask for the entries their slots hold (the slots were asked for
 * when they were queued), then add them in order. The last text of each column is kept for
 * the next batch's runs. */
static int flush(scan *s) {
    for (size_t k = 0; k < s->npend; k++) {
        const pending *q = &s->pend[k];
        if (q->same < 0) capsem_codes_prefetch_entry(s->cols[q->col].codes, q->hash);
    }
    for (size_t k = 0; k < s->npend; k++) {
        pending *q = &s->pend[k];
        if (q->same >= 0) {
            q->code = s->pend[q->same].code;
        } else {
            q->code = capsem_codes_add_hashed(s->cols[q->col].codes, q->hash, q->p, q->len);
            if (q->code == 0) return CAPSEM_REC_NO_MEMORY;
            if (q->code < 0) return CAPSEM_REC_GAVE_UP;
        }
        s->cols[q->col].values[q->row] = q->code;
    }
    for (size_t i = 0; i < s->ncols; i++) {
        if (s->prev[i] < 0) continue;
        const pending *q = &s->pend[s->prev[i]];
        last_text *last = &s->last[i];
        last->have = q->len <= LAST_TEXT;
        if (last->have) {
            memcpy(last->bytes, q->p, q->len);
            last->len = q->len;
            last->code = q->code;
        }
        s->prev[i] = -1;
    }
    s->npend = 0;
    s->arena_used = 0;
    return CAPSEM_REC_OK;
}

/* The text of column i of row `row`: its code now when it repeats the column's last text,
 * else queued for flush(), its slot asked for. A text read from an overflow chain (in the
 * scratch buffer) is copied to the batch's arena first. */
static int queue_text(scan *s, size_t i, const uint8_t *bytes, uint32_t len, int local) {
    if (s->npend == PENDING || (!local && s->arena_used + len > ARENA)) {
        int rc = flush(s);
        if (rc != CAPSEM_REC_OK) return rc;
    }
    uint64_t row = s->rows;
    int32_t prev = s->prev[i];
    if (prev >= 0) {
        const pending *q = &s->pend[prev];
        if (q->len == len && same_bytes(q->p, bytes, len)) {
            pending *n = &s->pend[s->npend++];
            *n = *q;
            n->row = row;
            n->same = q->same >= 0 ? q->same : prev;
            return CAPSEM_REC_OK;
        }
    } else {
        const last_text *last = &s->last[i];
        if (last->have && last->len == len && same_bytes(last->bytes, bytes, len)) {
            s->cols[i].values[row] = last->code;
            return CAPSEM_REC_OK;
        }
    }
    if (!local) {
        memcpy(s->arena + s->arena_used, bytes, len);
        bytes = s->arena + s->arena_used;
        s->arena_used += len;
    }
    pending *n = &s->pend[s->npend];
    n->hash = capsem_codes_hash(s->cols[i].codes, bytes, len);
    n->p = bytes;
    n->len = len;
    n->col = (uint32_t)i;
    n->row = row;
    n->same = -1;
    capsem_codes_prefetch(s->cols[i].codes, n->hash);
    s->prev[i] = (int32_t)s->npend++;
    return CAPSEM_REC_OK;
}

static int text_value(scan *s, size_t i, payload *p, uint32_t off, uint32_t len) {
    const uint8_t *bytes = capsem_payload_bytes(&s->f, p, off, len, s->text);
    if (!bytes) return CAPSEM_REC_UNREADABLE;
    return queue_text(s, i, bytes, len, bytes != s->text);
}

/* A NULL of column c in the row being read (a DIGEST's NULL is not a text: -1, zero bytes). */
static void null_value(scan *s, capsem_rec_column *c) {
    int64_t *out = &c->values[s->rows];
    switch (c->kind) {
    case CAPSEM_REC_CODE: *out = 0; break;
    case CAPSEM_REC_TEXT: *out = -1 - (int64_t)c->nbytes; break;
    case CAPSEM_REC_DIGEST:
        *out = -1;
        memset(c->bytes + 32 * s->rows, 0, 32);
        break;
    default: *out = CAPSEM_REC_NULL;
    }
}

/* One leaf cell at `pc` of a table leaf page: its chosen columns appended as a row. */
static int read_row(scan *s, const uint8_t *page, uint32_t pc) {
    uint64_t rowid;
    unsigned n;
    payload p;
    if (!capsem_cell_payload(page, pc, s->f.h.usable, &rowid, &p)) return CAPSEM_REC_UNREADABLE;
    if (s->rows == s->cap && grow_rows(s) != CAPSEM_REC_OK) return CAPSEM_REC_NO_MEMORY;

    /* The record header: its size, then one serial type per column. */
    uint8_t first[9];
    uint32_t peek = p.payload < 9 ? p.payload : 9;
    const uint8_t *hb = capsem_payload_bytes(&s->f, &p, 0, peek, first);
    uint64_t hsize;
    if (!hb || !(n = varint(hb, hb + peek, &hsize)) || hsize < n || hsize > p.payload || hsize > MAX_HEADER)
        return CAPSEM_REC_UNREADABLE;
    const uint8_t *hdr = capsem_payload_bytes(&s->f, &p, 0, (uint32_t)hsize, s->header);
    if (!hdr) return CAPSEM_REC_UNREADABLE;
    const uint8_t *ht = hdr + n, *hend = hdr + hsize;
    uint64_t body = hsize; /* payload offset of column `column`'s value */
    uint32_t column = 0;   /* the column whose serial type ht points at */
    uint64_t t = 0;
    for (size_t i = 0; i < s->ncols; i++) {
        capsem_rec_column *c = &s->cols[i];
        int64_t *out = &c->values[s->rows];
        if (c->column == CAPSEM_REC_ROWID) {
            *out = (int64_t)rowid;
            if (*out == CAPSEM_REC_NULL) c->odd++;
            continue;
        }
        /* Skip to column c->column (columns are asked for in increasing order), then read
         * its serial type. Most serial types are one byte: their sizes come from a table. */
        int ended = 0;
        for (;;) {
            if (ht >= hend) {
                ended = 1;
                break;
            }
            if (*ht < 0x80) {
                t = *ht++;
            } else {
                unsigned k = varint_long(ht, hend, &t);
                if (!k) return CAPSEM_REC_UNREADABLE;
                ht += k;
            }
            if (column++ == c->column) break;
            body += t < 128 ? SMALL_SIZE[t] : serial_size(t);
        }
        if (ended) { /* past the record's end: the column's default, which this scan does not read */
            null_value(s, c);
            c->odd++;
            continue;
        }
        uint32_t size = serial_size(t);
        if (body + size > p.payload || t == 10 || t == 11) return CAPSEM_REC_UNREADABLE;
        if (c->kind == CAPSEM_REC_DIGEST) {
            int rc = digest_value(s, c, &p, t, (uint32_t)body, size);
            if (rc != CAPSEM_REC_OK) return rc;
        } else if (t == 0) {
            null_value(s, c);
        } else if (c->kind == CAPSEM_REC_TEXT) {
            if (t >= 13 && (t & 1)) {
                int rc = append_text(s, c, &p, (uint32_t)body, size);
                if (rc != CAPSEM_REC_OK) return rc;
            } else {
                null_value(s, c);
                c->odd++;
            }
        } else if (c->kind == CAPSEM_REC_HEX) {
            int rc = hex_value(s, c, &p, t, (uint32_t)body, size);
            if (rc != CAPSEM_REC_OK) return rc;
        } else if (c->kind == CAPSEM_REC_CODE) {
            if (t >= 13 && (t & 1) && size <= CAPSEM_REC_MAX_TEXT) {
                int rc = text_value(s, i, &p, (uint32_t)body, size);
                if (rc != CAPSEM_REC_OK) return rc;
            } else {
                *out = 0;
                c->odd++;
            }
        } else if ((t >= 1 && t <= 6) || t == 8 || t == 9) {
            uint8_t raw[8] = {0};
            const uint8_t *b = size ? capsem_payload_bytes(&s->f, &p, (uint32_t)body, size, raw) : raw;
            if (!b) return CAPSEM_REC_UNREADABLE;
            *out = capsem_serial_int(b, t);
            if (*out == CAPSEM_REC_NULL) c->odd++;
        } else {
            *out = CAPSEM_REC_NULL;
            c->odd++;
        }
        body += size; /* the next column's value follows */
    }
    /* How far into this cell its last value lay (on the page): the next cells' reach. */
    uint64_t reach = (uint64_t)(p.local - (page + pc)) + (body < p.nlocal ? body : p.nlocal);
    s->lines = (uint32_t)(reach / 64 + 1 < MAX_PREFETCH_LINES ? reach / 64 + 1 : MAX_PREFETCH_LINES);
    s->rows++;
    return CAPSEM_REC_OK;
}

#endif
