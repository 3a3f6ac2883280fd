/* A per-thread guard against faults from a read-only file map (session.bodies, session.db).
 * A file cut short after it was mapped (truncated by another process, a copy in flight)
 * makes any touch of a page past its new end raise SIGBUS on Linux; macOS raises SIGBUS or,
 * for some such touches, SIGSEGV. Unguarded, that kills the process. While a thread runs
 * guarded code (capsem_guard_range, then capsem_guard_armed set after a sigsetjmp on
 * capsem_guard_env), the handler jumps back to the guard instead, and the caller reports a
 * file that shrank: on SIGBUS always, on SIGSEGV only when the faulting address lies inside
 * the map being read (any other SIGSEGV is a bug, not a shrunken file, and is not hidden).
 * Faults outside guarded code go to whatever handler was installed before ours (Python's
 * faulthandler, say). Each extension module links its own copy; their handlers chain. */
#ifndef CAPSEM_MAP_GUARD_H
#define CAPSEM_MAP_GUARD_H

#include <setjmp.h>
#include <signal.h>
#include <stdint.h>

extern __thread sigjmp_buf capsem_guard_env;
extern __thread volatile sig_atomic_t capsem_guard_armed;
/* The map the armed thread reads: [lo, hi), hi rounded up to a page. */
extern __thread volatile uintptr_t capsem_guard_lo, capsem_guard_hi;

/* Before arming: the map [base, base + size) whose SIGSEGVs the guard takes. */
void capsem_guard_range(const uint8_t *base, uint64_t size);

/* Install the SIGBUS and SIGSEGV handlers once per process (per module); 0 or an errno. */
int capsem_guard_install(void);

#endif
