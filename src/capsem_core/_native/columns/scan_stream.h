/* One read transaction on session.db (`cs_source`) and the Arrow stream of a table's rows
 * read in it (`cs_stream`).
 *
 * A source is a read-only connection of its own (the URI and busy timeout the Python layer's
 * connection policy chose) and, once asked, a map of the database file. Its read transaction
 * is the snapshot every query, page read and batch of it sees. Sources and streams are
 * reference counted and need no GIL: a stream handed to pyarrow or DuckDB keeps its source
 * (connection, transaction, map) alive until the consumer releases it, from any thread,
 * however long the Python objects that made it live.
 *
 * A stream's batches are produced ahead of the consumer by worker threads, at most `window`
 * of them waiting at once: the page path's workers fill the batches its first pass cut, in
 * any order, each into its own slot; the statement path's one worker steps the statement.
 * get_next hands them out in order. Once the last batch is handed out (or the consumer
 * releases the stream, which also stops the workers) the transaction ends and the map is
 * dropped, so a reader that is done never holds a WAL checkpoint back. */
#ifndef CAPSEM_SCAN_STREAM_H
#define CAPSEM_SCAN_STREAM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "archive_file.h"
#include "arrow_abi.h"
#include "column_build.h"
#include "scan_pages.h"

/* session.db mapped read-only, shared by whoever reads it (a Ledger keeps one across scans,
 * sparing each its open, map and header check), freed with its last reference. `window`: the
 * bytes of it each scan or page of rows keeps resident (scan_leaves.h; 0: no bound). */
typedef struct {
    long refs;
    uint64_t window;
    capsem_archive_file file;
} cs_map;

/* Open and map `path` (archive_file.c: no symlink, a regular file); NULL with *status and
 * *err set when it cannot be. */
cs_map *cs_map_open(const char *path, int *status, int *err);
void cs_map_ref(cs_map *m);
void cs_map_unref(cs_map *m);

typedef struct {
    long refs;
    sqlite3 *db;
    int in_txn;
    cs_map *map; /* NULL: not mapped */
    capsem_page_window rows_window; /* its pages of rows' window over the map, while win_on */
    int win_on;
} cs_source;

/* Open `uri` read-only with the busy timeout; SQLite's code, its message in err. *out is set
 * either way (unref it). */
int cs_source_open(const char *uri, int busy_ms, cs_source **out, char *err, size_t errlen);
void cs_source_ref(cs_source *s);
void cs_source_unref(cs_source *s);
/* BEGIN and a first read, which fixes the snapshot. */
int cs_source_begin(cs_source *s, char *err, size_t errlen);
void cs_source_end(cs_source *s);
/* Read `m` (a reference is taken) as the source's snapshot, or drop the map (m NULL); the
 * pages of rows' window over the old map ends. */
void cs_source_use_map(cs_source *s, cs_map *m);
/* The window every page of rows read on the source's map shares until the map is let go (a
 * page of events reads several tables one after another: one window keeps each tree's upper
 * pages and next leaf between those reads); NULL for no bound. */
capsem_page_window *cs_source_rows_window(cs_source *s);

enum { CS_PATH_PAGES = 1, CS_PATH_ROWS = 2 };

typedef struct cs_slot {
    int ready;
    struct ArrowArray array;
    int64_t rows, last_rowid;
} cs_slot;

typedef struct cs_stream {
    long refs;
    cs_source *src;
    int path;
    size_t ncols;
    char **names;
    cs_layout *lays;
    uint8_t *masks;
    int64_t batch_rows, batch_bytes;
    int threads;
    int end_txn; /* the stream ends the source's transaction once it is done */
    /* page path */
    cs_pages pages;
    cs_pbatch *batches;
    size_t nbatches;
    uint32_t *record;
    uint8_t *real;
    /* statement path */
    sqlite3_stmt *stmt;
    int utf8_db;
    /* production */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *tids;
    int nthreads;
    size_t window;
    cs_slot *slots;
    size_t next_claim; /* the next batch a page worker fills */
    size_t next_out;   /* the next batch get_next hands out */
    size_t produced;   /* statement path: batches filled so far */
    int rows_done;     /* statement path: no more rows */
    int started, joined, finished;
    volatile int cancel;
    int error;
    char message[512];
    /* what was handed out (read by the Python layer for the cursor) */
    int64_t out_rows, out_batches, out_last_rowid;
    int exhausted;
} cs_stream;

/* A stream of the table rows the caller describes (names, record columns, REAL affinity,
 * the class an all-NULL column takes), on `src`. The page path reads `root` of the source's
 * map; the statement path steps `stmt` (taken over: finalized with the stream). NULL when
 * memory ran out. */
cs_stream *cs_stream_new(cs_source *src, size_t ncols, const char *const *names);
void cs_stream_ref(cs_stream *st);
void cs_stream_unref(cs_stream *st);

/* The first pass; on CS_OK the layouts are fixed. Page path: CS_UNREADABLE means "read it
 * with statements". Statement path: SQLite's code (message in st->message). */
int cs_stream_plan_pages(cs_stream *st, const uint32_t *record, const uint8_t *real, const uint8_t *empty,
                         uint32_t root, int has_after, int64_t after);
int cs_stream_plan_rows(cs_stream *st, sqlite3_stmt *stmt, int utf8_db, const uint8_t *empty);

/* Fill `out` with an ArrowArrayStream of the planned stream (one more reference), the
 * workers started. 0, or -1 when threads or memory could not be had. */
int cs_stream_export(cs_stream *st, struct ArrowArrayStream *out);
int cs_stream_schema(cs_stream *st, struct ArrowSchema *out);

#endif
