# Included by _pages.pyx (one extension module; the file split is by concept): the gate a
# PageFile's scans follow behind a read-ahead of the file (stream_gate.h).

from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New

from stream_gate cimport *


cdef void _drop_gate_capsule(object capsule) noexcept:
    capsem_gate_drop(<capsem_stream_gate *>PyCapsule_GetPointer(capsule, CAPSEM_STREAM_GATE_CAPSULE))


cdef class StreamGate:
    """How far a read-ahead has read a file into the page cache: the read-ahead advances it
    (``_archive.ReadAhead.add(..., gate=gate.capsule())``) and closes it when it leaves the
    file; a ``PageFile`` following it (``PageFile.follow``) reads no page past it while it is
    open, waiting instead. ``advance`` and ``close`` are the read-ahead's; tests call them."""

    cdef capsem_stream_gate *g

    def __cinit__(self):
        self.g = capsem_gate_new()
        if self.g == NULL:
            raise MemoryError()

    def __dealloc__(self):
        capsem_gate_drop(self.g)

    def advance(self, uint64_t passed):
        """Bytes [0, passed) of the file are read (the gate never moves back)."""
        capsem_gate_advance(self.g, passed)

    def close(self):
        """No more of the file will be read: nobody waits on the gate from now on."""
        capsem_gate_close(self.g)

    @property
    def passed(self):
        return capsem_gate_passed(self.g)

    @property
    def open(self):
        return bool(capsem_gate_open(self.g))

    @property
    def waits(self):
        """Times a reader found a page past the gate and waited."""
        return capsem_gate_waits(self.g)

    def capsule(self):
        """The gate for another native module (a PyCapsule holding its own reference)."""
        capsem_gate_hold(self.g)
        return PyCapsule_New(self.g, CAPSEM_STREAM_GATE_CAPSULE, _drop_gate_capsule)
