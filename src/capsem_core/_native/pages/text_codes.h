/* Text codes: every distinct text a scan meets, given a dense number (1, 2, ...), so the
 * identity graph's joins run on integers. Equal codes mean byte-equal texts (SQLite's BINARY
 * collation), never a hash match alone: each distinct text is kept, in an arena the table
 * owns, and compared in full on a hash hit.
 *
 * The hash is keyed by a seed the caller draws at random. A ledger crafted so many texts
 * share one probe sequence cannot make a lookup slow: past CAPSEM_CODES_MAX_PROBE probes the
 * table gives up (the caller then runs its SQL instead). */
#ifndef CAPSEM_TEXT_CODES_H
#define CAPSEM_TEXT_CODES_H

#include <stdint.h>

#define CAPSEM_CODES_MAX_PROBE 96
/* Codes stay below 2^31 so two fit one 64-bit join key. */
#define CAPSEM_CODES_MAX 0x7FFFFFFFu

typedef struct capsem_codes capsem_codes;

capsem_codes *capsem_codes_new(uint64_t seed);
void capsem_codes_free(capsem_codes *t);
/* The number of distinct texts (the largest code). */
uint32_t capsem_codes_count(const capsem_codes *t);
/* A text is coded in steps, so a caller can ask for the memory a batch of texts will probe
 * before it adds them: its hash, a prefetch of its slot, later one of the entry that slot
 * holds (once the slot is in cache), then the add. */
uint64_t capsem_codes_hash(const capsem_codes *t, const uint8_t *p, uint32_t len);
void capsem_codes_prefetch(const capsem_codes *t, uint64_t hash);
void capsem_codes_prefetch_entry(const capsem_codes *t, uint64_t hash);
/* The code of `len` bytes at `p` (whose hash is `hash`), added when new: >= 1, or 0 when
 * memory ran out, -1 when the probe bound or CAPSEM_CODES_MAX was reached. */
int64_t capsem_codes_add_hashed(capsem_codes *t, uint64_t hash, const uint8_t *p, uint32_t len);
/* The code of a text already added, or 0. */
uint32_t capsem_codes_find(const capsem_codes *t, const uint8_t *p, uint32_t len);
/* The text of `code` (its bytes, their number in *len), or NULL when no text has that code
 * (0, or above the count). The bytes stay valid as long as the table. */
const uint8_t *capsem_codes_text(const capsem_codes *t, uint32_t code, uint32_t *len);

#endif
