/* zlib's rules (archive_deflate_rules.h) walked over the deflate payloads of an extent walk's
 * segment table on a thread of its own, ahead of the verify kernel.
 *
 * The rules need only a payload's compressed bytes, not what it inflates to, so a check can
 * walk them while it is still reading session.db (from a cold cache the kernel cannot start
 * until the body index is read, at the end of that file). Each segment whose payload zlib
 * accepts gets capsem_segment_ref.zlib_ok = 1; the kernel walks only the others. The
 * payloads are read with pread(2) into one buffer of the job's (nothing is mapped, so
 * nothing stays resident in the process), through a duplicate of the archive's descriptor.
 * A payload read short (the file shrank) or refused is left at 0: the kernel decides it.
 *
 * The table must not move or be freed, and no one may read its zlib_ok fields, until
 * capsem_rules_ahead_wait or _finish has returned. */
#ifndef CAPSEM_ARCHIVE_RULES_AHEAD_H
#define CAPSEM_ARCHIVE_RULES_AHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "archive_reader.h"

/* How far ahead of the extent walk session.bodies is asked for when a rules walk follows it
 * (it reads every payload: from a cold cache the headers would otherwise fault one by one). */
#define CAPSEM_RULES_AHEAD_WINDOW ((uint64_t)8 << 20)

typedef struct capsem_rules_ahead capsem_rules_ahead;

/* Starts the thread over refs[0, n). NULL with *err an errno when the descriptor cannot be
 * duplicated, memory ran out or no thread could start (the segments then stay at 0). */
capsem_rules_ahead *capsem_rules_ahead_start(int fd, capsem_segment_ref *refs, size_t n, int *err);

/* Waits until every segment has been walked. */
void capsem_rules_ahead_wait(capsem_rules_ahead *r);

/* Stops the thread after the segment it is walking, joins it and frees the job (the
 * segments it did not reach stay at 0). NULL is a no-op. */
void capsem_rules_ahead_finish(capsem_rules_ahead *r);

#endif
