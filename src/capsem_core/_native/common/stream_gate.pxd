# The gate between a file's read-ahead and the readers of its map (stream_gate.h), declared
# once for the modules that share it: the read-ahead advances it, the page readers follow it.
from libc.stdint cimport uint64_t

cdef extern from "stream_gate.h" nogil:
    ctypedef struct capsem_stream_gate:
        pass
    const char *CAPSEM_STREAM_GATE_CAPSULE
    capsem_stream_gate *capsem_gate_new()
    void capsem_gate_hold(capsem_stream_gate *g)
    void capsem_gate_drop(capsem_stream_gate *g)
    void capsem_gate_advance(capsem_stream_gate *g, uint64_t passed)
    void capsem_gate_close(capsem_stream_gate *g)
    uint64_t capsem_gate_passed(capsem_stream_gate *g)
    int capsem_gate_open(capsem_stream_gate *g)
    uint64_t capsem_gate_waits(capsem_stream_gate *g)
