from libc.stdint cimport uint8_t, uint32_t

cdef extern from "archive_format.h" nogil:
    ctypedef enum capsem_status:
        CAPSEM_OK
        CAPSEM_E_FILE_HEADER
        CAPSEM_E_BLOCK_HEADER
        CAPSEM_E_CODEC
        CAPSEM_E_SEGMENT
        CAPSEM_E_TRUNCATED
        CAPSEM_E_INTEGRITY
        CAPSEM_E_INFLATE
        CAPSEM_E_RANGE
        CAPSEM_E_NOMEM

    ctypedef struct capsem_segment_header:
        uint8_t flags
        uint32_t raw_start
        uint32_t raw_len
        uint32_t comp_len
        uint8_t hash[32]

    unsigned int CAPSEM_FILE_HEADER_BYTES
    unsigned int CAPSEM_BLOCK_HEADER_BYTES
    unsigned int CAPSEM_SEGMENT_HEADER_BYTES
    unsigned int CAPSEM_MAX_BLOCK_RAW_BYTES
    unsigned int CAPSEM_MAX_SEGMENT_EXPANSION
    unsigned int CAPSEM_SEGMENT_FINAL

    capsem_status capsem_parse_file_header(const uint8_t *buf, size_t avail)
    capsem_status capsem_parse_block_header(const uint8_t *buf, size_t avail, uint8_t *codec)
    capsem_status capsem_parse_segment_header(const uint8_t *buf, size_t avail, uint32_t expected_raw_start,
                                              capsem_segment_header *out)
    int capsem_has_sync_tail(const uint8_t *payload, size_t len)
