# cython: language_level=3, boundscheck=False, wraparound=False
"""Native session.db page map: the whole-file half of a page check (page_map.h).

``PageFile`` opens a database file read-only (no symlinks, regular files only) and maps it;
``walk`` follows every tree of the roots it is given, the freelist and the pointer map, and
returns what a whole-file ``PRAGMA quick_check`` would report that per-table checks cannot;
``estimate`` sizes each tree cheaply for ordering work. The walk runs without the GIL under
the SIGBUS guard. Findings are raw tuples (``Finding``): the caller words them, with the
names it knows for each root. This module runs no SQL and imports nothing from the Python
layer.
"""

import collections
import errno
import os

from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc

cdef extern from "map_guard.h" nogil:
    int capsem_guard_install()

# Opening and mapping the file is the archive map's (archive_file.h): lstat, no symlinks,
# regular files only, O_RDONLY.
from archive_c cimport CAPSEM_OPEN_NOT_REGULAR, CAPSEM_OPEN_OK, CAPSEM_OPEN_SYMLINK, capsem_archive_file, \
    capsem_file_close, capsem_file_open, capsem_open_status

cdef extern from "page_map.h" nogil:
    int CAPSEM_PAGES_MAX_FINDINGS
    int CAPSEM_PAGES_MAX_DEPTH
    ctypedef struct capsem_page_finding:
        uint32_t kind
        uint32_t in_tree
        uint32_t page
        uint32_t tree
        uint32_t from_ "from"
        uint32_t a
        uint64_t b
    ctypedef struct capsem_page_header:
        uint32_t page_size
        uint32_t usable
        uint32_t page_count
        uint32_t file_pages
        uint32_t freelist_trunk
        uint32_t freelist_count
        uint32_t schema_cookie
        uint32_t autovacuum_root
        uint32_t incremental
        uint32_t lock_page
    ctypedef struct capsem_page_walk:
        capsem_page_header header
        uint64_t btree_pages
        uint64_t overflow_pages
        uint64_t freelist_pages
        uint64_t ptrmap_pages
        uint64_t findings_total
        uint64_t in_tree_total
        size_t nfindings
        capsem_page_finding findings[100]
    int capsem_page_header_parse(const uint8_t *map, uint64_t size, capsem_page_header *h, capsem_page_finding *bad)
    int capsem_page_walk_run(const uint8_t *map, uint64_t size, const uint32_t *roots, size_t nroots,
                             uint64_t *pages_out, volatile const int *cancel, capsem_page_walk *w)
    void capsem_page_estimate(const uint8_t *map, uint64_t size, const capsem_page_header *h, const uint32_t *roots,
                              size_t nroots, uint64_t *out)

if capsem_guard_install() != 0:
    raise ImportError("capsem_core._native._pages could not install its SIGBUS guard")

MAX_FINDINGS = CAPSEM_PAGES_MAX_FINDINGS
MAX_DEPTH = CAPSEM_PAGES_MAX_DEPTH
# The kinds of page_map.h, by the names the caller words them under.
KINDS = {
    1: "never_used", 2: "second_reference", 3: "invalid_reference", 4: "pointer_map_referenced",
    5: "pointer_map_entry", 6: "pointer_map_unreadable", 7: "freelist_size", 8: "freelist_leaves",
    9: "max_root", 10: "incremental_vacuum", 11: "bad_page", 12: "bad_cell_count", 13: "bad_cell",
    14: "short_overflow", 15: "too_deep", 16: "bad_header", 17: "short_file", 18: "shrank",
}

Finding = collections.namedtuple("Finding", "kind in_tree page tree source a b")
Finding.__doc__ = ("One thing the walk found: its kind (a KINDS name), whether it is damage inside one tree "
                   "(which that tree's own quick_check reports), the page, the root of the tree walked "
                   "(0: the freelist), the page holding the reference, and two kind-specific values.")

Walk = collections.namedtuple("Walk", "findings findings_total in_tree_total tree_pages btree_pages "
                                      "overflow_pages freelist_pages pointer_map_pages cancelled")
Walk.__doc__ = "The result of PageFile.walk: findings (at most MAX_FINDINGS kept), totals, pages per root."


cdef dict _header_dict(const capsem_page_header *h):
    return {"page_size": h.page_size, "usable_size": h.usable, "page_count": h.page_count,
            "file_pages": h.file_pages, "freelist_trunk": h.freelist_trunk, "freelist_count": h.freelist_count,
            "schema_cookie": h.schema_cookie, "autovacuum_root": h.autovacuum_root,
            "incremental_vacuum": h.incremental, "lock_page": h.lock_page}


