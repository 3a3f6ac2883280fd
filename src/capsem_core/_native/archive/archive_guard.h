/* A guard against SIGBUS from the session.bodies map. A file cut short after it was mapped
 * (truncated by another process, a copy in flight) makes any touch of a page past its new
 * end raise SIGBUS on Linux; macOS raises SIGBUS or, for some such touches, SIGSEGV.
 * Unguarded, that kills the process. While a thread runs guarded code, the handler jumps
 * back to the guard instead, and the caller reports a truncated archive: on SIGBUS always,
 * on SIGSEGV only when the faulting address lies inside the map being read (any other
 * SIGSEGV is a bug, not a shrunken file, and must not be hidden). Faults outside guarded
 * code go to whatever handler was installed before ours (Python's faulthandler, say). */
#ifndef CAPSEM_ARCHIVE_GUARD_H
#define CAPSEM_ARCHIVE_GUARD_H

#include <setjmp.h>
#include <signal.h>
#include <stdint.h>

#include "archive_reader.h"

extern __thread sigjmp_buf capsem_guard_env;
extern __thread volatile sig_atomic_t capsem_guard_armed;
/* The map the armed thread reads: [lo, hi), hi rounded up to a page. */
extern __thread volatile uintptr_t capsem_guard_lo, capsem_guard_hi;

/* Before arming: the map [base, base + size) whose faults the guard takes. */
void capsem_guard_range(const uint8_t *base, uint64_t size);

/* Install the SIGBUS and SIGSEGV handlers once per process; 0 or an errno. */
int capsem_guard_install(void);

/* capsem_cursor_reach and capsem_walk_extent with the guard armed: a SIGBUS while they touch
 * the map becomes CAPSEM_E_TRUNCATED ("the file shrank while it was read"), the cursor
 * discarded. */
capsem_status capsem_guarded_reach(capsem_cursor *c, const uint8_t *base, uint64_t size, uint64_t block_offset,
                                   uint64_t end, capsem_error *err);
capsem_status capsem_guarded_walk_extent(const uint8_t *base, uint64_t size, uint64_t block_offset,
                                         uint64_t disk_len, capsem_extent *out, capsem_error *err);

#endif
