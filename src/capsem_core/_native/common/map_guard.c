/* The fault handler behind every guarded read of a file map (see map_guard.h). */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "map_guard.h"

__thread sigjmp_buf capsem_guard_env;
__thread volatile sig_atomic_t capsem_guard_armed;
__thread volatile uintptr_t capsem_guard_lo, capsem_guard_hi;

/* The handlers that were there before ours, per signal. */
static struct sigaction previous_bus, previous_segv;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int install_errno;

void capsem_guard_range(const uint8_t *base, uint64_t size) {
    long page_size = sysconf(_SC_PAGESIZE);
    uintptr_t page = page_size > 0 ? (uintptr_t)page_size : 4096;
    capsem_guard_lo = (uintptr_t)base;
    capsem_guard_hi = ((uintptr_t)base + (uintptr_t)size + page - 1) / page * page;
}

static int fault_is_ours(int sig, const siginfo_t *info) {
    if (!capsem_guard_armed) return 0;
    if (sig == SIGBUS) return 1;
    uintptr_t at = (uintptr_t)info->si_addr;
    return at >= capsem_guard_lo && at < capsem_guard_hi;
}

static void on_fault(int sig, siginfo_t *info, void *context) {
    if (fault_is_ours(sig, info)) {
        capsem_guard_armed = 0;
        siglongjmp(capsem_guard_env, 1);
    }
    /* Not a read of ours: hand the fault to the handler that was there before. */
    const struct sigaction *prev = sig == SIGBUS ? &previous_bus : &previous_segv;
    if ((prev->sa_flags & SA_SIGINFO) && prev->sa_sigaction) {
        prev->sa_sigaction(sig, info, context);
    } else if (!(prev->sa_flags & SA_SIGINFO) && prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        prev->sa_handler(sig);
    } else {
        /* Default action. A fault would come back when the access re-runs, but a signal sent
         * by kill() would not: raise it again, so both end the process by that signal. */
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

static void install(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &previous_bus) != 0) install_errno = errno;
    else if (sigaction(SIGSEGV, &action, &previous_segv) != 0) install_errno = errno;
}

int capsem_guard_install(void) {
    pthread_once(&once, install);
    return install_errno;
}