cdef object _finding(const capsem_page_finding *f):
    return Finding(KINDS.get(f.kind, str(f.kind)), bool(f.in_tree), f.page, f.tree, f.from_, f.a, f.b)


cdef uint32_t *_roots_array(roots, size_t *n) except? NULL:
    cdef list values = [int(r) for r in roots]
    n[0] = len(values)
    if not values:
        return NULL
    cdef uint32_t *out = <uint32_t *>malloc(len(values) * sizeof(uint32_t))
    if out == NULL:
        raise MemoryError()
    cdef size_t i
    for i in range(len(values)):
        if values[i] < 0 or values[i] > 0xFFFFFFFF:
            free(out)
            raise ValueError(f"root page {values[i]} is not a page number")
        out[i] = <uint32_t>values[i]
    return out


cdef class PageFile:
    """A database file opened read-only and mapped, for the page walk.

    Raises OSError naming the file when it cannot be opened (a symbolic link and a
    non-regular file are refused). Not shared between threads: one walk at a time.
    """

    cdef capsem_archive_file f
    cdef volatile int cancel_flag
    cdef int busy
    cdef readonly object path

    def __cinit__(self, path):
        self.f.fd = -1
        self.path = os.fspath(path)
        cdef bytes cpath = os.fsencode(self.path)
        cdef const char *p = cpath
        cdef int err = 0
        cdef capsem_open_status st
        with nogil:
            st = capsem_file_open(&self.f, p, &err)
        if st == CAPSEM_OPEN_SYMLINK:
            raise OSError(errno.ELOOP, "is a symbolic link", self.path)
        if st == CAPSEM_OPEN_NOT_REGULAR:
            raise OSError(errno.EINVAL, "not a regular file", self.path)
        if st != CAPSEM_OPEN_OK:
            raise OSError(err, os.strerror(err), self.path)

    def __dealloc__(self):
        capsem_file_close(&self.f)

    @property
    def size(self):
        """Bytes mapped (the file's size when it was opened)."""
        return self.f.size

    def header(self):
        """The database header as SQLite reads it (dict), or None when SQLite would not open it."""
        cdef capsem_page_header h
        cdef capsem_page_finding bad
        if capsem_page_header_parse(self.f.map, self.f.size, &h, &bad) != 0:
            return None
        return _header_dict(&h)

    def estimate(self, roots):
        """A cheap size in pages of each root's tree (its left-most path's fan-outs), in order."""
        cdef capsem_page_header h
        cdef capsem_page_finding bad
        cdef size_t n = 0
        if capsem_page_header_parse(self.f.map, self.f.size, &h, &bad) != 0:
            return [0] * len(roots)
        cdef uint32_t *r = _roots_array(roots, &n)
        if n == 0:
            return []
        cdef uint64_t *out = <uint64_t *>malloc(n * sizeof(uint64_t))
        if out == NULL:
            free(r)
            raise MemoryError()
        try:
            with nogil:
                capsem_page_estimate(self.f.map, self.f.size, &h, r, n, out)
            return [out[i] for i in range(n)]
        finally:
            free(out)
            free(r)

    def walk(self, roots):
        """Walk the freelist, every tree of ``roots`` (sqlite_schema rootpages; include 1) and
        every page's use; returns a ``Walk``. ``cancel()`` from another thread stops it."""
        if self.busy:
            raise RuntimeError("a walk of this file is already running")
        cdef size_t n = 0
        cdef uint32_t *r = _roots_array(roots, &n)
        cdef uint64_t *pages = <uint64_t *>malloc((n if n else 1) * sizeof(uint64_t))
        cdef capsem_page_walk *w = <capsem_page_walk *>malloc(sizeof(capsem_page_walk))
        cdef int rc
        if pages == NULL or w == NULL:
            free(r)
            free(pages)
            free(w)
            raise MemoryError()
        self.busy = 1
        try:
            with nogil:
                rc = capsem_page_walk_run(self.f.map, self.f.size, r, n, pages, &self.cancel_flag, w)
            if rc < 0:
                raise MemoryError()
            return Walk([_finding(&w.findings[i]) for i in range(w.nfindings)], w.findings_total,
                        w.in_tree_total, [pages[i] for i in range(n)], w.btree_pages, w.overflow_pages,
                        w.freelist_pages, w.ptrmap_pages, rc == 1)
        finally:
            self.busy = 0
            free(r)
            free(pages)
            free(w)

    def cancel(self):
        """Stop a walk running on another thread (it returns with ``cancelled`` set)."""
        self.cancel_flag = 1

    def close(self):
        """Unmap and close the file (refused while a walk runs)."""
        if self.busy:
            raise RuntimeError("a walk of this file is running")
        capsem_file_close(&self.f)
