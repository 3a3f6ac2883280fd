# Included by _archive.pyx (one extension module; the file split is by concept): the verify kernel
# over scanned arrays.

# --- the verify kernel ----------------------------------------------------------------------

VerifyOutcome = collections.namedtuple("VerifyOutcome", "status err_index got errors")
VerifyOutcome.__doc__ = ("Raw kernel result: per-body status (0 = verified), index into errors (-1 none), "
                         "the digest the bytes hashed to (body-hash mismatches only), and the list of "
                         "ArchiveFault archive errors.")


cdef object _i64(a):
    return np.ascontiguousarray(a, dtype=np.int64)


def verify_bodies(bodies_path, blocks, bodies, int threads=0, progress=None, bint use_libdeflate=True):
    """Read every body of `bodies` (scan_bodies arrays, archive order) back through its segment
    hashes and its own hash. `blocks` are scan_blocks arrays (each block's committed extent is
    read ahead). use_libdeflate inflates each deflate segment with its own libdeflate call,
    falling back to the streaming reader on any failure; False streams every segment through
    zlib. Returns a VerifyOutcome; results are the same for any thread count.
    progress(bytes_done, bodies_done) is called from this thread a few times per second.
    Opens and maps `bodies_path` for the call; verify_bodies_with uses a reader's map."""
    path = Path(os.fspath(bodies_path))
    cdef bytes cpath = os.fsencode(path)
    cdef _VerifyArrays arrays = _VerifyArrays(blocks, bodies)
    if arrays.n == 0:
        return arrays.outcome([])
    cdef capsem_archive_file f
    f.fd = -1
    f.map = NULL
    f.size = 0
    _open_archive(&f, path, cpath)
    try:
        return _run_kernel(&f, arrays, threads, progress, use_libdeflate, None)
    finally:
        capsem_file_close(&f)


def verify_bodies_with(ArchiveReader reader not None, blocks, bodies, int threads=0, progress=None,
                       bint use_libdeflate=True, ExtentWalk walk=None, out=None, out_offset=None,
                       KernelBuffers buffers=None):
    """verify_bodies over the map of an open ArchiveReader (its file header already checked
    at open): the archive is not opened again. The map is first refreshed to the file's
    size; the reader is busy meanwhile (any other use of it raises RuntimeError). ``walk``:
    this reader's walk_extents over exactly these blocks with no failures; the kernel then
    takes every segment header from it instead of parsing it again (a walk of other blocks
    is not used).

    With ``out`` (a writable contiguous uint8 buffer) and ``out_offset`` (one int64 per
    body), the same pass also hands the bytes out: every body that verifies is copied to
    out[out_offset[i] : out_offset[i] + body_len[i]], by the worker that hashed it, with the
    GIL released; a body that fails leaves its slot as it was. ValueError before any work
    when a slot of a body whose span is in bounds does not fit in ``out``.

    ``buffers``: a KernelBuffers the workers borrow their working buffers from and give back
    (RuntimeError when another run has them)."""
    cdef _VerifyArrays arrays = _VerifyArrays(blocks, bodies)
    cdef uint8_t[::1] vout
    reader._check_open()
    if walk is not None and not walk.failures and np.array_equal(walk.block_offset, arrays.k_blk):
        arrays.walk = walk
    if (out is None) != (out_offset is None):
        raise ValueError("out and out_offset go together")
    if out is not None:
        vout = out
        arrays.set_output(vout, out_offset)
    if arrays.n == 0:
        return arrays.outcome([])
    return _run_on_reader(reader, arrays, threads, progress, use_libdeflate, buffers)


cdef object _run_on_reader(ArchiveReader reader, _VerifyArrays arrays, int threads, progress, bint use_libdeflate,
                           KernelBuffers buffers):
    """The kernel over the reader's map, refreshed first; the reader (and the buffers) busy
    meanwhile."""
    if buffers is not None and buffers.busy:
        raise RuntimeError("KernelBuffers are lent to one kernel run at a time")
    reader._refresh()
    reader.busy = True
    if buffers is not None:
        buffers.busy = True
    try:
        return _run_kernel(&reader.f, arrays, threads, progress, use_libdeflate, buffers)
    finally:
        reader.busy = False
        if buffers is not None:
            buffers.busy = False


