/* A gate between a read-ahead streaming a file into the page cache and the readers of that
 * file's map: how far the stream has read, so a reader about to touch a page the stream has
 * not reached waits for it rather than fault it in alone.
 *
 * From a cold cache a reader that runs ahead of the stream (a tree scan jumping from page to
 * page across the file) reads each missing page by its own fault: a small read at a random
 * place the disk serves between the stream's large ones, slowing both. Behind the stream
 * every page it touches is already there. The read-ahead advances the gate after each chunk
 * it has read (or found cached), and closes it when it leaves the file for any reason (done,
 * over its budget, stopped, failed): from then on nobody waits. A reader waits only while
 * the gate is open, and gives up waiting when its cancel flag is set.
 *
 * The gate is shared by two native modules (the read-ahead's and the page readers'), handed
 * between them as a PyCapsule, and counted: each holder drops its reference when done, the
 * last frees it. */
#ifndef CAPSEM_STREAM_GATE_H
#define CAPSEM_STREAM_GATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct capsem_stream_gate {
    _Atomic uint64_t passed; /* bytes [0, passed) of the file are read */
    _Atomic int open;        /* 0 once the stream will read no more of the file */
    _Atomic int refs;
    _Atomic uint64_t waits;  /* times a reader waited (for tests and tuning) */
    pthread_mutex_t lock;
    pthread_cond_t moved;    /* broadcast on every advance and on close */
} capsem_stream_gate;

/* The name of the PyCapsule that carries a gate between modules. */
#define CAPSEM_STREAM_GATE_CAPSULE "capsem_stream_gate"

/* A new open gate at 0, with one reference; NULL when memory ran out. */
capsem_stream_gate *capsem_gate_new(void);
void capsem_gate_hold(capsem_stream_gate *g);
/* Drop a reference; the last frees the gate. NULL is ignored. */
void capsem_gate_drop(capsem_stream_gate *g);
/* The stream has read [0, passed) (never moves back). */
void capsem_gate_advance(capsem_stream_gate *g, uint64_t passed);
/* The stream reads no more: every waiter goes on, and no reader waits again. */
void capsem_gate_close(capsem_stream_gate *g);
uint64_t capsem_gate_passed(capsem_stream_gate *g);
int capsem_gate_open(capsem_stream_gate *g);
uint64_t capsem_gate_waits(capsem_stream_gate *g);
/* Wait, while the gate is open and *cancel (when given) is 0, until [0, end) is read. */
void capsem_gate_wait_slow(capsem_stream_gate *g, uint64_t end, volatile const int *cancel);

/* Before reading bytes below `end` of the followed file. NULL: no stream to follow. */
static inline void capsem_gate_wait(capsem_stream_gate *g, uint64_t end, volatile const int *cancel) {
    if (g && atomic_load_explicit(&g->passed, memory_order_acquire) < end &&
        atomic_load_explicit(&g->open, memory_order_acquire))
        capsem_gate_wait_slow(g, end, cancel);
}

#endif
