# The status table (status.h), for the native modules that word or classify an error.
cdef extern from "status.h" nogil:
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

    int CAPSEM_V_OK
    int CAPSEM_V_BODY_HASH
    int CAPSEM_V_BAD_HASH_TEXT
    int CAPSEM_V_SPAN
    int CAPSEM_R_SEGMENT_HASH
    int CAPSEM_R_SEGMENT_HEADER_SHORT
    int CAPSEM_R_FILE_HEADER_SHORT
    int CAPSEM_R_EXTENT_LENGTH
    int CAPSEM_R_SYMLINK
    int CAPSEM_R_NOT_REGULAR
    int CAPSEM_R_IO
    int CAPSEM_R_INDEX_OPEN
    int CAPSEM_R_INDEX_READ
    int CAPSEM_R_TABLE_OPEN
    int CAPSEM_R_TABLE_READ

    ctypedef struct capsem_status_info:
        int code
        const char *name
        const char *kind
        const char *exception
        const char *message
        const char *message_detail
        int at_segment

    const char *CAPSEM_IN_BLOCK_TEMPLATE
    const capsem_status_info capsem_status_table[]
    const size_t capsem_status_count
    const capsem_status_info *capsem_status_find(int code)
    int capsem_report_code(int status, int hash_mismatch)
