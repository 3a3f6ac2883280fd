/* Guarded reads of the session.bodies map (see archive_guard.h and common/map_guard.h). */
#include <stdio.h>
#include <string.h>

#include "archive_guard.h"

static void shrank(capsem_error *err, uint64_t at) {
    if (!err) return;
    memset(err, 0, sizeof *err);
    err->status = CAPSEM_E_TRUNCATED;
    err->at = at;
    snprintf(err->detail, sizeof err->detail, "the file shrank while it was read");
}

capsem_status capsem_guarded_reach(capsem_cursor *c, struct capsem_inflater_s *fast, const uint8_t *base, uint64_t size,
                                   uint64_t block_offset, uint64_t end, capsem_error *err) {
    if (sigsetjmp(capsem_guard_env, 1) != 0) {
        capsem_cursor_discard(c);
        shrank(err, block_offset);
        return CAPSEM_E_TRUNCATED;
    }
    capsem_guard_range(base, size);
    capsem_guard_armed = 1;
    capsem_status st = capsem_cursor_reach_with(c, fast, base, size, block_offset, end, err);
    capsem_guard_armed = 0;
    return st;
}

capsem_status capsem_guarded_walk_extent(const uint8_t *base, uint64_t size, uint64_t block_offset,
                                         uint64_t disk_len, capsem_extent *out, capsem_error *err,
                                         capsem_segment_table *table) {
    if (sigsetjmp(capsem_guard_env, 1) != 0) {
        shrank(err, block_offset);
        return CAPSEM_E_TRUNCATED;
    }
    capsem_guard_range(base, size);
    capsem_guard_armed = 1;
    capsem_status st = capsem_walk_extent(base, size, block_offset, disk_len, out, err, table);
    capsem_guard_armed = 0;
    return st;
}

const uint8_t *capsem_guarded_verified_read(capsem_verified *v, struct capsem_inflater_s *fast, const uint8_t *base,
                                            uint64_t size, uint64_t block_offset, uint64_t end, uint64_t *segments) {
    /* A fault here is left to the cursor the caller takes next, which reports it. */
    if (sigsetjmp(capsem_guard_env, 1) != 0) {
        *segments = 0;
        return NULL;
    }
    capsem_guard_range(base, size);
    capsem_guard_armed = 1;
    const uint8_t *raw = capsem_verified_read(v, fast, base, size, block_offset, end, segments);
    capsem_guard_armed = 0;
    return raw;
}

void capsem_guarded_verified_note(capsem_verified *v, const uint8_t *base, uint64_t size, uint64_t block_offset,
                                  uint64_t upto) {
    /* A fault while the headers are walked again leaves the segments after it unremembered. */
    if (sigsetjmp(capsem_guard_env, 1) != 0) return;
    capsem_guard_range(base, size);
    capsem_guard_armed = 1;
    capsem_verified_note(v, base, size, block_offset, upto);
    capsem_guard_armed = 0;
}