def verify_bodies_into_bytes(ArchiveReader reader not None, blocks, bodies, int threads=0, bint use_libdeflate=True,
                             KernelBuffers buffers=None):
    """verify_bodies_with, every body that verifies written by the worker that hashed it
    straight into a bytes object of its own (no batch buffer between: Ledger.bodies hands
    these out). Returns (VerifyOutcome, list): the list holds each body's bytes, or None for
    a body that did not verify (its object, never filled, is dropped here)."""
    cdef _VerifyArrays arrays = _VerifyArrays(blocks, bodies)
    reader._check_open()
    arrays.set_destinations()
    if arrays.n == 0:
        return arrays.outcome([]), []
    outcome = _run_on_reader(reader, arrays, threads, None, use_libdeflate, buffers)
    datas = arrays.datas
    for i in np.flatnonzero(outcome.status).tolist():
        datas[i] = None
    return outcome, datas


cdef class _VerifyArrays:
    """The kernel's inputs as contiguous arrays (checked for equal lengths, blocks in offset
    order) and its output arrays."""
    cdef object b_blk, b_off, b_len, b_dig, b_ok, k_blk, k_disk
    cdef object status, err_index, got
    cdef object out_offset
    cdef uint8_t[::1] out
    cdef bint has_out
    cdef uint8_t **out_at  # set_destinations: each body's bytes object's buffer
    cdef list datas
    cdef ExtentWalk walk
    cdef size_t n

    def __cinit__(self, blocks, bodies):
        self.b_blk = _i64(bodies["block_offset"]); self.b_off = _i64(bodies["body_offset"])
        self.b_len = _i64(bodies["body_len"])
        self.b_dig = np.ascontiguousarray(bodies["digest"], dtype=np.uint8).reshape(-1, 32)
        self.b_ok = np.ascontiguousarray(bodies["hash_ok"], dtype=np.uint8)
        k_blk = _i64(blocks["block_offset"]); k_disk = _i64(blocks["disk_len"])
        self.n = self.b_blk.shape[0]
        if not (self.b_off.shape[0] == self.b_len.shape[0] == self.b_dig.shape[0] == self.b_ok.shape[0] == self.n):
            raise ValueError("body arrays differ in length")
        if k_blk.shape[0] != k_disk.shape[0]:
            raise ValueError("block arrays differ in length")
        if k_blk.shape[0] > 1 and np.any(k_blk[1:] < k_blk[:k_blk.shape[0] - 1]):
            order = np.argsort(k_blk, kind="stable")
            k_blk = k_blk[order]; k_disk = k_disk[order]
        self.k_blk = k_blk; self.k_disk = k_disk
        self.out_at = NULL
        self.status = np.zeros(self.n, np.uint8)
        self.err_index = np.full(self.n, -1, np.int32)
        self.got = np.zeros((self.n, 32), np.uint8)

    cdef set_output(self, uint8_t[::1] out, out_offset):
        offsets = _i64(out_offset)
        if offsets.shape[0] != self.n:
            raise ValueError("out_offset differs in length from the body arrays")
        # A length out of a block's bounds is refused by the kernel and never copied: it
        # needs no slot (and no sum below can overflow).
        lens = np.where((self.b_len < 0) | (self.b_len > CAPSEM_MAX_BLOCK_RAW_BYTES), 0, self.b_len)
        if self.n and (np.any(offsets < 0) or np.any(offsets > out.shape[0] - lens)):
            raise ValueError("a body's slot does not fit in the output buffer")
        self.out = out
        self.out_offset = offsets
        self.has_out = True

    def __dealloc__(self):
        free(self.out_at)

    cdef set_destinations(self):
        """One bytes object per body, of its length (empty for a length out of a block's
        bounds, which the kernel refuses and never copies), as the kernel's destinations."""
        cdef const int64_t[::1] vl = self.b_len
        cdef Py_ssize_t i, n = self.n
        cdef int64_t length
        self.out_at = <uint8_t **>malloc(max(n, 1) * sizeof(uint8_t *))
        if self.out_at == NULL:
            raise MemoryError()
        self.datas = [None] * n
        for i in range(n):
            length = vl[i]
            if length < 0 or length > CAPSEM_MAX_BLOCK_RAW_BYTES:
                length = 0
            data = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>length)
            self.datas[i] = data
            self.out_at[i] = <uint8_t *>PyBytes_AS_STRING(data)

    cdef object outcome(self, list errors):
        return VerifyOutcome(self.status, self.err_index, self.got, errors)


