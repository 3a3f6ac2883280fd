/* A read transaction on session.db and the Arrow stream of a table's rows (see scan_stream.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "page_map.h"
#include "scan_rows.h"
#include "scan_stream.h"

/* ---- the map ------------------------------------------------------------------------------ */

cs_map *cs_map_open(const char *path, int *status, int *err) {
    cs_map *m = calloc(1, sizeof *m);
    *err = 0;
    if (!m) {
        *status = CAPSEM_OPEN_IO;
        *err = ENOMEM;
        return NULL;
    }
    m->refs = 1;
    m->file.fd = -1;
    *status = capsem_file_open(&m->file, path, err);
    if (*status != CAPSEM_OPEN_OK) {
        capsem_file_close(&m->file);
        free(m);
        return NULL;
    }
    return m;
}

void cs_map_ref(cs_map *m) { __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED); }

void cs_map_unref(cs_map *m) {
    if (!m || __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    capsem_file_close(&m->file);
    free(m);
}

/* ---- the source -------------------------------------------------------------------------- */

int cs_source_open(const char *uri, int busy_ms, cs_source **out, char *err, size_t errlen) {
    cs_source *s = calloc(1, sizeof *s);
    *out = s;
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return SQLITE_NOMEM;
    }
    s->refs = 1;
    int rc = sqlite3_open_v2(uri, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, NULL);
    if (rc == SQLITE_OK) sqlite3_busy_timeout(s->db, busy_ms);
    else snprintf(err, errlen, "%s", s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
    return rc;
}

void cs_source_ref(cs_source *s) { __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED); }

void cs_source_end(cs_source *s) {
    if (s->in_txn) sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL); /* a read transaction loses nothing */
    s->in_txn = 0;
}

void cs_source_use_map(cs_source *s, cs_map *m) {
    if (s->win_on) capsem_window_end(&s->rows_window);
    s->win_on = 0;
    if (m) cs_map_ref(m);
    cs_map_unref(s->map);
    s->map = m;
}

capsem_page_window *cs_source_rows_window(cs_source *s) {
    if (!s->map || !s->map->window) return NULL;
    if (!s->win_on)
        s->win_on = capsem_window_init(&s->rows_window, s->map->file.map, s->map->file.size, s->map->window) == 0;
    return s->win_on ? &s->rows_window : NULL;
}

void cs_source_unref(cs_source *s) {
    if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    if (s->db) {
        cs_source_end(s);
        sqlite3_close_v2(s->db);
    }
    cs_source_use_map(s, NULL);
    free(s);
}

int cs_source_begin(cs_source *s, char *err, size_t errlen) {
    cs_source_end(s);
    int rc = sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        s->in_txn = 1;
        /* A read transaction starts at its first read: this one fixes the snapshot. */
        rc = sqlite3_exec(s->db, "SELECT COUNT(*) FROM sqlite_schema", NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "%s", sqlite3_errmsg(s->db));
        cs_source_end(s);
    }
    return rc;
}

/* ---- the stream -------------------------------------------------------------------------- */

cs_stream *cs_stream_new(cs_source *src, size_t ncols, const char *const *names) {
    cs_stream *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->refs = 1;
    st->ncols = ncols;
    st->names = calloc(ncols ? ncols : 1, sizeof *st->names);
    st->lays = calloc(ncols ? ncols : 1, sizeof *st->lays);
    st->masks = calloc(ncols ? ncols : 1, 1);
    st->record = calloc(ncols ? ncols : 1, sizeof *st->record);
    st->real = calloc(ncols ? ncols : 1, 1);
    int ok = st->names && st->lays && st->masks && st->record && st->real;
    for (size_t i = 0; ok && i < ncols; i++) ok = (st->names[i] = strdup(names[i])) != NULL;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    st->src = src;
    cs_source_ref(src);
    if (!ok) {
        cs_stream_unref(st);
        return NULL;
    }
    return st;
}

void cs_stream_ref(cs_stream *st) { __atomic_add_fetch(&st->refs, 1, __ATOMIC_RELAXED); }

static void set_error(cs_stream *st, const char *text) {
    if (st->error || st->cancel) return;
    st->error = 1;
    snprintf(st->message, sizeof st->message, "%s", text);
}

static const char *page_error(int rc) {
    switch (rc) {
    case CS_SHRANK: return "session.db was cut short while its pages were read";
    case CS_NO_MEMORY: return "out of memory";
    default: return "a page of session.db changed while it was read";
    }
}

