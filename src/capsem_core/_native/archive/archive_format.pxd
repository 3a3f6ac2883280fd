from libc.stdint cimport uint8_t, uint32_t

from status cimport capsem_status

cdef extern from "archive_format.h" nogil:
    ctypedef struct capsem_segment_header:
        uint8_t flags
        uint32_t raw_start
        uint32_t raw_len
        uint32_t comp_len
        uint8_t hash[32]

    const char *CAPSEM_FILE_MAGIC
    const char *CAPSEM_BLOCK_MAGIC
    const char *CAPSEM_SEGMENT_MAGIC
    const char *CAPSEM_SYNC_FLUSH_TAIL
    unsigned int CAPSEM_FORMAT_VERSION
    unsigned int CAPSEM_FILE_HEADER_BYTES
    unsigned int CAPSEM_BLOCK_HEADER_BYTES
    unsigned int CAPSEM_SEGMENT_HEADER_BYTES
    unsigned int CAPSEM_MAX_BLOCK_RAW_BYTES
    unsigned int CAPSEM_MAX_SEGMENT_EXPANSION
    unsigned int CAPSEM_SEGMENT_FINAL
    unsigned int CAPSEM_CODEC_DEFLATE
    unsigned int CAPSEM_CODEC_ZSTD

    capsem_status capsem_parse_file_header(const uint8_t *buf, size_t avail)
    capsem_status capsem_parse_block_header(const uint8_t *buf, size_t avail, uint8_t *codec)
    capsem_status capsem_parse_segment_header(const uint8_t *buf, size_t avail, uint32_t expected_raw_start,
                                              capsem_segment_header *out)
