# Included by _archive.pyx (one extension module; the file split is by concept): read-ahead of
# a ledger's files ahead of a check's readers (archive_ahead.h).

from cpython.pycapsule cimport PyCapsule_GetPointer

from stream_gate cimport CAPSEM_STREAM_GATE_CAPSULE, capsem_stream_gate

cdef extern from "archive_ahead.h" nogil:
    unsigned CAPSEM_AHEAD_CHUNK
    ctypedef struct capsem_ahead:
        pass
    capsem_ahead *capsem_ahead_new(uint64_t limit, int advice_only)
    int capsem_ahead_add(capsem_ahead *a, int fd, uint64_t size, capsem_stream_gate *gate)
    uint64_t capsem_ahead_done(capsem_ahead *a)
    uint64_t capsem_ahead_passed(capsem_ahead *a)
    void capsem_ahead_free(capsem_ahead *a)

READ_AHEAD_CHUNK = CAPSEM_AHEAD_CHUNK


cdef class ReadAhead:
    """One thread reading files into the page cache ahead of their readers, in file order,
    one file after another as they are added, at most ``limit`` bytes in all (on Linux by
    sendfile into /dev/null, else, or with ``advice_only``, by WILLNEED advice; nothing is
    copied into the process). ``add(fd, size)``
    takes a descriptor the caller keeps open (a PageFile's or an ArchiveReader's fileno()):
    it is duplicated, not opened again. ``close()`` stops the thread and joins it (within one
    chunk's read); also on garbage collection."""

    cdef capsem_ahead *a

    def __cinit__(self, uint64_t limit, bint advice_only=False):
        self.a = capsem_ahead_new(limit, advice_only)
        if self.a == NULL:
            raise MemoryError()

    def add(self, int fd, uint64_t size, gate=None):
        """Read [0, size) of the file open at ``fd`` after the files added before; OSError
        when it cannot be taken (a closed descriptor, too many files). ``gate``: a
        ``_pages.StreamGate``'s ``capsule()``, advanced as the file is read and closed when
        the read-ahead leaves it (done, over its limit, closed) or cannot take it."""
        if self.a == NULL:
            raise ValueError("the read-ahead is closed")
        cdef capsem_stream_gate *g = NULL
        if gate is not None:
            g = <capsem_stream_gate *>PyCapsule_GetPointer(gate, CAPSEM_STREAM_GATE_CAPSULE)
        cdef int err = capsem_ahead_add(self.a, fd, size, g)
        if err:
            raise OSError(err, os.strerror(err))

    @property
    def asked(self):
        """Bytes asked of the kernel so far (a chunk found in the page cache is not asked for)."""
        return 0 if self.a == NULL else capsem_ahead_done(self.a)

    @property
    def passed(self):
        """Bytes gone through so far: asked for, or found in the page cache already."""
        return 0 if self.a == NULL else capsem_ahead_passed(self.a)

    def close(self):
        cdef capsem_ahead *a = self.a
        self.a = NULL
        with nogil:
            capsem_ahead_free(a)

    def __dealloc__(self):
        capsem_ahead_free(self.a)
