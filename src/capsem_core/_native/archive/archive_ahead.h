/* Read-ahead of a ledger's files ahead of its readers, for a check from a cold page cache.
 *
 * A check reads session.db by tree order (the page scans, SQLite's checks of the tables the
 * page map does not prove) and session.bodies block by block, all at the speed of the page
 * faults or read(2) calls that find a page missing: from a dropped cache the readers wait on
 * the disk one request at a time while the disk could stream the files. One thread here streams them instead, in
 * file order, a file after the other, as they are handed to it, a chunk at a time: on Linux
 * read by sendfile(2) into /dev/null (the kernel's own read-ahead keeps the disk busy, nothing
 * is copied to the process, and the page cache gets the large folios a read leaves), else,
 * or where sendfile fails on the file, posix_fadvise(WILLNEED) with at most
 * CAPSEM_AHEAD_DEPTH chunks in flight (it waits for the oldest by reading one byte of its
 * last page). It stops after `limit` bytes (the page cache it fills is the system's to
 * reclaim; the caller bounds it by the memory the system has available).
 * A chunk found in the page cache already (sampled, see archive_ahead.c) is passed over,
 * neither asked for nor counted against the limit. Nothing read here changes what a reader
 * reads.
 *
 * The files are given as descriptors the caller keeps open; each is duplicated (no second
 * open of the path), so the caller may close its own while the thread runs. */
#ifndef CAPSEM_ARCHIVE_AHEAD_H
#define CAPSEM_ARCHIVE_AHEAD_H

#include <stdint.h>

#include "stream_gate.h"

#define CAPSEM_AHEAD_CHUNK (4u << 20)
#define CAPSEM_AHEAD_DEPTH 8u
#define CAPSEM_AHEAD_MAX_FILES 8u
/* A chunk counts as cached when one byte of every this many, and its last, is. */
#define CAPSEM_AHEAD_SAMPLE (256u << 10)

typedef struct capsem_ahead capsem_ahead;

/* A read-ahead of at most `limit` bytes in all, reading by advice alone when `advice_only`
 * (as where sendfile cannot read a file; for tests); NULL when memory ran out. */
capsem_ahead *capsem_ahead_new(uint64_t limit, int advice_only);

/* Read [0, size) of the file open at `fd` once the files handed before are done (the thread
 * starts with the first). `gate`, when not NULL, is held, advanced as the file is read and
 * closed when the thread leaves it (or never reaches it). 0, or an errno (EMFILE past
 * CAPSEM_AHEAD_MAX_FILES; the gate is then closed). */
int capsem_ahead_add(capsem_ahead *a, int fd, uint64_t size, capsem_stream_gate *gate);

/* Bytes asked for so far (for tests and tuning). */
uint64_t capsem_ahead_done(capsem_ahead *a);

/* Bytes gone through so far, asked for or found cached (for tests and tuning). */
uint64_t capsem_ahead_passed(capsem_ahead *a);

/* Stop (the chunk in flight ends first), join the thread, close the duplicates and the
 * sink, free. */
void capsem_ahead_free(capsem_ahead *a);

#endif
