/* The status table (see status.h). Every message Capsem's reader and doctor print for an
 * archive problem, word for word, and every finding kind the checks report. */
#include "status.h"

#define ROW(code, kind, exc, msg, msg_detail, at_segment) {code, #code, kind, exc, msg, msg_detail, at_segment}

const capsem_status_info capsem_status_table[] = {
    ROW(CAPSEM_OK, "ok", NULL, "ok", NULL, 0),
    ROW(CAPSEM_E_FILE_HEADER, "bad_file_header", "BadFileHeader",
        "bad archive header: not a CAPSEMBL version 2 file", NULL, 0),
    ROW(CAPSEM_E_BLOCK_HEADER, "bad_block_header", "BadBlockHeader", "bad block header at offset {at}", NULL, 0),
    ROW(CAPSEM_E_CODEC, "unsupported_codec", "UnsupportedCodec",
        "block at offset {at} uses unsupported codec {codec}", NULL, 0),
    ROW(CAPSEM_E_SEGMENT, "bad_segment", "BadSegment", "bad segment at offset {at}",
        "bad segment at offset {at}: {detail}", 1),
    ROW(CAPSEM_E_TRUNCATED, "truncated", "TruncatedBlock",
        "block at offset {at} is truncated: the file ends inside its payload", NULL, 0),
    ROW(CAPSEM_E_INTEGRITY, "integrity", "IntegrityError", "segment at offset {at} failed integrity check",
        "segment at offset {at} failed integrity check: {detail}", 1),
    ROW(CAPSEM_E_INFLATE, "inflate", "InflateError", "segment at offset {at} did not inflate: {detail}",
        "segment at offset {at} did not inflate: {detail}", 1),
    ROW(CAPSEM_E_RANGE, "out_of_range", "RefOutOfRange", "body reference out of range for its block", NULL, 0),
    ROW(CAPSEM_E_NOMEM, "nomem", "MemoryError", "{path}: out of memory", "{path}: {detail}", 0),
    ROW(CAPSEM_V_BODY_HASH, "body_hash", "BodyHashMismatch",
        "archived body does not match the row that named it: index says {want}, bytes hash to {got}",
        "archived body of {detail} does not match the row that named it: index says {want}, bytes hash to {got}", 0),
    ROW(CAPSEM_V_BAD_HASH_TEXT, "bad_body_hash_text", "BodyHashMismatch",
        "the row's body_hash is not blake3: followed by 64 lower-case hex digits", NULL, 0),
    ROW(CAPSEM_V_SPAN, "out_of_range", "RefOutOfRange", "body reference out of range for its block", NULL, 0),
    ROW(CAPSEM_R_SEGMENT_HASH, "segment_hash", "IntegrityError", "segment at offset {at} failed integrity check",
        "segment at offset {at} failed integrity check: {detail}", 1),
    ROW(CAPSEM_R_SEGMENT_HEADER_SHORT, "truncated", "TruncatedBlock",
        "segment at offset {at} is truncated: the file ends inside its header", NULL, 1),
    ROW(CAPSEM_R_FILE_HEADER_SHORT, "bad_file_header", "BadFileHeader",
        "bad archive header: {size} bytes, shorter than the 16-byte file header", NULL, 0),
    ROW(CAPSEM_R_EXTENT_LENGTH, "bad_segment", "BadSegment",
        "block at offset {at} records an extent length {size} outside 0..2**64-1", NULL, 0),
    ROW(CAPSEM_R_SYMLINK, "symlink", "SymlinkRefused", "archive path is a symlink: {path}", NULL, 0),
    ROW(CAPSEM_R_NOT_REGULAR, "io", "ArchiveError", "io: not a regular file", NULL, 0),
    ROW(CAPSEM_R_IO, "io", "ArchiveError", "io: {detail}", "io: {detail}", 0),
    ROW(CAPSEM_R_INDEX_OPEN, "index", "LedgerError", "cannot open the body index: {detail}",
        "cannot open the body index: {detail}", 0),
    ROW(CAPSEM_R_INDEX_READ, "index", "LedgerError", "cannot read the body index: {detail}",
        "cannot read the body index: {detail}", 0),
    ROW(CAPSEM_R_TABLE_OPEN, "table", "LedgerError", "cannot open session.db to read its rows: {detail}",
        "cannot open session.db to read its rows: {detail}", 0),
    ROW(CAPSEM_R_TABLE_READ, "table", "LedgerError", "cannot read the table's rows: {detail}",
        "cannot read the table's rows: {detail}", 0),
};

const size_t capsem_status_count = sizeof capsem_status_table / sizeof capsem_status_table[0];

const capsem_status_info *capsem_status_find(int code) {
    for (size_t i = 0; i < capsem_status_count; i++)
        if (capsem_status_table[i].code == code) return &capsem_status_table[i];
    return NULL;
}

int capsem_report_code(int status, int hash_mismatch) {
    if (status == CAPSEM_E_INTEGRITY && hash_mismatch) return CAPSEM_R_SEGMENT_HASH;
    return status;
}
