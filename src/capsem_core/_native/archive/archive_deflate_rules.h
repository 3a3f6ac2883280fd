/* zlib's rules for a raw-deflate stream, checked without producing output (see
 * archive_deflate_rules.c). libdeflate decodes a few streams zlib's inflate refuses; the
 * streaming cursor is zlib, so a stream libdeflate decoded counts only when these hold. */
#ifndef CAPSEM_ARCHIVE_DEFLATE_RULES_H
#define CAPSEM_ARCHIVE_DEFLATE_RULES_H

#include <stddef.h>
#include <stdint.h>

/* 1 when in[0, len) begins with a complete raw-deflate stream (through its final block)
 * whose block headers and codes zlib's inflate accepts: at most 286 literal/length and 30
 * distance codes, code lengths zlib builds tables from, no repeat past the last length, an
 * end-of-block code, no literal/length symbol 286-287 or distance symbol 30-31, no invalid
 * code, stored lengths that match. 0 otherwise, including a stream that is only truncated
 * or one valid in ways this does not model: a 0 costs only the slower zlib path. Distances
 * reaching before the output are not checked (libdeflate refuses them as zlib does). Never
 * reads outside in[0, len). */
int capsem_deflate_zlib_accepts(const uint8_t *in, size_t len);

#endif
