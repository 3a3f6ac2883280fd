# Included by _archive.pyx (one extension module; the file split is by concept): extent
# fingerprints for the verification record.

# --- extent fingerprints (the verification record) ---------------------------------------

cdef extern from "archive_extents.h" nogil:
    ctypedef struct capsem_extents_job:
        pass
    ctypedef struct capsem_extents_spec:
        const uint8_t *base
        uint64_t size
        size_t n
        const int64_t *offset
        const int64_t *length
        uint8_t *disk_hash
        uint8_t *segments
        uint8_t *status
        int threads
    capsem_extents_job *capsem_extents_start(const capsem_extents_spec *spec)
    int capsem_extents_wait(capsem_extents_job *job, int timeout_ms, uint64_t *bytes_done)
    void capsem_extents_cancel(capsem_extents_job *job)
    void capsem_extents_free(capsem_extents_job *job)
    uint8_t CAPSEM_EXTENT_HASHED, CAPSEM_EXTENT_PAST_END, CAPSEM_EXTENT_SHRANK, CAPSEM_EXTENT_UNCHAINED
    uint8_t CAPSEM_EXTENT_SKIPPED

EXTENT_HASHED = CAPSEM_EXTENT_HASHED
EXTENT_PAST_END = CAPSEM_EXTENT_PAST_END
EXTENT_SHRANK = CAPSEM_EXTENT_SHRANK
EXTENT_UNCHAINED = CAPSEM_EXTENT_UNCHAINED

ExtentPrints = collections.namedtuple("ExtentPrints", "disk_hash segments status")
ExtentPrints.__doc__ = ("Fingerprints of extents: (n, 32) BLAKE3 digests of each extent's on-disk bytes, (n, 32) "
                        "digests of its segment headers' hashes in order, and the per-extent outcome "
                        "(EXTENT_HASHED, EXTENT_PAST_END, EXTENT_SHRANK, EXTENT_UNCHAINED).")


def hash_extents(ArchiveReader reader not None, offsets, lengths, int threads=0):
    """Fingerprint the extents [offsets[i], offsets[i] + lengths[i]) of the reader's map, on
    ``threads`` workers (0: one per core) with the GIL released: an ExtentPrints. Nothing is
    inflated. The map is first refreshed to the file's size; an extent outside it is
    EXTENT_PAST_END, one the file shrank under EXTENT_SHRANK (its digests are then zero).
    Interruptible: a signal stops the workers after their current extent and raises."""
    cdef object offs = _i64(offsets), lens = _i64(lengths)
    if offs.shape[0] != lens.shape[0]:
        raise ValueError("offsets and lengths differ in length")
    cdef Py_ssize_t n = offs.shape[0]
    disk_hash = np.zeros((n, 32), np.uint8)
    segments = np.zeros((n, 32), np.uint8)
    status = np.zeros(n, np.uint8)
    reader._check_open()
    if n == 0:
        return ExtentPrints(disk_hash, segments, status)
    reader._refresh()
    cdef const int64_t[::1] vo = offs, vl = lens
    cdef uint8_t[:, ::1] vh = disk_hash, vs = segments
    cdef uint8_t[::1] vt = status
    cdef capsem_extents_spec spec
    spec.base = reader.f.map
    spec.size = reader.f.size
    spec.n = n
    spec.offset = &vo[0]
    spec.length = &vl[0]
    spec.disk_hash = &vh[0, 0]
    spec.segments = &vs[0, 0]
    spec.status = &vt[0]
    spec.threads = threads
    cdef capsem_extents_job *job = NULL
    cdef int done = 0
    reader.busy = True
    try:
        with nogil:
            job = capsem_extents_start(&spec)
        if job == NULL:
            raise MemoryError("could not start the extent hashing workers")
        try:
            while not done:
                with nogil:
                    done = capsem_extents_wait(job, 250, NULL)
                PyErr_CheckSignals()
        except BaseException:
            capsem_extents_cancel(job)
            raise
        finally:
            with nogil:
                capsem_extents_free(job)
    finally:
        reader.busy = False
    return ExtentPrints(disk_hash, segments, status)
