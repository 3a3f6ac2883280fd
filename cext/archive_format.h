/* session.bodies format version 2: header layouts and their bounds.
 * Every parser takes the number of bytes actually available and refuses to look past it. */
#ifndef CAPSEM_ARCHIVE_FORMAT_H
#define CAPSEM_ARCHIVE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define CAPSEM_FILE_HEADER_BYTES 16u
#define CAPSEM_BLOCK_HEADER_BYTES 8u
#define CAPSEM_SEGMENT_HEADER_BYTES 52u
#define CAPSEM_FORMAT_VERSION 2u
#define CAPSEM_MAX_BLOCK_RAW_BYTES (16u << 20)
#define CAPSEM_MAX_SEGMENT_EXPANSION (64u << 10)
#define CAPSEM_CODEC_DEFLATE 1u
#define CAPSEM_CODEC_ZSTD 2u
#define CAPSEM_SEGMENT_FINAL 0x01u

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

typedef struct {
    uint8_t flags;
    uint32_t raw_start;
    uint32_t raw_len;
    uint32_t comp_len;
    uint8_t hash[32];
} capsem_segment_header;

static inline uint32_t capsem_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* CAPSEM_OK or CAPSEM_E_FILE_HEADER. */
capsem_status capsem_parse_file_header(const uint8_t *buf, size_t avail);

/* On success *codec is CAPSEM_CODEC_DEFLATE or CAPSEM_CODEC_ZSTD; *codec_seen always gets
 * the raw codec byte when the magic matched, for the error message. */
capsem_status capsem_parse_block_header(const uint8_t *buf, size_t avail, uint8_t *codec);

/* Bounds of one segment header: magic, flags, reserved bytes, raw_start chaining,
 * the 16 MiB block ceiling, the 64 KiB expansion allowance and "empty only when FINAL".
 * Short input is CAPSEM_E_TRUNCATED. */
capsem_status capsem_parse_segment_header(const uint8_t *buf, size_t avail, uint32_t expected_raw_start,
                                          capsem_segment_header *out);

/* A non-final deflate payload must end with the empty stored block of a sync flush. */
int capsem_has_sync_tail(const uint8_t *payload, size_t len);

#endif
