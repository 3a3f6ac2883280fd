# Included by _archive.pyx (one extension module; the file split is by concept): the reader and
# its block cache (the walk of many extents it starts is archive_walk.pxi's).

# --- the reader ---------------------------------------------------------------------------

# Cursors a reader's block cache may hold, whatever its byte budget: the lookup is a linear
# scan, and 64 blocks of the smallest size a writer seals already make a generous cache.
MAX_CACHED_BLOCKS = 64
cdef enum:
    MAX_POOL = 64
# What a cursor costs beyond its raw buffer (its inflate state and window), counted against
# the cache's budget so many tiny blocks cannot hold more memory than the budget says.
cdef size_t CURSOR_OVERHEAD = 48 << 10


cdef class ArchiveReader:
    """A reader of one session.bodies file with Capsem's block cursor, or a cache of them.

    Not shareable between threads (like Capsem's reader): one reader per thread, or a lock
    around it. The file is memory-mapped; the map is refreshed when a read needs bytes past
    it, so a reader follows a writer appending to the same open block.

    ``use_libdeflate`` (the default) inflates a deflate block's segments with libdeflate, one
    call each behind its window, as the verify kernel does (about three times zlib's streaming
    inflate), with zlib's stream taking over where that fails, so every error reads as before;
    False keeps zlib's stream alone, Capsem's reader.

    ``cache_bytes`` bounds a cache of inflated blocks: each cached block keeps its cursor
    (its inflated prefix and its inflate stream), so a read that lands in a cached block
    inflates nothing when its span is already held, and only the segments past the held
    prefix otherwise. Least recently used blocks are dropped once the cursors' buffers (plus
    a fixed 48 KiB each for the inflate state), the verified segments' table and its scratch
    buffer exceed the budget, and at most MAX_CACHED_BLOCKS are kept; 0 (the default) keeps
    one cursor, Capsem's protocol. ``held_bytes`` says what it holds now.

    With a cache, the reader also remembers every segment it has verified (a sixteenth of the
    budget, 64 bytes a segment; archive_verified.h): a ``read_verified`` that misses the cache
    but whose span lies in remembered segments inflates its block only up to the span's end,
    or those segments whole with libdeflate where that is cheaper, without hashing them
    again, into a scratch buffer, and leaves the cache as it was. Its body hash is checked
    either way; a mismatch, or any surprise in the remembered segments, is read again
    through a cursor, which verifies every segment and names the failing one. ``read`` (no
    body hash to check) always takes a cursor.
    """
    cdef capsem_archive_file f
    cdef capsem_cursor *c  # the cursor of the last read (one of pool)
    cdef capsem_cursor *pool[MAX_POOL]
    cdef capsem_inflater *fast  # NULL: zlib only
    cdef capsem_verified *verified  # NULL: no cache, so no segments remembered
    cdef const uint8_t *served  # the raw bytes of the last read's block, from [0, its end)
    cdef bint served_verified  # the last read came from remembered segments
    cdef uint64_t verified_blocks, verified_segments
    cdef uint64_t last_use[MAX_POOL]
    cdef int npool
    cdef uint64_t tick
    cdef size_t budget
    # Counters of cursors the cache dropped, so blocks_inflated counts every inflate.
    cdef uint64_t dropped_blocks, dropped_segments
    cdef readonly object path
    cdef bytes cpath
    cdef bint busy

    def __cinit__(self, path, cache_bytes=0, *, bint use_libdeflate=True):
        self.c = NULL
        self.fast = NULL
        self.verified = NULL
        self.served = NULL
        self.served_verified = False
        self.verified_blocks = 0
        self.verified_segments = 0
        self.npool = 0
        self.tick = 0
        self.dropped_blocks = 0
        self.dropped_segments = 0
        self.f.fd = -1
        self.f.map = NULL
        self.f.size = 0
        self.busy = False
        if cache_bytes < 0:
            raise ValueError("cache_bytes is a byte count (0 or more)")
        self.budget = <size_t>min(cache_bytes, 1 << 62)
        self.path = Path(os.fspath(path))
        self.cpath = os.fsencode(self.path)
        _open_archive(&self.f, self.path, self.cpath)
        self.c = capsem_cursor_new()
        if self.c == NULL:
            capsem_file_close(&self.f)
            raise MemoryError()
        self.pool[0] = self.c
        self.last_use[0] = 0
        self.npool = 1
        if use_libdeflate:
            self.fast = capsem_inflater_new()   # NULL (no entropy, no memory): zlib only
        if self.budget:
            self.verified = capsem_verified_new(self.budget // 16)   # NULL: reads take the cursors

    cdef void _free_cursors(self):
        cdef int k
        for k in range(self.npool):
            capsem_cursor_free(self.pool[k])
            self.pool[k] = NULL
        self.npool = 0
        self.c = NULL
        capsem_inflater_free(self.fast)
        self.fast = NULL
        capsem_verified_free(self.verified)
        self.verified = NULL
        self.served = NULL

    def __dealloc__(self):
        self._free_cursors()
        capsem_file_close(&self.f)

    def close(self):
        self._free_cursors()
        capsem_file_close(&self.f)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    cdef _check_open(self):
        if self.c == NULL:
            raise ValueError("the archive reader is closed")
        if self.busy:
            raise RuntimeError("an ArchiveReader is used by one thread at a time")

    cdef size_t _cache_used(self):
        cdef size_t used = 0
        cdef int k
        for k in range(self.npool):
            used += capsem_cursor_capacity(self.pool[k]) + CURSOR_OVERHEAD
        if self.verified != NULL:
            used += capsem_verified_bytes(self.verified)
        return used

    cdef void _drop(self, int k):
        """Free cached cursor k (never the current one)."""
        self.dropped_blocks += capsem_cursor_blocks_inflated(self.pool[k])
        self.dropped_segments += capsem_cursor_segments_inflated(self.pool[k])
        capsem_cursor_free(self.pool[k])
        self.npool -= 1
        self.pool[k] = self.pool[self.npool]
        self.last_use[k] = self.last_use[self.npool]
        self.pool[self.npool] = NULL

    cdef int _oldest(self, bint spare_current):
        cdef int k, best = -1
        for k in range(self.npool):
            if spare_current and self.pool[k] == self.c:
                continue
            if best < 0 or self.last_use[k] < self.last_use[best]:
                best = k
        return best

    cdef int _cached(self, uint64_t block_offset):
        """The cached cursor holding block_offset, or -1."""
        cdef int k
        for k in range(self.npool):
            if capsem_cursor_active(self.pool[k]) and capsem_cursor_block(self.pool[k]) == block_offset:
                return k
        return -1

    cdef int _choose(self, uint64_t block_offset) except -1:
        """Make self.c the cursor for block_offset: the cached one holding that block, else a
        new cursor while the budget allows, else the least recently used one (restarted)."""
        cdef int k, at = self._cached(block_offset)
        cdef capsem_cursor *fresh
        self.tick += 1
        if at < 0:
            for k in range(self.npool):
                if not capsem_cursor_active(self.pool[k]):
                    at = k  # an idle cursor (discarded after an error): reuse its buffer
                    break
        # A new cursor only while one more block the size of the last read still fits the
        # budget: else every miss would grow a fresh buffer and trim an old one (a map and an
        # unmap of a whole block per read), where restarting the oldest reuses its buffer.
        if (at < 0 and self.budget and self.npool < MAX_POOL
                and self._cache_used() + capsem_cursor_capacity(self.c) + CURSOR_OVERHEAD <= self.budget):
            fresh = capsem_cursor_new()
            if fresh == NULL:
                raise MemoryError()
            at = self.npool
            self.pool[at] = fresh
            self.npool += 1
        if at < 0:
            at = self._oldest(False)
        self.c = self.pool[at]
        self.last_use[at] = self.tick
        return 0

    cdef void _trim(self):
        """Drop least recently used blocks until the cache is within its budget."""
        cdef int k
        while self.npool > 1 and self._cache_used() > self.budget:
            k = self._oldest(True)
            if k < 0:
                return
            self._drop(k)

    cdef bint _refresh(self) except -1:
        """Re-map after growth; True when the mapped size changed."""
        cdef uint64_t before = self.f.size
        cdef int e = capsem_file_refresh(&self.f)
        if e:
            raise _errors.error(CAPSEM_R_IO, self.path, detail=os.strerror(e))
        return self.f.size != before

    cdef _reach(self, uint64_t block_offset, uint64_t end, bint remembered=True):
        """Make self.served hold the block's raw bytes [0, end): from a cached cursor, from
        remembered segments (a cache miss; not when ``remembered`` is False), or from a cursor
        that verifies every segment it inflates (and then remembers them)."""
        cdef capsem_error e
        cdef capsem_status st
        cdef int tries = 0
        cdef uint64_t segments = 0, inflated
        cdef const uint8_t *raw = NULL
        self.busy = True
        self.served = NULL
        self.served_verified = False
        try:
            if remembered and self.verified != NULL and self._cached(block_offset) < 0:
                with nogil:
                    raw = capsem_guarded_verified_read(self.verified, self.fast, self.f.map, self.f.size,
                                                       block_offset, end, &segments)
                if raw != NULL:
                    self.verified_blocks += 1
                    self.verified_segments += segments
                    self.served = raw
                    self.served_verified = True
                    self._trim()  # the scratch buffer may have grown
                    return
            self._choose(block_offset)
            inflated = capsem_cursor_segments_inflated(self.c)
            while True:
                with nogil:
                    st = capsem_guarded_reach(self.c, self.fast, self.f.map, self.f.size, block_offset, end, &e)
                if st == CAPSEM_OK:
                    if self.verified != NULL and capsem_cursor_segments_inflated(self.c) != inflated:
                        with nogil:
                            capsem_guarded_verified_note(self.verified, self.f.map, self.f.size, block_offset,
                                                         capsem_cursor_next_segment(self.c))
                    self.served = capsem_cursor_raw(self.c)
                    if self.npool > 1 or self.verified != NULL:
                        self._trim()
                    return
                # The view may be stale: a writer appended since it was mapped.
                if (st == CAPSEM_E_TRUNCATED or st == CAPSEM_E_BLOCK_HEADER) and tries < 8 and self._refresh():
                    tries += 1
                    continue
                if st == CAPSEM_E_TRUNCATED:
                    capsem_cursor_discard(self.c)
                _raise_error(&e, self.path, block_offset)
        finally:
            self.busy = False

    cdef bytes _read(self, block_offset, offset, length, bint remembered):
        self._check_open()
        end = _span_end(offset, length)
        if end is None:
            raise _errors.error(CAPSEM_E_RANGE, self.path, at=block_offset)
        if block_offset < 0 or block_offset >= 1 << 64:
            raise _errors.error(CAPSEM_E_BLOCK_HEADER, self.path, at=block_offset)
        self._reach(block_offset, end, remembered)
        data = PyBytes_FromStringAndSize(<const char *>self.served + <size_t>offset, <Py_ssize_t>length)
        # Once its bytes are copied out, the scratch buffer goes when the cached cursors leave
        # it no room: the reader then holds its budget plus at most the block being read,
        # as with the cursors alone.
        if self.verified != NULL and self._cache_used() > self.budget:
            capsem_verified_release_buffer(self.verified)
            if self.served_verified:
                self.served = NULL
        return data

    def read(self, block_offset, offset, length):
        """The raw bytes [offset, offset + length) of the block at block_offset, every segment
        they come from verified by the cursor that inflated it (never from remembered
        segments, which only serve reads checked against a body hash: read_verified)."""
        return self._read(block_offset, offset, length, False)

    def read_verified(self, block_offset, offset, length, expected, subject=None):
        """read(), checked: BodyHashMismatch unless BLAKE3 of the bytes is ``expected``.

        ``expected`` is the 32-byte digest, or the row's body_hash text ("blake3:" + 64
        lower-case hex digits), parsed here once; a text that does not parse matches no
        bytes (after the read, whose archive errors come first). ``subject`` (the body's
        event id) is named in the mismatch message when given."""
        cdef uint8_t want[32]
        cdef uint8_t got[32]
        cdef const uint8_t[::1] w
        cdef bytes text
        cdef bint parsed
        if isinstance(expected, str):
            text = expected.encode("utf-8", "surrogateescape")
            parsed = capsem_parse_body_hash(text, len(text), want) == 1
            want_text = expected
        else:
            w = expected
            if w.shape[0] != 32:
                raise ValueError("a body digest is 32 bytes")
            memcpy(want, &w[0], 32)
            parsed = True
            want_text = None
        data = self._read(block_offset, offset, length, True)
        cdef const uint8_t[::1] d = data
        with nogil:
            capsem_blake3_hash(&d[0] if d.shape[0] else NULL, d.shape[0], got)
        if (not parsed or memcmp(got, want, 32) != 0) and self.served_verified:
            # Remembered segments gave other bytes (or no bytes can match): forget them all,
            # and read through a cursor, which verifies each segment and names one that
            # changed, so the error is the one a fresh reader gives.
            capsem_verified_clear(self.verified)
            data = self._read(block_offset, offset, length, False)
            d = data
            with nogil:
                capsem_blake3_hash(&d[0] if d.shape[0] else NULL, d.shape[0], got)
        if not parsed or memcmp(got, want, 32) != 0:
            if want_text is None:
                want_text = BODY_HASH_PREFIX + bytes(want[:32]).hex()
            raise _errors.error(CAPSEM_V_BODY_HASH, self.path, detail=None if subject is None else str(subject),
                                want=want_text, got=BODY_HASH_PREFIX + bytes(got[:32]).hex())
        return data

    def walk_extent(self, block_offset, disk_len):
        """(codec, raw_len, segments, final) of the committed extent, headers only (no inflate).

        BadSegment when the extent does not end exactly on a segment boundary, a segment
        follows a FINAL one or the headers do not chain; TruncatedBlock when the file ends
        inside the extent; BadBlockHeader / UnsupportedCodec for the block header."""
        self._check_open()
        if block_offset < 0 or block_offset >= 1 << 64:
            raise _errors.error(CAPSEM_E_BLOCK_HEADER, self.path, at=block_offset)
        if disk_len < 0 or disk_len >= 1 << 64:
            raise _errors.error(CAPSEM_R_EXTENT_LENGTH, self.path, at=block_offset, size=disk_len)
        cdef capsem_extent ext
        cdef capsem_error e
        cdef capsem_status st
        cdef uint64_t b = block_offset, d = disk_len
        if b + d > self.f.size or b + d < b:
            self._refresh()
        with nogil:
            st = capsem_guarded_walk_extent(self.f.map, self.f.size, b, d, &ext, &e, NULL)
        if st != CAPSEM_OK:
            _raise_error(&e, self.path)
        return ext.codec, ext.raw_len, ext.segments, bool(ext.final)

    def walk_extents(self, block_offsets, disk_lens, *, bint rules=False):
        """walk_extent over many extents in one native pass, keeping the segment headers it
        parsed (an ExtentWalk, which verify_bodies_with takes so the kernel need not parse
        them again). An extent that fails is a (position, ArchiveError) in ``failures``; its
        raw_len and segments are 0 and none of its segments is kept. With ``rules``, a thread
        then walks zlib's rules over the deflate payloads kept, ahead of the kernel
        (``ExtentWalk.rules_settled``)."""
        self._check_open()
        offs = _i64(block_offsets)
        lens = _i64(disk_lens)
        if offs.shape[0] != lens.shape[0]:
            raise ValueError("block arrays differ in length")
        cdef ExtentWalk walk = ExtentWalk.__new__(ExtentWalk)
        walk._walk(self, offs, lens, rules)
        return walk

    def fileno(self):
        """The descriptor of the open file (-1 once closed), for a ReadAhead."""
        return self.f.fd

    def file_was_replaced(self):
        """True when the path no longer names the file opened (renamed over, removed)."""
        return bool(capsem_file_replaced(&self.f, self.cpath))

    @property
    def size(self):
        """The file's current size (the map is refreshed to it)."""
        if self.c == NULL:
            raise ValueError("the archive reader is closed")
        self._refresh()
        return self.f.size

    @property
    def blocks_inflated(self):
        """Blocks whose inflating was started (from their first segment), over the reader's life."""
        cdef uint64_t n = self.dropped_blocks + self.verified_blocks
        cdef int k
        for k in range(self.npool):
            n += capsem_cursor_blocks_inflated(self.pool[k])
        return n

    @property
    def segments_inflated(self):
        """Segments inflated over the reader's life."""
        cdef uint64_t n = self.dropped_segments + self.verified_segments
        cdef int k
        for k in range(self.npool):
            n += capsem_cursor_segments_inflated(self.pool[k])
        return n

    @property
    def verified_reads(self):
        """(reads, segments): reads served from remembered segments (a cache miss whose span
        lay in segments verified before: inflated again, not hashed again), and the segments
        they inflated. Each such read also counts in blocks_inflated and segments_inflated."""
        return self.verified_blocks, self.verified_segments

    @property
    def remembered_segments(self):
        """Segments verified by this reader and remembered now (0 without a cache)."""
        return 0 if self.verified == NULL else capsem_verified_count(self.verified)

    @property
    def cached_blocks(self):
        """Blocks the cache holds inflated now (a prefix of each)."""
        cdef int k, n = 0
        for k in range(self.npool):
            n += capsem_cursor_active(self.pool[k]) != 0
        return n

    @property
    def held_bytes(self):
        """What the cache holds now: the cursors' buffers (48 KiB of inflate state each on
        top), the remembered segments' table and its scratch buffer. Between reads at most
        cache_bytes plus the last block read."""
        if self.c == NULL:
            return 0
        return self._cache_used()

    @property
    def cache_bytes(self):
        """The cache's byte budget (0: one cursor, no cache)."""
        return self.budget

    @property
    def uses_libdeflate(self):
        """Whether deflate segments are tried with libdeflate first (see the class)."""
        return self.fast != NULL

    @property
    def identity(self):
        """(st_dev, st_ino) recorded at open."""
        return self.f.dev, self.f.ino
