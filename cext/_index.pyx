# cython: language_level=3, boundscheck=False, wraparound=False
"""Scans of the body index (event_body_blobs, body_blocks) through the SQLite C API."""

cdef extern from "sqlite3.h" nogil:
    const char *sqlite3_libversion()


def sqlite_version():
    """Version of the SQLite library this module is linked against."""
    return sqlite3_libversion().decode()
