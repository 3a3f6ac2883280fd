/* The session.bodies reads that run under the fault guard (common/map_guard.h): a file cut
 * short under the map is reported as a truncated archive, not a crash. */
#ifndef CAPSEM_ARCHIVE_GUARD_H
#define CAPSEM_ARCHIVE_GUARD_H

#include "archive_reader.h"
#include "archive_verified.h"
#include "map_guard.h"

/* capsem_cursor_reach_with and capsem_walk_extent with the guard armed: a SIGBUS while they
 * touch the map becomes CAPSEM_E_TRUNCATED ("the file shrank while it was read"), the cursor
 * discarded. */
capsem_status capsem_guarded_reach(capsem_cursor *c, struct capsem_inflater_s *fast, const uint8_t *base, uint64_t size,
                                   uint64_t block_offset, uint64_t end, capsem_error *err);
capsem_status capsem_guarded_walk_extent(const uint8_t *base, uint64_t size, uint64_t block_offset,
                                         uint64_t disk_len, capsem_extent *out, capsem_error *err,
                                         capsem_segment_table *table);
/* capsem_verified_read with the guard armed: a fault answers NULL ("not here"). */
const uint8_t *capsem_guarded_verified_read(capsem_verified *v, struct capsem_inflater_s *fast, const uint8_t *base,
                                            uint64_t size, uint64_t block_offset, uint64_t end, uint64_t *segments);
/* capsem_verified_note with the guard armed. */
void capsem_guarded_verified_note(capsem_verified *v, const uint8_t *base, uint64_t size, uint64_t block_offset,
                                  uint64_t upto);

#endif
