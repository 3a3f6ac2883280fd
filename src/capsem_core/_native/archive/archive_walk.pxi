# Included by _archive.pyx (one extension module; the file split is by concept): the extent
# walk, many extents' segment headers parsed in one pass for the verify kernel
# (ArchiveReader.walk_extents), and the walk of zlib's rules started ahead of the kernel.

# --- the extent walk ----------------------------------------------------------------------

cdef class ExtentWalk:
    """What ArchiveReader.walk_extents found: per extent (in the order given) its raw_len and
    segment count (0 for a failed one), the failures as (position, ArchiveError), the sound
    extents holding an empty segment that is not what an empty segment is (``empty_faults``:
    (position, the first such segment's offset, how many); no body reaches one, so nothing
    else sees it), and the parsed segment headers, kept natively for the verify kernel."""
    cdef capsem_segment_table table
    cdef capsem_rules_ahead *rules
    cdef readonly object block_offset, raw_len, segments, seg_first
    cdef readonly list failures
    cdef readonly list empty_faults

    def __dealloc__(self):
        capsem_rules_ahead_finish(self.rules)   # it writes into the table
        capsem_segment_table_free(&self.table)

    cdef _walk(self, ArchiveReader reader, offs, lens, bint rules):
        """Fill this walk from ``reader``'s file: the extents at ``offs`` of lengths ``lens``
        (int64 arrays of one length, checked by ArchiveReader.walk_extents, whose work this
        is; the reader is open)."""
        cdef Py_ssize_t n = offs.shape[0], i
        self.block_offset = offs
        self.raw_len = np.zeros(n, np.int64)
        self.segments = np.zeros(n, np.int64)
        self.seg_first = np.zeros(n + 1, np.int64)
        self.failures = []
        self.empty_faults = []
        cdef const int64_t[::1] vo = offs, vl = lens
        cdef int64_t[::1] vr = self.raw_len, vs = self.segments, vf = self.seg_first
        cdef capsem_extent ext
        cdef capsem_error e
        cdef capsem_status st
        cdef uint64_t b, d
        cdef size_t kept
        cdef int refreshed = 0
        cdef uint64_t asked = 0
        cdef capsem_drop_batch dropped
        dropped.lo = dropped.hi = 0
        # Flushed however the walk ends (a MemoryError, an interrupt): no batch stays mapped.
        try:
            for i in range(n):
                vf[i] = <int64_t>self.table.n
                if vo[i] < 0:
                    self.failures.append((i, _errors.error(CAPSEM_E_BLOCK_HEADER, reader.path, at=vo[i])))
                    continue
                if vl[i] < 0:
                    self.failures.append((i, _errors.error(CAPSEM_R_EXTENT_LENGTH, reader.path, at=vo[i], size=vl[i])))
                    continue
                b = <uint64_t>vo[i]
                d = <uint64_t>vl[i]
                if (b + d > reader.f.size or b + d < b) and not refreshed:
                    capsem_drop_batch_flush(&dropped, reader.f.map, reader.f.size)  # its spans are of this map
                    reader._refresh()  # once: the file may have grown since it was mapped
                    refreshed = 1
                kept = self.table.n
                if rules and b + d > asked and b < reader.f.size:
                    # The rules walk reads every payload next: the file is asked for a window
                    # ahead of the headers (from a cold cache one fault per header otherwise).
                    asked = (b + CAPSEM_RULES_AHEAD_WINDOW if reader.f.size - b > CAPSEM_RULES_AHEAD_WINDOW
                             else reader.f.size)
                    capsem_map_advise(reader.f.map, reader.f.size, b, asked, ADVICE_WILLNEED, 0)
                with nogil:
                    st = capsem_guarded_walk_extent(reader.f.map, reader.f.size, b, d, &ext, &e, &self.table)
                    # Headers only, each at most once: the pages they lie on need not stay mapped.
                    capsem_drop_batch_add(&dropped, reader.f.map, reader.f.size, b,
                                          b + d if b + d <= reader.f.size else reader.f.size)
                if st == CAPSEM_E_NOMEM:
                    raise MemoryError("no memory for the segment table")
                if st != CAPSEM_OK:
                    capsem_segment_table_truncate(&self.table, kept)
                    self.failures.append((i, _errors.error(capsem_report_code(e.status, e.hash_mismatch), reader.path,
                                                           at=e.at, codec=e.codec, detail=_detail(&e))))
                    continue
                vr[i] = <int64_t>ext.raw_len
                if ext.empty_faults:
                    self.empty_faults.append((i, <int64_t>ext.empty_fault_at, <int64_t>ext.empty_faults))
                vs[i] = <int64_t>ext.segments
        finally:
            capsem_drop_batch_flush(&dropped, reader.f.map, reader.f.size)
        vf[n] = <int64_t>self.table.n
        cdef int err = 0
        if rules and self.table.n and not self.failures:
            # Only a head start: where no thread can run, the kernel walks every payload. A
            # walk with failures is one the kernel does not take: nothing to walk ahead for.
            self.rules = capsem_rules_ahead_start(reader.f.fd, self.table.refs, self.table.n, &err)

    cdef void settle(self) noexcept:
        """Stop the rules walk where it is (the kernel walks what it did not reach): after
        this the table is the kernel's to read."""
        cdef capsem_rules_ahead *r = self.rules
        self.rules = NULL
        with nogil:
            capsem_rules_ahead_finish(r)

    def rules_settled(self):
        """Wait for the rules walk started by ``walk_extents(rules=True)`` to end and return
        how many deflate payloads it found zlib accepts (0 without one, or once the kernel or
        an earlier call has settled it)."""
        cdef capsem_rules_ahead *r = self.rules
        cdef size_t i, ok = 0
        if r == NULL:
            return 0
        self.rules = NULL
        with nogil:
            capsem_rules_ahead_wait(r)
            capsem_rules_ahead_finish(r)
        for i in range(self.table.n):
            ok += self.table.refs[i].zlib_ok
        return ok

    @property
    def segment_count(self):
        """Segment headers kept (every segment of every sound extent)."""
        return self.table.n
