/* The two passes over a table's leaves, and a page of rows for events (see scan_pages.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "scan_pages.h"

#define CANCEL_EVERY 64u /* leaves between looks at the cancel flag */

/* ---- the first pass ------------------------------------------------------------------------ */

typedef struct {
    const cs_pages *s;
    size_t a, b; /* leaves [a, b) */
    int64_t batch_rows, batch_bytes;
    int rc;
    uint8_t *masks;
    cs_pbatch *batches;
    size_t n, cap;
} plan_job;

static int new_batch(plan_job *j, size_t leaf, uint32_t cell) {
    if (j->n == j->cap) {
        size_t want = j->cap ? j->cap * 2 : 8;
        cs_pbatch *b = realloc(j->batches, want * sizeof *b);
        if (!b) return CS_NO_MEMORY;
        j->batches = b;
        j->cap = want;
    }
    cs_pbatch *b = &j->batches[j->n];
    memset(b, 0, sizeof *b);
    b->stats = calloc((j->s->ncols ? j->s->ncols : 1) * CS_CLASSES * 2, sizeof *b->stats);
    if (!b->stats) return CS_NO_MEMORY;
    b->start = (cs_at){(uint32_t)leaf, cell};
    j->n++;
    return CS_OK;
}

static int plan_range(void *arg) {
    plan_job *j = arg;
    const cs_pages *s = j->s;
    cs_reader r;
    int rc = cs_reader_init(&r, s);
    int64_t prev = 0;
    int have_prev = 0;
    cs_pbatch *cur = NULL;
    int64_t widest = 0; /* the current batch's largest column, in bytes */
    int64_t *bytes_of = calloc(s->ncols ? s->ncols : 1, sizeof *bytes_of);
    if (!bytes_of) rc = CS_NO_MEMORY;
    for (size_t li = j->a; li < j->b && rc == CS_OK; li++) {
        if ((li - j->a) % CANCEL_EVERY == 0 && s->cancel && *s->cancel) {
            rc = CS_CANCELLED;
            break;
        }
        const uint8_t *page;
        uint32_t ncell;
        if ((rc = cs_leaf_cells(&r, li, &page, &ncell)) != CS_OK) break;
        for (uint32_t i = 0; i < ncell; i++) {
            int64_t rowid;
            payload p;
            if ((rc = cs_leaf_row(&r, li, page, i, &prev, &have_prev, &rowid, &p)) != CS_OK) break;
            if (s->has_after && rowid <= s->after) continue;
            if ((rc = cs_row_values(&r, &p, rowid)) != CS_OK) break;
            if (!cur) {
                if ((rc = new_batch(j, li, i)) != CS_OK) break;
                cur = &j->batches[j->n - 1];
                widest = 0;
                memset(bytes_of, 0, (s->ncols ? s->ncols : 1) * sizeof *bytes_of);
            }
            for (size_t k = 0; k < s->ncols; k++) {
                cs_value *v = &r.vals[k];
                uint32_t out = s->order[k];
                uint8_t cls = v->cls;
                if (cls == CS_TEXT || cls == CS_BLOB) { /* its bytes must be there (a chain as long) */
                    const uint8_t *bytes;
                    if ((rc = cs_value_gather(&r, &p, v, &bytes)) != CS_OK) break;
                    if (cls == CS_TEXT && !cs_utf8_check(bytes, v->len)) cls = CS_TEXT_BYTES;
                }
                j->masks[out] |= (uint8_t)(1u << cls);
                int64_t *st = &cur->stats[(out * CS_CLASSES + cls) * 2];
                st[0]++;
                if (cls >= CS_TEXT) {
                    st[1] += v->len;
                    bytes_of[out] += v->len;
                    if (bytes_of[out] > widest) widest = bytes_of[out];
                }
            }
            if (rc != CS_OK) break;
            cur->rows++;
            cur->last_rowid = rowid;
            if (cur->rows >= j->batch_rows || widest >= j->batch_bytes) {
                cur->end = (cs_at){(uint32_t)li, i + 1};
                cur = NULL;
            }
        }
        if (cur && rc == CS_OK) cur->end = (cs_at){(uint32_t)li, ncell};
    }
    free(bytes_of);
    cs_reader_free(&r);
    j->rc = rc;
    return rc;
}

static void *plan_thread(void *arg) {
    plan_job *j = arg;
    j->rc = cs_guarded(j->s, plan_range, j);
    return NULL;
}

