/* session.bodies format version 2: header layouts and their bounds.
 * Every parser takes the number of bytes actually available and refuses to look past it. */
#ifndef CAPSEM_ARCHIVE_FORMAT_H
#define CAPSEM_ARCHIVE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define CAPSEM_FILE_MAGIC "CAPSEMBL"   /* 8 bytes, no terminator on disk */
#define CAPSEM_BLOCK_MAGIC "BLK2"      /* 4 bytes */
#define CAPSEM_SEGMENT_MAGIC "SGMT"    /* 4 bytes */
#define CAPSEM_SYNC_FLUSH_TAIL "\x00\x00\xff\xff" /* the empty stored block of a sync flush */
#define CAPSEM_FILE_HEADER_BYTES 16u
#define CAPSEM_BLOCK_HEADER_BYTES 8u
#define CAPSEM_SEGMENT_HEADER_BYTES 52u
#define CAPSEM_FORMAT_VERSION 2u
#define CAPSEM_MAX_BLOCK_RAW_BYTES (16u << 20)
#define CAPSEM_MAX_SEGMENT_EXPANSION (64u << 10)
#define CAPSEM_CODEC_DEFLATE 1u
#define CAPSEM_CODEC_ZSTD 2u
#define CAPSEM_SEGMENT_FINAL 0x01u

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
