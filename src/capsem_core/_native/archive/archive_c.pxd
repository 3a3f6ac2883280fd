# The archive's C API beyond header parsing: the cursor, the SIGBUS/SIGSEGV guard, the file map and
# the verify kernel (archive_reader.h, archive_guard.h, archive_file.h, archive_verify.h).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from status cimport capsem_status

cdef extern from "archive_reader.h" nogil:
    ctypedef struct capsem_error:
        capsem_status status
        uint64_t at
        uint8_t codec
        uint8_t hash_mismatch
        uint64_t raw_done
        char detail[200]
    ctypedef struct capsem_cursor:
        pass
    ctypedef struct capsem_extent:
        uint8_t codec
        uint64_t raw_len
        uint64_t segments
        int final
        uint64_t empty_faults
        uint64_t empty_fault_at
    capsem_cursor *capsem_cursor_new()
    void capsem_cursor_free(capsem_cursor *c)
    void capsem_cursor_discard(capsem_cursor *c)
    capsem_status capsem_cursor_reach(capsem_cursor *c, const uint8_t *base, uint64_t size, uint64_t block_offset,
                                      uint64_t end, capsem_error *err)
    const uint8_t *capsem_cursor_raw(const capsem_cursor *c)
    uint64_t capsem_cursor_held(const capsem_cursor *c)
    int capsem_cursor_active(const capsem_cursor *c)
    uint64_t capsem_cursor_block(const capsem_cursor *c)
    int capsem_cursor_finished(const capsem_cursor *c)
    uint64_t capsem_cursor_blocks_inflated(const capsem_cursor *c)
    size_t capsem_cursor_capacity(const capsem_cursor *c)
    uint64_t capsem_cursor_segments_inflated(const capsem_cursor *c)
    uint64_t capsem_cursor_next_segment(const capsem_cursor *c)
    ctypedef struct capsem_segment_ref:
        uint64_t at
        uint32_t raw_len
        uint32_t comp_len
        uint8_t flags
        uint8_t codec
        uint8_t zlib_ok
    ctypedef struct capsem_segment_table:
        capsem_segment_ref *refs
        size_t n
        size_t cap
    void capsem_segment_table_truncate(capsem_segment_table *t, size_t n)
    void capsem_segment_table_free(capsem_segment_table *t)
    capsem_status capsem_walk_extent(const uint8_t *base, uint64_t size, uint64_t block_offset, uint64_t disk_len,
                                     capsem_extent *out, capsem_error *err, capsem_segment_table *table)

cdef extern from "archive_rules_ahead.h" nogil:
    uint64_t CAPSEM_RULES_AHEAD_WINDOW
    ctypedef struct capsem_rules_ahead:
        pass
    capsem_rules_ahead *capsem_rules_ahead_start(int fd, capsem_segment_ref *refs, size_t n, int *err)
    void capsem_rules_ahead_wait(capsem_rules_ahead *r)
    void capsem_rules_ahead_finish(capsem_rules_ahead *r)

cdef extern from "archive_inflate.h" nogil:
    ctypedef struct capsem_inflater:
        pass
    capsem_inflater *capsem_inflater_new()
    void capsem_inflater_free(capsem_inflater *f)

cdef extern from "archive_verified.h" nogil:
    ctypedef struct capsem_verified:
        pass
    capsem_verified *capsem_verified_new(size_t max_bytes)
    void capsem_verified_free(capsem_verified *v)
    void capsem_verified_clear(capsem_verified *v)
    size_t capsem_verified_count(const capsem_verified *v)
    size_t capsem_verified_bytes(const capsem_verified *v)
    void capsem_verified_release_buffer(capsem_verified *v)

cdef extern from "archive_guard.h" nogil:
    int capsem_guard_install()
    capsem_status capsem_guarded_reach(capsem_cursor *c, capsem_inflater *fast, const uint8_t *base, uint64_t size,
                                       uint64_t block_offset, uint64_t end, capsem_error *err)
    const uint8_t *capsem_guarded_verified_read(capsem_verified *v, capsem_inflater *fast, const uint8_t *base,
                                                uint64_t size, uint64_t block_offset, uint64_t end,
                                                uint64_t *segments)
    void capsem_guarded_verified_note(capsem_verified *v, const uint8_t *base, uint64_t size, uint64_t block_offset,
                                      uint64_t upto)
    capsem_status capsem_guarded_walk_extent(const uint8_t *base, uint64_t size, uint64_t block_offset,
                                             uint64_t disk_len, capsem_extent *out, capsem_error *err,
                                             capsem_segment_table *table)

cdef extern from "archive_file.h" nogil:
    ctypedef struct capsem_archive_file:
        int fd
        const uint8_t *map
        uint64_t size
        uint64_t dev
        uint64_t ino
    ctypedef enum capsem_open_status:
        CAPSEM_OPEN_OK
        CAPSEM_OPEN_SYMLINK
        CAPSEM_OPEN_NOT_REGULAR
        CAPSEM_OPEN_IO
    capsem_open_status capsem_file_open(capsem_archive_file *f, const char *path, int *errno_out)
    int capsem_file_refresh(capsem_archive_file *f)
    void capsem_file_close(capsem_archive_file *f)
    int capsem_file_replaced(const capsem_archive_file *f, const char *path)
    void capsem_map_drop(const uint8_t *base, uint64_t size, uint64_t lo, uint64_t hi)
    int ADVICE_WILLNEED
    void capsem_map_advise(const uint8_t *base, uint64_t size, uint64_t lo, uint64_t hi, int advice, int inner)
    ctypedef struct capsem_drop_batch:
        uint64_t lo
        uint64_t hi
    void capsem_drop_batch_add(capsem_drop_batch *d, const uint8_t *base, uint64_t size, uint64_t lo, uint64_t hi) nogil
    void capsem_drop_batch_flush(capsem_drop_batch *d, const uint8_t *base, uint64_t size) nogil

cdef extern from "archive_verify.h" nogil:
    ctypedef struct capsem_verify_job:
        pass
    ctypedef struct capsem_verify_buffers:
        pass
    capsem_verify_buffers *capsem_verify_buffers_new()
    void capsem_verify_buffers_free(capsem_verify_buffers *b)
    ctypedef struct capsem_verify_spec:
        const uint8_t *base
        uint64_t size
        size_t nblocks
        const int64_t *blk_offset
        const int64_t *blk_disk_len
        size_t nbodies
        const int64_t *block_offset
        const int64_t *body_offset
        const int64_t *body_len
        const uint8_t *digest
        const uint8_t *hash_ok
        uint8_t *status
        int32_t *err_index
        uint8_t *got
        uint8_t *out
        const int64_t *out_offset
        uint8_t *const *out_at
        int threads
        int use_libdeflate
        const capsem_segment_ref *segs
        const int64_t *seg_first
        capsem_verify_buffers *lend
    capsem_verify_job *capsem_verify_start(const capsem_verify_spec *spec)
    int capsem_verify_wait(capsem_verify_job *job, int timeout_ms, uint64_t *bytes_done, uint64_t *bodies_done)
    int capsem_verify_finish(capsem_verify_job *job)
    void capsem_verify_cancel(capsem_verify_job *job)
    size_t capsem_verify_error_count(const capsem_verify_job *job)
    const capsem_error *capsem_verify_error(const capsem_verify_job *job, size_t i)
    void capsem_verify_free(capsem_verify_job *job)