void cs_pbatches_free(cs_pbatch *b, size_t n) {
    if (!b) return;
    for (size_t i = 0; i < n; i++) free(b[i].stats);
    free(b);
}

#define MAX_PLAN_THREADS 64

int cs_pages_plan(cs_pages *s, int threads, int64_t batch_rows, int64_t batch_bytes, uint8_t *masks,
                  cs_pbatch **batches, size_t *nbatches) {
    *batches = NULL;
    *nbatches = 0;
    memset(masks, 0, s->ncols);
    if (threads < 1) threads = 1;
    if (threads > MAX_PLAN_THREADS) threads = MAX_PLAN_THREADS;
    if ((size_t)threads > s->nleaves) threads = s->nleaves ? (int)s->nleaves : 1;
    plan_job jobs[MAX_PLAN_THREADS];
    pthread_t tids[MAX_PLAN_THREADS];
    int started[MAX_PLAN_THREADS] = {0};
    memset(jobs, 0, sizeof jobs);
    int rc = CS_OK;
    for (int t = 0; t < threads; t++) {
        jobs[t].s = s;
        jobs[t].a = s->nleaves * (size_t)t / (size_t)threads;
        jobs[t].b = s->nleaves * (size_t)(t + 1) / (size_t)threads;
        jobs[t].batch_rows = batch_rows;
        jobs[t].batch_bytes = batch_bytes;
        jobs[t].masks = calloc(s->ncols ? s->ncols : 1, 1);
        if (!jobs[t].masks) rc = CS_NO_MEMORY;
    }
    if (rc == CS_OK) {
        for (int t = 1; t < threads; t++) started[t] = pthread_create(&tids[t], NULL, plan_thread, &jobs[t]) == 0;
        plan_thread(&jobs[0]);
        for (int t = 1; t < threads; t++) {
            if (started[t]) pthread_join(tids[t], NULL);
            else plan_thread(&jobs[t]); /* no thread to be had: this one does it */
        }
    }
    size_t total = 0;
    for (int t = 0; t < threads; t++) {
        if (rc == CS_OK && jobs[t].rc != CS_OK) rc = jobs[t].rc;
        total += jobs[t].n;
    }
    cs_pbatch *all = NULL;
    if (rc == CS_OK && total) {
        all = malloc(total * sizeof *all);
        if (!all) rc = CS_NO_MEMORY;
    }
    size_t at = 0;
    for (int t = 0; t < threads; t++) {
        if (rc == CS_OK) {
            if (jobs[t].n) memcpy(all + at, jobs[t].batches, jobs[t].n * sizeof *all);
            at += jobs[t].n;
            free(jobs[t].batches);
            for (size_t k = 0; k < s->ncols; k++) masks[k] |= jobs[t].masks[k];
        } else {
            cs_pbatches_free(jobs[t].batches, jobs[t].n);
        }
        free(jobs[t].masks);
    }
    if (rc != CS_OK) {
        free(all);
        return rc;
    }
    *batches = all;
    *nbatches = total;
    return CS_OK;
}

/* ---- the second pass ----------------------------------------------------------------------- */

typedef struct {
    const cs_pages *s;
    const cs_layout *lays;
    const cs_pbatch *b;
    cs_col *cols;
    int64_t rows;
} fill_job;

