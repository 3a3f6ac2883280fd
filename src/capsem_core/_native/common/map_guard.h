/* A per-thread guard against SIGBUS from a read-only file map (session.bodies, session.db).
 * A file cut short after it was mapped (truncated by another process, a copy in flight)
 * makes any touch of a page past its new end raise SIGBUS; unguarded, that kills the
 * process. While a thread runs guarded code (capsem_guard_armed set after a sigsetjmp on
 * capsem_guard_env), the handler jumps back to the guard instead, and the caller reports a
 * file that shrank. Faults outside guarded code go to whatever handler was installed before
 * ours. Each extension module links its own copy; their handlers chain. */
#ifndef CAPSEM_MAP_GUARD_H
#define CAPSEM_MAP_GUARD_H

#include <setjmp.h>
#include <signal.h>

extern __thread sigjmp_buf capsem_guard_env;
extern __thread volatile sig_atomic_t capsem_guard_armed;

/* Install the SIGBUS handler once per process (per module); 0 or an errno. */
int capsem_guard_install(void);

#endif
