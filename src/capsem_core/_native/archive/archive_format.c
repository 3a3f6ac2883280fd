/* Header parsing for session.bodies v2. Pure functions over caller-bounded buffers. */
#include <string.h>

#include "archive_format.h"

capsem_status capsem_parse_file_header(const uint8_t *buf, size_t avail) {
    if (avail < CAPSEM_FILE_HEADER_BYTES) return CAPSEM_E_FILE_HEADER;
    if (memcmp(buf, CAPSEM_FILE_MAGIC, 8) != 0) return CAPSEM_E_FILE_HEADER;
    uint16_t version = (uint16_t)(buf[8] | (buf[9] << 8));
    /* Bytes 10..15 are reserved and, as in Capsem's reader, not checked. */
    return version == CAPSEM_FORMAT_VERSION ? CAPSEM_OK : CAPSEM_E_FILE_HEADER;
}

capsem_status capsem_parse_block_header(const uint8_t *buf, size_t avail, uint8_t *codec) {
    *codec = 0;
    if (avail < CAPSEM_BLOCK_HEADER_BYTES || memcmp(buf, CAPSEM_BLOCK_MAGIC, 4) != 0) return CAPSEM_E_BLOCK_HEADER;
    *codec = buf[4];
    if (buf[5] != 0 || buf[6] != 0 || buf[7] != 0) return CAPSEM_E_CODEC;
    if (buf[4] != CAPSEM_CODEC_DEFLATE && buf[4] != CAPSEM_CODEC_ZSTD) return CAPSEM_E_CODEC;
    return CAPSEM_OK;
}

capsem_status capsem_parse_segment_header(const uint8_t *buf, size_t avail, uint32_t expected_raw_start,
                                          capsem_segment_header *out) {
    if (avail < CAPSEM_SEGMENT_HEADER_BYTES) return CAPSEM_E_TRUNCATED;
    if (memcmp(buf, CAPSEM_SEGMENT_MAGIC, 4) != 0) return CAPSEM_E_SEGMENT;
    uint8_t flags = buf[4];
    if ((flags & ~CAPSEM_SEGMENT_FINAL) != 0 || buf[5] || buf[6] || buf[7]) return CAPSEM_E_SEGMENT;
    uint32_t raw_start = capsem_le32(buf + 8);
    uint32_t raw_len = capsem_le32(buf + 12);
    uint32_t comp_len = capsem_le32(buf + 16);
    if (raw_start != expected_raw_start) return CAPSEM_E_SEGMENT;
    /* 64-bit sums: forged u32 fields near 2^32 must not wrap past the bounds. */
    if ((uint64_t)raw_start + raw_len > CAPSEM_MAX_BLOCK_RAW_BYTES) return CAPSEM_E_SEGMENT;
    if ((uint64_t)comp_len > (uint64_t)raw_len + CAPSEM_MAX_SEGMENT_EXPANSION) return CAPSEM_E_SEGMENT;
    if (raw_len == 0 && !(flags & CAPSEM_SEGMENT_FINAL)) return CAPSEM_E_SEGMENT;
    out->flags = flags;
    out->raw_start = raw_start;
    out->raw_len = raw_len;
    out->comp_len = comp_len;
    memcpy(out->hash, buf + 20, 32);
    return CAPSEM_OK;
}

int capsem_has_sync_tail(const uint8_t *payload, size_t len) {
    return len >= 4 && memcmp(payload + len - 4, CAPSEM_SYNC_FLUSH_TAIL, 4) == 0;
}