/* Append one value (of class v->cls as the first pass read it) to column `c`. */
static int append_value(cs_reader *r, payload *p, const cs_value *v, int64_t rowid, cs_col *c) {
    const cs_layout *lay = c->lay;
    switch (v->cls) {
    case CS_NULL:
        return cs_col_null(c) ? CS_UNREADABLE : CS_OK;
    case CS_INTEGER:
    case CS_REAL: {
        int64_t i = 0;
        double d = 0;
        int rc = cs_value_number(r, p, v, rowid, &i, &d);
        if (rc != CS_OK) return rc;
        if (v->cls == CS_INTEGER) return cs_col_int(c, i) ? CS_UNREADABLE : CS_OK;
        return cs_col_real(c, d) ? CS_UNREADABLE : CS_OK;
    }
    default:
        break;
    }
    uint8_t cls = v->cls;
    if (cls == CS_TEXT) {
        /* Which text class: the column's only one, unless it holds both (then check). */
        int both = (lay->mask & (1u << CS_TEXT)) && (lay->mask & (1u << CS_TEXT_BYTES));
        if (!both) {
            cls = (lay->mask & (1u << CS_TEXT)) ? CS_TEXT : CS_TEXT_BYTES;
        } else if (v->len == 0) {
            cls = CS_TEXT; /* the empty text is valid UTF-8, and has no bytes to read */
        } else {
            const uint8_t *src;
            int rc = cs_value_gather(r, p, v, &src);
            if (rc != CS_OK) return rc;
            cls = cs_utf8_check(src, v->len) ? CS_TEXT : CS_TEXT_BYTES;
            uint8_t *dst = cs_col_bytes(c, cls, v->len);
            if (!dst) return CS_NO_MEMORY;
            if (v->len) memcpy(dst, src, v->len);
            return CS_OK;
        }
    }
    uint8_t *dst = cs_col_bytes(c, cls, v->len);
    if (!dst) return CS_NO_MEMORY;
    if (!v->len) return CS_OK;
    if (v->len <= 64 && v->off + v->len <= p->nlocal &&
        p->local + v->off + 64 <= r->s->map + (uint64_t)r->f.h.page_count * r->f.h.page_size) {
        /* A short local value: whole 16-byte moves, reading past it inside the map and
         * writing into the slack every data buffer keeps (column_build.h), instead of a call
         * to memcpy per value. */
        const uint8_t *src = p->local + v->off;
        uint64_t at = (uint64_t)(src - r->s->map);
        if ((at ^ (at + 63)) >> CAPSEM_WINDOW_CHUNK_SHIFT) /* the moves reach into the next chunk */
            capsem_window_touch(r->f.window, at + 63);
        for (uint32_t k = 0; k < v->len; k += 16) memcpy(dst + k, src + k, 16);
        return CS_OK;
    }
    const uint8_t *src = capsem_payload_bytes(&r->f, p, v->off, v->len, dst);
    if (!src) return CS_UNREADABLE;
    if (src != dst) memcpy(dst, src, v->len);
    return CS_OK;
}

static int fill_range(void *arg) {
    fill_job *j = arg;
    const cs_pages *s = j->s;
    const cs_pbatch *b = j->b;
    cs_reader r;
    int rc = cs_reader_init(&r, s);
    int64_t prev = 0;
    int have_prev = 0;
    for (uint32_t li = b->start.leaf; li <= b->end.leaf && rc == CS_OK; li++) {
        const uint8_t *page;
        uint32_t ncell;
        if ((rc = cs_leaf_cells(&r, li, &page, &ncell)) != CS_OK) break;
        uint32_t from = li == b->start.leaf ? b->start.cell : 0, to = li == b->end.leaf ? b->end.cell : ncell;
        if (to > ncell) rc = CS_UNREADABLE;
        for (uint32_t i = from; i < to && rc == CS_OK; i++) {
            int64_t rowid;
            payload p;
            if ((rc = cs_leaf_row(&r, li, page, i, &prev, &have_prev, &rowid, &p)) != CS_OK) break;
            if ((rc = cs_row_values(&r, &p, rowid)) != CS_OK) break;
            for (size_t k = 0; k < s->ncols && rc == CS_OK; k++)
                rc = append_value(&r, &p, &r.vals[k], rowid, &j->cols[s->order[k]]);
            j->rows++;
        }
    }
    cs_reader_free(&r);
    return rc;
}

int cs_pages_fill(const cs_pages *s, const cs_layout *lays, const cs_pbatch *b, struct ArrowArray *out) {
    memset(out, 0, sizeof *out);
    cs_col *cols = calloc(s->ncols ? s->ncols : 1, sizeof *cols);
    if (!cols) return CS_NO_MEMORY;
    int rc = CS_OK;
    for (size_t i = 0; i < s->ncols && rc == CS_OK; i++) {
        const int64_t *st = &b->stats[i * CS_CLASSES * 2];
        int64_t counts[CS_CLASSES], bytes[CS_CLASSES];
        for (int k = 0; k < CS_CLASSES; k++) {
            counts[k] = st[2 * k];
            bytes[k] = st[2 * k + 1];
        }
        if (lays[i].plain != CS_UNION) { /* a plain column's data: every text class it takes */
            int64_t all = bytes[CS_TEXT] + bytes[CS_TEXT_BYTES] + bytes[CS_BLOB];
            for (int k = CS_TEXT; k <= CS_BLOB; k++) bytes[k] = all;
        }
        if (cs_col_init(&cols[i], &lays[i], b->rows, counts, bytes)) rc = CS_NO_MEMORY;
    }
    fill_job j = {s, lays, b, cols, 0};
    if (rc == CS_OK) rc = cs_guarded(s, fill_range, &j);
    if (rc == CS_OK && j.rows != b->rows) rc = CS_UNREADABLE;
    if (rc == CS_OK && cs_batch_export(cols, s->ncols, b->rows, out)) rc = CS_NO_MEMORY;
    for (size_t i = 0; i < s->ncols; i++) cs_col_free(&cols[i]);
    free(cols);
    return rc;
}

