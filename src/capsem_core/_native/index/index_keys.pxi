# The key columns of the body index, as arrays of values end to end (scan_keys; included by
# _index.pyx, whose C API block declares what it calls).

KEY_TEXT_COLUMNS = ("event_id", "source_table", "direction", "content_type")


cdef dict _key_arrays(size_t cap):
    arrays = {"id": np.empty(cap, np.int64), "original_bytes": np.empty(cap, np.int64),
              "truncated": np.empty(cap, np.uint8), "row_ok": np.empty(cap, np.uint8)}
    for name in KEY_TEXT_COLUMNS:
        offsets = np.empty(cap + 1, np.int64)
        offsets[0] = 0
        arrays[name + "_offsets"] = offsets
        arrays[name + "_null"] = np.empty(cap, np.uint8)
    return arrays


cdef void _point_keys(capsem_key_rows *rows, dict arrays):
    cdef int64_t[::1] a_id = arrays["id"], a_orig = arrays["original_bytes"]
    cdef uint8_t[::1] a_trunc = arrays["truncated"], a_ok = arrays["row_ok"]
    cdef int64_t[::1] offs
    cdef uint8_t[::1] nulls
    cdef int k
    rows.id = &a_id[0] if a_id.shape[0] else NULL
    rows.original_bytes = &a_orig[0] if a_orig.shape[0] else NULL
    rows.truncated = &a_trunc[0] if a_trunc.shape[0] else NULL
    rows.row_ok = &a_ok[0] if a_ok.shape[0] else NULL
    for k, name in enumerate(KEY_TEXT_COLUMNS):
        offs = arrays[name + "_offsets"]
        nulls = arrays[name + "_null"]
        rows.text[k].offsets = &offs[0]
        rows.text[k].null = &nulls[0] if nulls.shape[0] else NULL


def scan_keys(str uri, *, int busy_ms, path=None, conn=None):
    """The key columns of every event_body_blobs row, in rowid order, without a Python
    object per row: id, original_bytes (int64), truncated (bool), row_ok (bool: body_hash is
    TEXT and the three span columns INTEGER, as scan_bodies reads them), and for each of event_id,
    source_table, direction and content_type three arrays, ``{name}_data`` (uint8, the
    values' UTF-8 bytes end to end), ``{name}_offsets`` (int64, rows + 1: row i is
    data[offsets[i]:offsets[i + 1]]) and ``{name}_null`` (bool, SQL NULL). uri, busy_ms,
    path, conn: as for scan_bodies (inside conn's read transaction when it is shareable)."""
    cdef _Scan scan = _Scan(uri, busy_ms, path, conn)
    cdef size_t cap = <size_t>scan.count(b"event_body_blobs") + 1
    cdef size_t filled = 0
    cdef int done = 0
    cdef int rc = 0
    cdef int k
    cdef capsem_key_rows rows
    cdef uint8_t[::1] dst
    for k in range(CAPSEM_KEY_TEXTS):
        rows.text[k].data = NULL
        rows.text[k].len = 0
        rows.text[k].cap = 0
    try:
        arrays = _key_arrays(cap)
        while True:
            _point_keys(&rows, arrays)
            with nogil:
                rc = capsem_index_fill_keys(scan.ix, &rows, filled, cap, &filled, &done, scan.err, sizeof(scan.err))
            if rc != SQLITE_OK:
                raise _index_error(scan.path, CAPSEM_R_INDEX_READ, scan.err)
            if done:
                break
            # More rows than COUNT(*) said (not in one transaction): grow, as scan_bodies does.
            grown = _key_arrays(max(cap * 2, <size_t>1024))
            for name, a in arrays.items():
                grown[name][:a.shape[0]] = a
            arrays = grown
            cap = arrays["id"].shape[0]
        out = {"id": arrays["id"][:filled], "original_bytes": arrays["original_bytes"][:filled],
               "truncated": arrays["truncated"][:filled].view(np.bool_),
               "row_ok": arrays["row_ok"][:filled].view(np.bool_)}
        for k, name in enumerate(KEY_TEXT_COLUMNS):
            data = np.empty(rows.text[k].len, np.uint8)
            if rows.text[k].len:
                dst = data
                memcpy(&dst[0], rows.text[k].data, rows.text[k].len)
            out[name + "_data"] = data
            out[name + "_offsets"] = arrays[name + "_offsets"][:filled + 1]
            out[name + "_null"] = arrays[name + "_null"][:filled].view(np.bool_)
        return out
    finally:
        for k in range(CAPSEM_KEY_TEXTS):
            free(rows.text[k].data)
