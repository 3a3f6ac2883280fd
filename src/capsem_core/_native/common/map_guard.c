/* The SIGBUS handler behind every guarded read of a file map (see map_guard.h). */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "map_guard.h"

__thread sigjmp_buf capsem_guard_env;
__thread volatile sig_atomic_t capsem_guard_armed;

static struct sigaction previous;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int install_errno;

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    if (capsem_guard_armed) {
        capsem_guard_armed = 0;
        siglongjmp(capsem_guard_env, 1);
    }
    /* Not a read of ours: hand the fault to the handler that was there before. */
    if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction) {
        previous.sa_sigaction(sig, info, context);
    } else if (!(previous.sa_flags & SA_SIGINFO) && previous.sa_handler != SIG_DFL &&
               previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
    } else {
        /* Default action: returning re-runs the faulting access, which now terminates. */
        signal(SIGBUS, SIG_DFL);
    }
}

static void install(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &previous) != 0) install_errno = errno;
}

int capsem_guard_install(void) {
    pthread_once(&once, install);
    return install_errno;
}
