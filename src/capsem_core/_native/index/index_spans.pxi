# The body index's spans against body_blocks, for the archive check (included by _index.pyx).

def spans_against_blocks(block_offset, raw_len, body_block, body_offset, body_len, int64_t max_raw):
    """(dangling, stray, overruns) of the body rows against the block rows, in one pass with
    the GIL released and no array made: bodies naming no block ``block_offset`` records
    (sorted, as body_blocks is read), bodies whose ``body_offset`` or ``body_len`` lies outside
    0..``max_raw``, and, of the others, those running past their block's ``raw_len``. A body
    names the first block recorded at its offset. Rows in archive order (as the index is)
    find their block by one compare with the row before; any order gives the same counts."""
    cdef const int64_t[::1] k_off = np.ascontiguousarray(block_offset, np.int64)
    cdef const int64_t[::1] k_raw = np.ascontiguousarray(raw_len, np.int64)
    cdef const int64_t[::1] b_blk = np.ascontiguousarray(body_block, np.int64)
    cdef const int64_t[::1] b_off = np.ascontiguousarray(body_offset, np.int64)
    cdef const int64_t[::1] b_len = np.ascontiguousarray(body_len, np.int64)
    cdef Py_ssize_t nk = k_off.shape[0], n = b_blk.shape[0], i, lo, hi, mid, slot = -1
    if k_raw.shape[0] != nk or b_off.shape[0] != n or b_len.shape[0] != n:
        raise ValueError("the block columns, and the body columns, must each be of one length")
    cdef Py_ssize_t dangling = 0, stray = 0, overruns = 0
    cdef int64_t blk, last = 0
    cdef bint have = False
    with nogil:
        for i in range(n):
            blk = b_blk[i]
            if not have or blk != last:
                lo, hi = 0, nk   # the leftmost recorded offset >= blk, as numpy's searchsorted
                while lo < hi:
                    mid = lo + (hi - lo) // 2
                    if k_off[mid] < blk:
                        lo = mid + 1
                    else:
                        hi = mid
                slot = lo if lo < nk and k_off[lo] == blk else -1
                last, have = blk, True
            if b_off[i] < 0 or b_off[i] > max_raw or b_len[i] < 0 or b_len[i] > max_raw:
                stray += 1
                if slot < 0:
                    dangling += 1
                continue
            if slot < 0:
                dangling += 1
            elif b_off[i] + b_len[i] > k_raw[slot]:
                overruns += 1
    return dangling, stray, overruns
