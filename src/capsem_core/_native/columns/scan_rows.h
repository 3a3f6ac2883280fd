/* A table's rows through SQLite's own statements (the C API of the interpreter's
 * libsqlite3): the path for a snapshot the mapped file is not (a live writer's WAL), for a
 * table the page reader does not take, and for pages it found not as SQLite writes them.
 *
 * The statement is the caller's: its result columns are the chosen columns and, last, the
 * rowid, in rowid order, stepped inside the one read transaction of the stream, so the first
 * pass (each column's storage classes, each text checked for UTF-8) and the second (the
 * batches) see the same rows. Values are SQLite's own: sqlite3_column_type's class (a REAL
 * column's integers already read as REAL), a text's bytes as stored (in a UTF-8 database) or
 * as SQLite converts them to UTF-8 (in a UTF-16 one). */
#ifndef CAPSEM_SCAN_ROWS_H
#define CAPSEM_SCAN_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "column_build.h"
#include "scan_pages.h"

/* Every row: `masks[col]` the classes each column holds. SQLITE_OK, SQLITE_INTERRUPT when
 * cancelled, or SQLite's error (its message in err). The statement is reset first. */
int cs_rows_plan(sqlite3_stmt *st, size_t ncols, int utf8_db, uint8_t *masks, volatile const int *cancel,
                 char *err, size_t errlen);

/* The next batch: up to batch_rows rows (fewer once a column holds batch_bytes) into `out`,
 * `*rows` of them, the last one's rowid in *last_rowid; *done once the statement has no
 * more rows (then *rows may be 0 and out is left released). */
int cs_rows_fill(sqlite3_stmt *st, size_t ncols, const cs_layout *lays, int utf8_db, int64_t batch_rows,
                 int64_t batch_bytes, struct ArrowArray *out, int64_t *rows, int64_t *last_rowid, int *done,
                 volatile const int *cancel, char *err, size_t errlen);

/* Up to `limit` rows as row-major values (a page of events), fewer once out->max_bytes are
 * read. CS_TOO_LARGE as SQLITE_TOOBIG, the rows before the value's row kept. */
int cs_rows_read(sqlite3_stmt *st, size_t ncols, int utf8_db, int64_t limit, cs_rows *out, char *err,
                 size_t errlen);

#endif
