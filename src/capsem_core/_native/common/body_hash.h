/* The body_hash text of an event_body_blobs row, parsed once into its 32-byte digest. */
#ifndef CAPSEM_BODY_HASH_H
#define CAPSEM_BODY_HASH_H

#include <stdint.h>

#define CAPSEM_BODY_HASH_PREFIX "blake3:"
#define CAPSEM_BODY_HASH_TEXT_LEN 71 /* the prefix (7) + 64 hex digits */

/* "blake3:" + 64 lower-case hex -> 32 bytes. 1 on success; 0 for any other text (upper-case
 * hex included: Capsem compares the text, so it would not match either). */
int capsem_parse_body_hash(const unsigned char *text, int len, uint8_t out[32]);

#endif
