# Included by _archive.pyx (one extension module; the file split is by concept): the read-only
# buffer a bulk read fills.

# --- the bulk read's buffer -----------------------------------------------------------------

cdef class ReadOnlyBytes:
    """The read-only buffer protocol over a contiguous uint8 array it holds.

    The base of the bulk read's batch: ``memoryview(batch)`` and ``bytes(batch)`` see the one
    buffer the kernel copied the verified bodies into, with no copy; no view of it is
    writable, so the bytes stay the verified ones."""
    cdef object _array
    cdef const uint8_t[::1] _view
    cdef Py_ssize_t _shape[1]
    cdef Py_ssize_t _strides[1]

    def __init__(self, array):
        self._array = np.ascontiguousarray(array, dtype=np.uint8).reshape(-1)
        self._view = self._array
        self._shape[0] = self._view.shape[0]
        self._strides[0] = 1

    def __getbuffer__(self, Py_buffer *view, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("the bodies' buffer is read-only")
        if self._shape[0]:
            view.buf = <void *>&self._view[0]
        else:
            view.buf = <void *>self._shape  # any valid address: no byte is read
        view.obj = self
        view.len = self._shape[0]
        view.readonly = 1
        view.itemsize = 1
        if flags & PyBUF_FORMAT:
            view.format = b"B"
        else:
            view.format = NULL
        view.ndim = 1
        view.shape = self._shape
        view.strides = self._strides
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer *view):
        pass