/* ---- rows for a page of events --------------------------------------------------------------- */

int cs_rows_reserve(cs_rows *r, size_t ncols, int64_t rows) {
    if (rows <= r->cap) return CS_OK;
    int64_t cap = r->cap ? r->cap : 64;
    while (cap < rows) cap *= 2;
    int64_t *ids = realloc(r->rowid, (size_t)cap * sizeof *ids);
    if (!ids) return CS_NO_MEMORY;
    r->rowid = ids;
    cs_item *items = realloc(r->items, (size_t)cap * (ncols ? ncols : 1) * sizeof *items);
    if (!items) return CS_NO_MEMORY;
    r->items = items;
    r->cap = cap;
    return CS_OK;
}

uint8_t *cs_rows_bytes(cs_rows *r, uint32_t len, uint64_t *at) {
    if (r->arena_len + len > r->arena_cap) {
        uint64_t cap = r->arena_cap ? r->arena_cap : 65536;
        while (cap < r->arena_len + len) cap *= 2;
        uint8_t *a = realloc(r->arena, cap);
        if (!a) return NULL;
        r->arena = a;
        r->arena_cap = cap;
    }
    *at = r->arena_len;
    r->arena_len += len;
    return r->arena + *at;
}

void cs_rows_free(cs_rows *r) {
    free(r->rowid);
    free(r->items);
    free(r->arena);
    memset(r, 0, sizeof *r);
}

typedef struct {
    const cs_pages *s;
    int64_t limit;
    cs_rows *out;
} rows_job;

static int rows_range(void *arg) {
    rows_job *j = arg;
    const cs_pages *s = j->s;
    cs_rows *out = j->out;
    cs_reader r;
    int rc = cs_reader_init(&r, s);
    int64_t prev = 0;
    int have_prev = 0;
    for (size_t li = 0; li < s->nleaves && rc == CS_OK && !cs_rows_full(out, j->limit); li++) {
        const uint8_t *page;
        uint32_t ncell;
        if ((rc = cs_leaf_cells(&r, li, &page, &ncell)) != CS_OK) break;
        for (uint32_t i = 0; i < ncell && rc == CS_OK && !cs_rows_full(out, j->limit); i++) {
            int64_t rowid;
            payload p;
            if ((rc = cs_leaf_row(&r, li, page, i, &prev, &have_prev, &rowid, &p)) != CS_OK) break;
            if (s->has_after && rowid <= s->after) continue;
            if ((rc = cs_row_values(&r, &p, rowid)) != CS_OK) break;
            if ((rc = cs_rows_reserve(out, s->ncols, out->n + 1)) != CS_OK) break;
            cs_item *row = &out->items[out->n * (int64_t)s->ncols];
            for (size_t k = 0; k < s->ncols && rc == CS_OK; k++) {
                const cs_value *v = &r.vals[k];
                cs_item *it = &row[s->order[k]];
                it->cls = v->cls;
                it->len = 0;
                if (v->cls == CS_INTEGER || v->cls == CS_REAL) {
                    rc = cs_value_number(&r, &p, v, rowid, &it->v.i, &it->v.d);
                } else if (v->cls == CS_TEXT || v->cls == CS_BLOB) {
                    if (v->len > out->max_value) {
                        rc = CS_TOO_LARGE;
                        break;
                    }
                    uint8_t *dst = cs_rows_bytes(out, v->len, &it->v.at);
                    if (!dst) {
                        rc = CS_NO_MEMORY;
                        break;
                    }
                    it->len = v->len;
                    if (v->len) {
                        const uint8_t *src = capsem_payload_bytes(&r.f, &p, v->off, v->len, dst);
                        if (!src) rc = CS_UNREADABLE;
                        else if (src != dst) memcpy(dst, src, v->len);
                    }
                }
            }
            if (rc != CS_OK) break;
            out->rowid[out->n++] = rowid;
        }
    }
    cs_reader_free(&r);
    return rc;
}

int cs_pages_rows(const cs_pages *s, int64_t limit, cs_rows *out) {
    rows_job j = {s, limit, out};
    out->n = 0;
    out->arena_len = 0;
    return cs_guarded(s, rows_range, &j);
}