/* Stop and join the workers, then (once) end what the stream holds of its source. */
static void finish(cs_stream *st) {
    pthread_mutex_lock(&st->mu);
    st->cancel = st->cancel || !st->exhausted;
    pthread_cond_broadcast(&st->cv);
    int join = st->started && !st->joined;
    st->joined = 1;
    pthread_mutex_unlock(&st->mu);
    if (join)
        for (int t = 0; t < st->nthreads; t++) pthread_join(st->tids[t], NULL);
    pthread_mutex_lock(&st->mu);
    int first = !st->finished;
    st->finished = 1;
    pthread_mutex_unlock(&st->mu);
    if (!first) return;
    if (st->stmt) {
        sqlite3_finalize(st->stmt);
        st->stmt = NULL;
    }
    if (st->end_txn && st->src) {
        cs_source_end(st->src);
        cs_source_use_map(st->src, NULL);
    }
}

static void drop_slots(cs_stream *st) {
    for (size_t k = 0; st->slots && k < st->window; k++) {
        cs_array_release(&st->slots[k].array);
        st->slots[k].ready = 0;
    }
}

void cs_stream_unref(cs_stream *st) {
    if (!st || __atomic_sub_fetch(&st->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    finish(st);
    drop_slots(st);
    free(st->slots);
    free(st->tids);
    cs_pages_close(&st->pages);
    cs_pbatches_free(st->batches, st->nbatches);
    for (size_t i = 0; st->names && i < st->ncols; i++) free(st->names[i]);
    free(st->names);
    free(st->lays);
    free(st->masks);
    free(st->record);
    free(st->real);
    if (st->stmt) sqlite3_finalize(st->stmt);
    cs_source_unref(st->src);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st);
}

static void lay_out(cs_stream *st, const uint8_t *empty) {
    for (size_t i = 0; i < st->ncols; i++) cs_layout_of(&st->lays[i], st->masks[i], empty[i]);
}

static uint64_t file_window_share(uint64_t window, int threads) {
    if (!window) return 0;
    uint64_t share = window / (uint64_t)(threads > 1 ? threads : 1);
    return share < CAPSEM_WINDOW_CHUNK ? CAPSEM_WINDOW_CHUNK : share;
}

int cs_stream_plan_pages(cs_stream *st, const uint32_t *record, const uint8_t *real, const uint8_t *empty,
                         uint32_t root, int has_after, int64_t after) {
    cs_source *src = st->src;
    if (!src->map) return CS_UNREADABLE;
    const capsem_archive_file *file = &src->map->file;
    capsem_page_finding bad;
    memcpy(st->record, record, st->ncols * sizeof *record);
    memcpy(st->real, real, st->ncols);
    cs_pages *p = &st->pages;
    memset(p, 0, sizeof *p);
    if (capsem_page_header_parse(file->map, file->size, &p->h, &bad) != 0) return CS_UNREADABLE;
    p->map = file->map;
    p->size = file->size;
    p->root = root;
    p->has_after = has_after;
    p->after = after;
    p->ncols = st->ncols;
    p->record = st->record;
    p->real = st->real;
    p->cancel = &st->cancel;
    /* The map's window is the scan's: its threads read at once, so each reader takes a share
     * (at least one chunk). */
    p->window = file_window_share(src->map->window, st->threads);
    int rc = cs_pages_open(p);
    if (rc == CS_OK)
        rc = cs_pages_plan(p, st->threads, st->batch_rows, st->batch_bytes, st->masks, &st->batches, &st->nbatches);
    if (rc != CS_OK) {
        cs_pages_close(p);
        return rc;
    }
    lay_out(st, empty);
    st->path = CS_PATH_PAGES;
    return CS_OK;
}

int cs_stream_plan_rows(cs_stream *st, sqlite3_stmt *stmt, int utf8_db, const uint8_t *empty) {
    st->stmt = stmt;
    st->utf8_db = utf8_db;
    st->message[0] = 0;
    int rc = cs_rows_plan(stmt, st->ncols, utf8_db, st->masks, &st->cancel, st->message, sizeof st->message);
    if (rc != SQLITE_OK) return rc;
    sqlite3_reset(stmt); /* the second pass steps it again, in the same transaction */
    lay_out(st, empty);
    st->path = CS_PATH_ROWS;
    return SQLITE_OK;
}

static void *page_worker(void *arg) {
    cs_stream *st = arg;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (!st->cancel && !st->error && st->next_claim < st->nbatches &&
               st->next_claim >= st->next_out + st->window)
            pthread_cond_wait(&st->cv, &st->mu);
        if (st->cancel || st->error || st->next_claim >= st->nbatches) break;
        size_t k = st->next_claim++;
        pthread_mutex_unlock(&st->mu);
        struct ArrowArray array;
        int rc = cs_pages_fill(&st->pages, st->lays, &st->batches[k], &array);
        pthread_mutex_lock(&st->mu);
        if (rc != CS_OK) {
            set_error(st, page_error(rc));
        } else {
            cs_slot *slot = &st->slots[k % st->window];
            slot->array = array;
            slot->rows = st->batches[k].rows;
            slot->last_rowid = st->batches[k].last_rowid;
            slot->ready = 1;
        }
        pthread_cond_broadcast(&st->cv);
    }
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

static void *rows_worker(void *arg) {
    cs_stream *st = arg;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (!st->cancel && !st->error && st->produced >= st->next_out + st->window)
            pthread_cond_wait(&st->cv, &st->mu);
        if (st->cancel || st->error) break;
        pthread_mutex_unlock(&st->mu);
        struct ArrowArray array;
        int64_t rows = 0, last = 0;
        int done = 0;
        char err[256] = {0};
        int rc = cs_rows_fill(st->stmt, st->ncols, st->lays, st->utf8_db, st->batch_rows, st->batch_bytes, &array,
                              &rows, &last, &done, &st->cancel, err, sizeof err);
        pthread_mutex_lock(&st->mu);
        if (rc != SQLITE_OK) {
            if (rc != SQLITE_INTERRUPT) set_error(st, err[0] ? err : sqlite3_errstr(rc));
            break;
        }
        if (rows > 0) {
            cs_slot *slot = &st->slots[st->produced % st->window];
            slot->array = array;
            slot->rows = rows;
            slot->last_rowid = last;
            slot->ready = 1;
            st->produced++;
        }
        if (done) {
            st->rows_done = 1;
            break;
        }
        pthread_cond_broadcast(&st->cv);
    }
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

static struct cs_stream *of(struct ArrowArrayStream *s) { return s->private_data; }

static int stream_get_schema(struct ArrowArrayStream *s, struct ArrowSchema *out) {
    return cs_stream_schema(of(s), out) ? ENOMEM : 0;
}

static int stream_get_next(struct ArrowArrayStream *s, struct ArrowArray *out) {
    cs_stream *st = of(s);
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&st->mu);
    cs_slot *slot;
    for (;;) {
        if (st->error) {
            pthread_mutex_unlock(&st->mu);
            return EIO;
        }
        size_t total = st->path == CS_PATH_PAGES ? st->nbatches : st->rows_done ? st->produced : (size_t)-1;
        if (st->next_out >= total) {
            st->exhausted = 1;
            pthread_mutex_unlock(&st->mu);
            finish(st); /* the transaction ends with the last batch */
            return 0;   /* out->release NULL: the end of the stream */
        }
        slot = &st->slots[st->next_out % st->window];
        if (slot->ready) break;
        pthread_cond_wait(&st->cv, &st->mu);
    }
    *out = slot->array;
    memset(&slot->array, 0, sizeof slot->array);
    slot->ready = 0;
    st->out_rows += slot->rows;
    st->out_batches++;
    st->out_last_rowid = slot->last_rowid;
    st->next_out++;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

static const char *stream_last_error(struct ArrowArrayStream *s) {
    cs_stream *st = of(s);
    return st->error ? st->message : NULL;
}

static void stream_release(struct ArrowArrayStream *s) {
    cs_stream *st = of(s);
    finish(st);
    drop_slots(st);
    s->release = NULL;
    cs_stream_unref(st);
}

int cs_stream_schema(cs_stream *st, struct ArrowSchema *out) {
    return cs_schema_export(st->lays, (const char *const *)st->names, st->ncols, out);
}

int cs_stream_export(cs_stream *st, struct ArrowArrayStream *out) {
    memset(out, 0, sizeof *out);
    if (st->started || !st->path) return -1;
    int workers = st->path == CS_PATH_ROWS ? 1 : st->threads;
    if (st->path == CS_PATH_PAGES && (size_t)workers > st->nbatches) workers = (int)st->nbatches;
    if (workers < 0) workers = 0;
    st->window = (size_t)(workers < 1 ? 2 : workers + 1);
    st->slots = calloc(st->window, sizeof *st->slots);
    st->tids = calloc(workers ? (size_t)workers : 1, sizeof *st->tids);
    if (!st->slots || !st->tids) return -1;
    void *(*main)(void *) = st->path == CS_PATH_ROWS ? rows_worker : page_worker;
    for (int t = 0; t < workers; t++) {
        if (pthread_create(&st->tids[t], NULL, main, st) != 0) break;
        st->nthreads++;
    }
    if (workers > 0 && st->nthreads == 0) return -1;
    st->started = 1;
    cs_stream_ref(st);
    static const cs_stream_ops ops = {stream_get_schema, stream_get_next, stream_last_error, stream_release};
    cs_stream_init(out, &ops, st);
    return 0;
}
