/* The one table of what native code reports: every archive status (capsem_status), every
 * verify outcome (CAPSEM_V_*) and the few refinements a status needs to be worded exactly
 * (CAPSEM_R_*), each with its finding kind, the name of the exception it raises and its
 * message template. The Python side reads the table through capsem_core._native._errors
 * and words, raises and classifies nothing on its own. */
#ifndef CAPSEM_STATUS_H
#define CAPSEM_STATUS_H

#include <stddef.h>

/* What the reader, the extent walk and the verify kernel return. */
typedef enum {
    CAPSEM_OK = 0,
    CAPSEM_E_FILE_HEADER = 1,   /* short, foreign or other-version file header */
    CAPSEM_E_BLOCK_HEADER = 2,  /* short read or wrong magic at a block offset */
    CAPSEM_E_CODEC = 3,         /* unknown codec, or non-zero flags/reserved in a block header */
    CAPSEM_E_SEGMENT = 4,       /* segment header out of bounds, or missing sync tail */
    CAPSEM_E_TRUNCATED = 5,     /* the file ends inside a segment header or payload */
    CAPSEM_E_INTEGRITY = 6,     /* lengths, stream end or the segment hash disagree */
    CAPSEM_E_INFLATE = 7,       /* the compressed payload is not valid */
    CAPSEM_E_RANGE = 8,         /* a body span is outside its block */
    CAPSEM_E_NOMEM = 9,
} capsem_status;

/* Per-body outcomes of the verify kernel beyond the archive's own statuses. */
#define CAPSEM_V_OK 0
#define CAPSEM_V_BODY_HASH 20      /* the span's bytes hash to something other than body_hash */
#define CAPSEM_V_BAD_HASH_TEXT 21  /* body_hash in the index is not blake3: + 64 hex digits */
#define CAPSEM_V_SPAN 22           /* the row's span is negative or past 16 MiB */

/* Refinements: one status, worded (or classified) apart where the cause differs. */
#define CAPSEM_R_SEGMENT_HASH 30         /* CAPSEM_E_INTEGRITY: the segment's bytes hash wrong */
#define CAPSEM_R_SEGMENT_HEADER_SHORT 31 /* CAPSEM_E_TRUNCATED inside one segment header */
#define CAPSEM_R_FILE_HEADER_SHORT 32    /* CAPSEM_E_FILE_HEADER: fewer than 16 bytes */
#define CAPSEM_R_EXTENT_LENGTH 33        /* a recorded extent length outside 0..2**64-1 */
#define CAPSEM_R_SYMLINK 40              /* opening the archive: the path is a symlink */
#define CAPSEM_R_NOT_REGULAR 41          /* opening the archive: not a regular file */
#define CAPSEM_R_IO 42                   /* opening or re-mapping the archive: errno */
#define CAPSEM_R_INDEX_OPEN 50           /* the body index (session.db) could not be opened */
#define CAPSEM_R_INDEX_READ 51           /* ... or read */
#define CAPSEM_R_TABLE_OPEN 52           /* session.db could not be opened for a column scan */
#define CAPSEM_R_TABLE_READ 53           /* ... or a table of it read */

/* One row. Templates use Python str.format fields, any of: {at} (a file offset: a block's,
 * or a segment's where at_segment is set), {codec}, {detail}, {size}, {want}, {got} (body
 * hash texts), {path}. message_detail is the wording when there is a detail (NULL: the
 * detail is not shown). exception is a name in capsem_core._native._errors (or a Python
 * builtin, MemoryError); NULL for CAPSEM_OK. */
typedef struct {
    int code;
    const char *name;
    const char *kind;
    const char *exception;
    const char *message;
    const char *message_detail;
    int at_segment;
} capsem_status_info;

/* A segment-kind message placed inside its block: "block at offset {block}: <message>". */
#define CAPSEM_IN_BLOCK_TEMPLATE "block at offset {block}: {text}"

extern const capsem_status_info capsem_status_table[];
extern const size_t capsem_status_count;

/* The row of a code, or NULL. */
const capsem_status_info *capsem_status_find(int code);

/* The code a reported error is worded by: its status, refined by what the reader saw. */
int capsem_report_code(int status, int hash_mismatch);

#endif