cdef class KernelBuffers:
    """Working buffers lent to kernel run after kernel run (a bulk read in batches): each
    worker's block buffer, cursor and inflater buffers, kept between runs instead of mapped
    and faulted afresh each time. Held until this object goes; one run at a time."""
    cdef capsem_verify_buffers *b
    cdef bint busy

    def __cinit__(self):
        self.b = capsem_verify_buffers_new()
        if self.b == NULL:
            raise MemoryError()
        self.busy = False

    def __dealloc__(self):
        capsem_verify_buffers_free(self.b)


cdef object _run_kernel(capsem_archive_file *f, _VerifyArrays a, int threads, progress, bint use_libdeflate,
                        KernelBuffers buffers):
    """The kernel over the map f (a fixed view: it never reads past f.size)."""
    cdef const int64_t[::1] vb = a.b_blk, vo = a.b_off, vl = a.b_len, kb = a.k_blk, kd = a.k_disk
    cdef const uint8_t[:, ::1] vd = a.b_dig
    cdef const uint8_t[::1] vk = a.b_ok
    cdef uint8_t[::1] vs = a.status
    cdef int32_t[::1] ve = a.err_index
    cdef uint8_t[:, ::1] vg = a.got
    cdef capsem_verify_spec spec
    spec.base = f.map
    spec.size = f.size
    spec.nblocks = kb.shape[0]
    spec.blk_offset = &kb[0] if kb.shape[0] else NULL
    spec.blk_disk_len = &kd[0] if kd.shape[0] else NULL
    spec.nbodies = a.n
    spec.block_offset = &vb[0]
    spec.body_offset = &vo[0]
    spec.body_len = &vl[0]
    spec.digest = &vd[0, 0]
    spec.hash_ok = &vk[0]
    spec.status = &vs[0]
    spec.err_index = &ve[0]
    spec.got = &vg[0, 0]
    cdef const int64_t[::1] voo
    spec.out = NULL
    spec.out_offset = NULL
    if a.has_out:
        voo = a.out_offset
        spec.out = &a.out[0] if a.out.shape[0] else NULL
        spec.out_offset = &voo[0]
    spec.out_at = a.out_at
    spec.threads = threads
    spec.use_libdeflate = use_libdeflate
    spec.segs = NULL
    spec.seg_first = NULL
    spec.lend = NULL if buffers is None else buffers.b
    cdef const int64_t[::1] vf
    if a.walk is not None and a.walk.table.n > 0:
        a.walk.settle()
        vf = a.walk.seg_first
        spec.segs = a.walk.table.refs
        spec.seg_first = &vf[0]
    cdef capsem_verify_job *job = NULL
    cdef int done = 0
    cdef int rc = 0
    cdef uint64_t bytes_done = 0, bodies_done = 0
    cdef size_t i
    errors = []
    try:
        with nogil:
            job = capsem_verify_start(&spec)
        if job == NULL:
            raise MemoryError("could not start the verify workers")
        try:
            while not done:
                with nogil:
                    done = capsem_verify_wait(job, 250, &bytes_done, &bodies_done)
                if progress is not None:
                    progress(bytes_done, bodies_done)
                PyErr_CheckSignals()
        except BaseException:
            capsem_verify_cancel(job)
            raise
        finally:
            with nogil:
                rc = capsem_verify_finish(job)
        if rc != 0:
            raise MemoryError("the verify workers ran out of memory")
        for i in range(capsem_verify_error_count(job)):
            errors.append(_fault(capsem_verify_error(job, i)))
    finally:
        if job != NULL:
            capsem_verify_free(job)
    return a.outcome(errors)
