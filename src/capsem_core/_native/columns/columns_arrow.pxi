# Included by _columns.pyx: capsules of the Arrow C structures, and Python buffers lent to
# Arrow (a BodyBatch's), kept alive until Arrow releases the last array.

# ---- capsules -------------------------------------------------------------------------------

# Each capsule owns its structure: releasing it (if the consumer has not moved it out) and
# freeing it is the capsule's destructor.

cdef void _free_schema_capsule(object capsule) noexcept:
    cdef ArrowSchema *s = <ArrowSchema *>PyCapsule_GetPointer(capsule, b"arrow_schema")
    cs_schema_release(s)
    free(s)


cdef void _free_array_capsule(object capsule) noexcept:
    cdef ArrowArray *a = <ArrowArray *>PyCapsule_GetPointer(capsule, b"arrow_array")
    cs_array_release(a)
    free(a)


cdef void _free_stream_capsule(object capsule) noexcept:
    cdef ArrowArrayStream *s = <ArrowArrayStream *>PyCapsule_GetPointer(capsule, b"arrow_array_stream")
    with nogil:  # joining a stream's workers may wait for a batch in progress
        cs_stream_release(s)
    free(s)


cdef object _schema_capsule(ArrowSchema *s):
    return PyCapsule_New(s, b"arrow_schema", <PyCapsule_Destructor>_free_schema_capsule)


cdef object _array_capsule(ArrowArray *a):
    return PyCapsule_New(a, b"arrow_array", <PyCapsule_Destructor>_free_array_capsule)


cdef object _stream_capsule(ArrowArrayStream *s):
    return PyCapsule_New(s, b"arrow_array_stream", <PyCapsule_Destructor>_free_stream_capsule)


# ---- buffers lent to Arrow ---------------------------------------------------------------------

cdef void _drop_owner(cs_mem *m) noexcept nogil:
    with gil:
        Py_XDECREF(<PyObject *>m.owner)
    free(m)


def utf8_valid(data, offsets):
    """Whether every value of a text column (``data`` uint8, ``offsets`` int64, n + 1) is
    valid UTF-8."""
    cdef const uint8_t[::1] d = data
    cdef const int64_t[::1] o = offsets
    cdef Py_ssize_t i, n = o.shape[0] - 1
    cdef int ok = 1
    cdef const uint8_t *base = &d[0] if d.shape[0] else NULL
    for i in range(n):
        if o[i] < 0 or o[i + 1] < o[i] or o[i + 1] > d.shape[0]:
            raise ValueError("offsets outside the data")
    with nogil:
        for i in range(n):
            if o[i + 1] > o[i] and not cs_utf8_check(base + o[i], <size_t>(o[i + 1] - o[i])):
                ok = 0
                break
    return bool(ok)


cdef int64_t _EMPTY[2]


cdef const void *_address(object buf, list views) except? NULL:
    if buf is None:
        return NULL
    cdef const uint8_t[::1] view = memoryview(buf).cast("B")
    views.append(view)
    if view.shape[0] == 0:
        return <const void *>&_EMPTY[0]
    return <const void *>&view[0]


def stream_of(schema, array):
    """An "arrow_array_stream" capsule of the one batch in an ("arrow_schema", "arrow_array")
    pair of capsules, which it takes over (they are left released)."""
    cdef ArrowSchema *s = <ArrowSchema *>PyCapsule_GetPointer(schema, b"arrow_schema")
    cdef ArrowArray *a = <ArrowArray *>PyCapsule_GetPointer(array, b"arrow_array")
    if s.release == NULL or a.release == NULL:
        raise ValueError("the capsules were consumed already")
    cdef ArrowArrayStream *out = <ArrowArrayStream *>calloc(1, sizeof(ArrowArrayStream))
    if out == NULL or cs_stream_of_one(s, a, out) != 0:
        free(out)
        raise MemoryError()
    return _stream_capsule(out)


def export_arrays(fields, int64_t length, keep):
    """An Arrow struct array of ``length`` rows lent from Python buffers, as
    ("arrow_schema", "arrow_array") capsules. ``fields``: (name, format, null_count, buffers)
    per column, buffers a tuple of objects with the buffer protocol (C-contiguous) or None,
    laid out as the format requires; ``keep`` holds them: it stays referenced until Arrow has
    released every array (the last release drops it, under the GIL, from whatever thread)."""
    cdef list views = []
    cdef list specs = list(fields)
    cdef int n = len(specs), i, k
    cdef const void *b[3]
    cdef cs_mem *m = cs_mem_new()
    if m == NULL:
        raise MemoryError()
    m.drop = _drop_owner
    m.owner = <void *>keep
    Py_INCREF(keep)
    cdef ArrowArray *array = <ArrowArray *>calloc(1, sizeof(ArrowArray))
    cdef ArrowSchema *schema = <ArrowSchema *>calloc(1, sizeof(ArrowSchema))
    try:
        if array == NULL or schema == NULL:
            raise MemoryError()
        if cs_schema_node(schema, b"+s", b"", 0, n) != 0 or cs_array_node(array, m, length, 0, 1, NULL, NULL, NULL, n) != 0:
            raise MemoryError()
        for i in range(n):
            name, fmt, nulls, bufs = specs[i]
            if len(bufs) > 3:
                raise ValueError("at most three buffers")
            for k in range(3):
                b[k] = _address(bufs[k], views) if k < len(bufs) else NULL
            if cs_schema_node(cs_schema_child(schema, i), fmt.encode(), str(name).encode("utf-8", "surrogateescape"),
                              2, 0) != 0:
                raise MemoryError()
            if cs_array_node(cs_array_child(array, i), m, length, nulls, len(bufs), b[0], b[1], b[2], 0) != 0:
                raise MemoryError()
    except BaseException:
        cs_schema_release(schema)
        cs_array_release(array)
        free(schema)
        free(array)
        cs_mem_unref(m)
        raise
    cs_mem_unref(m)  # the array nodes hold it
    return _schema_capsule(schema), _array_capsule(array)
