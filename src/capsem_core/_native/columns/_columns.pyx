# cython: language_level=3, boundscheck=False, wraparound=False
"""Columns of session.db as Arrow data: a table's rows as a stream of record batches, and any
set of buffers (a BodyBatch's) as an Arrow struct array, through the Arrow C data interface
and its PyCapsule protocol ("arrow_schema", "arrow_array", "arrow_array_stream"), with no
Arrow library linked.

``Source`` is one read-only connection of its own to session.db (the URI and busy timeout the
Python layer chose) with its read transaction, the queries the Python layer asks of that
snapshot (``fetch``), and a map of the file for the page path. ``Source.stream`` plans a
stream of one table's rows (scan_stream.h: pages or statements, a first pass fixing each
column's Arrow type), whose ``export`` hands out the C stream; ``Source.rows`` reads a page of
rows into Python values (``Rows``, for ``Ledger.events``). ``export_arrays`` lends Python
buffers to Arrow, keeping their owner alive until Arrow releases them. This module runs only
the SQL its caller writes, and imports nothing from the Python layer.
"""

import errno
import os

import numpy as np

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.pycapsule cimport PyCapsule_Destructor, PyCapsule_GetPointer, PyCapsule_New
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject, PyTypeObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport INT64_MAX, INT64_MIN, int8_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memset

from columns_c cimport *

from capsem_core._native import _errors

if capsem_guard_install() != 0:
    raise ImportError("capsem_core._native._columns could not install its SIGBUS guard")

ROWID = -1
# The storage classes, by number (a union column's type ids) and name (its children's names).
CLASSES = tuple(CS_CLASS_NAMES[k].decode() for k in range(6))
CLASS_NULL, CLASS_INTEGER, CLASS_REAL, CLASS_TEXT, CLASS_TEXT_BYTES, CLASS_BLOB = range(6)

SCHEMA_CAPSULE = b"arrow_schema"
ARRAY_CAPSULE = b"arrow_array"
STREAM_CAPSULE = b"arrow_array_stream"


cdef object _read_error(path, detail):
    return _errors.error(CAPSEM_R_TABLE_READ, path, detail=detail)



include "columns_arrow.pxi"
include "columns_source.pxi"
include "columns_stream.pxi"
include "columns_rows.pxi"
include "columns_events.pxi"
