# cython: language_level=3, boundscheck=False, wraparound=False
"""Native session.db page map: the whole-file half of a page check (page_map.h).

``PageFile`` opens a database file read-only (no symlinks, regular files only) and maps it;
``walk`` follows every tree of the roots it is given, the freelist and the pointer map, and
returns what a whole-file ``PRAGMA quick_check`` would report that per-table checks cannot;
``estimate`` sizes each tree cheaply for ordering work; ``records`` reads chosen columns of
every row of one table tree into numpy arrays: integers, texts as ``Codes`` or as their bytes
end to end (``TEXT``), a body_hash as its digest (``DIGEST``), an event id as its value
(``HEX``) (page_records.h), ``records_of`` several trees in one pass, together in file
order, and ``follow`` keeps the scans behind a read-ahead streaming the file (``StreamGate``,
stream_gate.h); ``missing_sorted`` joins two sorted arrays of them, ``runs``
thins two columns to the rows where their pair changes. The walk and
the scans run without the GIL under the SIGBUS guard. Findings are raw tuples (``Finding``):
the caller words them, with the names it knows for each root. This module runs no SQL and imports nothing from the Python
layer.
"""

import collections
import errno
import os

import numpy as np

from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc

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
    ctypedef struct capsem_tree_rule:
        uint32_t fields
        uint64_t not_null
        uint64_t null
        uint64_t no_number
        uint64_t no_text
    int capsem_page_walk_run(const uint8_t *map, uint64_t size, const uint32_t *roots, size_t nroots,
                             uint64_t *pages_out, volatile const int *cancel, uint64_t window,
                             const capsem_tree_rule *rules, uint8_t *sound_out, capsem_page_walk *w)
    void capsem_page_estimate(const uint8_t *map, uint64_t size, const capsem_page_header *h, const uint32_t *roots,
                              size_t nroots, uint64_t window, uint64_t *out)

cdef extern from "page_window.h" nogil:
    unsigned CAPSEM_WINDOW_DEFAULT_BYTES

cdef extern from "big_alloc.h" nogil:
    void capsem_big_free(void *p, size_t size)

cdef extern from "text_codes.h" nogil:
    ctypedef struct capsem_codes:
        pass
    capsem_codes *capsem_codes_new(uint64_t seed)
    void capsem_codes_free(capsem_codes *t)
    uint32_t capsem_codes_count(const capsem_codes *t)
    uint32_t capsem_codes_find(const capsem_codes *t, const uint8_t *p, uint32_t len)
    const uint8_t *capsem_codes_text(const capsem_codes *t, uint32_t code, uint32_t *len)
    uint64_t capsem_codes_hash(const capsem_codes *t, const uint8_t *p, uint32_t len)
    int64_t capsem_codes_add_hashed(capsem_codes *t, uint64_t hash, const uint8_t *p, uint32_t len)

include "pages_gate.pxi"

cdef extern from "page_records.h" nogil:
    uint32_t CAPSEM_REC_ROWID
    int64_t CAPSEM_REC_NULL
    int CAPSEM_REC_MAX_COLUMNS
    int CAPSEM_REC_OK, CAPSEM_REC_CANCELLED, CAPSEM_REC_NO_MEMORY, CAPSEM_REC_UNREADABLE, CAPSEM_REC_GAVE_UP
    int CAPSEM_REC_SHRANK
    int CAPSEM_REC_INTEGER, CAPSEM_REC_CODE, CAPSEM_REC_TEXT, CAPSEM_REC_DIGEST, CAPSEM_REC_HEX
    ctypedef struct capsem_rec_column:
        uint32_t column
        uint32_t kind
        capsem_codes *codes
        int64_t *values
        uint64_t capacity
        uint64_t odd
        uint8_t *bytes
        uint64_t nbytes
        uint64_t bytes_cap
    ctypedef struct capsem_rec_tree:
        uint32_t root
        capsem_rec_column *cols
        size_t ncols
        uint64_t rows
        int status
    int CAPSEM_REC_MAX_TREES
    int capsem_records_scan_trees(const uint8_t *map, uint64_t size, const capsem_page_header *h,
                                  capsem_rec_tree *trees, size_t ntrees, volatile const int *cancel, uint64_t window,
                                  capsem_stream_gate *follow)

if capsem_guard_install() != 0:
    raise ImportError("capsem_core._native._pages could not install its SIGBUS guard")

MAX_FINDINGS = CAPSEM_PAGES_MAX_FINDINGS
# The bytes of the map one walk or scan keeps resident unless its PageFile is given another.
WINDOW_BYTES = CAPSEM_WINDOW_DEFAULT_BYTES
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

ROWID = -1
NULL_VALUE = CAPSEM_REC_NULL
MAX_COLUMNS = CAPSEM_REC_MAX_COLUMNS
MAX_TREES = CAPSEM_REC_MAX_TREES

# records(): the kinds of column besides an integer (None) and a Codes.
TEXT = "text"
DIGEST = "digest"
HEX = "hex"

Records = collections.namedtuple("Records", "status rows values odd data")
Records.__doc__ = ("The result of PageFile.records: status (\"ok\", \"cancelled\", \"unreadable\": the tree is not one "
                   "the scan reads, \"gave_up\": the codes met their probe bound, \"shrank\"), the row count, one "
                   "int64 array per column asked for, per column the values of another kind (read as NULL), and per "
                   "column its bytes: a TEXT column's texts end to end (uint8), a DIGEST column's digests ((rows, "
                   "32) uint8), None for the others.")

Walk = collections.namedtuple("Walk", "findings findings_total in_tree_total tree_pages btree_pages "
                                      "overflow_pages freelist_pages pointer_map_pages cancelled sound")
Walk.__doc__ = ("The result of PageFile.walk: findings (at most MAX_FINDINGS kept), totals, pages per root, and "
                "per root whether its tree passed every test of SQLite's per-table quick_check (all False "
                "without rules).")


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
    cdef Py_ssize_t i
    for i in range(len(values)):
        if values[i] < 0 or values[i] > 0xFFFFFFFF:
            free(out)
            raise ValueError(f"root page {values[i]} is not a page number")
        out[i] = <uint32_t>values[i]
    return out


def missing_sorted(const int64_t[::1] held, const int64_t[::1] wanted):
    """How many values of ``wanted`` ``held`` lacks, both sorted ascending: one merge of the
    two, where a search per value would jump about ``held`` at random."""
    cdef Py_ssize_t i = 0, j, n = held.shape[0], m = wanted.shape[0], missing = 0
    with nogil:
        for j in range(m):
            while i < n and held[i] < wanted[j]:
                i += 1
            if i == n or held[i] != wanted[j]:
                missing += 1
    return missing


def runs(const int64_t[::1] first, const int64_t[::1] second):
    """The rows that begin a run of equal (first, second) pairs: their values, in order, as
    two arrays (a scan's columns whose values come in runs, thinned in one pass)."""
    cdef Py_ssize_t n = first.shape[0], i, k = 0
    if second.shape[0] != n:
        raise ValueError("the two columns differ in length")
    out_first = np.empty(n, dtype=np.int64)
    out_second = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] a = out_first, b = out_second
    with nogil:
        for i in range(n):
            if i == 0 or first[i] != first[i - 1] or second[i] != second[i - 1]:
                a[k] = first[i]
                b[k] = second[i]
                k += 1
    return out_first[:k], out_second[:k]


include "pages_values.pxi"


cdef class PageFile:
    """A database file opened read-only and mapped, for the page walk.

    ``window``: the bytes of the map each walk and scan keeps resident (its pages are
    dropped from the process behind it; the page cache keeps them), ``WINDOW_BYTES`` by
    default, 0 for no bound. Raises OSError naming the file when it cannot be opened (a
    symbolic link and a non-regular file are refused), ValueError for a negative window.
    Not shared between threads: one walk at a time.
    """

    cdef capsem_archive_file f
    cdef volatile int cancel_flag
    cdef capsem_stream_gate *gate   # held: the read-ahead the scans stay behind, or NULL
    cdef int busy      # walks and scans running (each on its own thread)
    cdef int walking
    cdef readonly object path
    cdef readonly uint64_t window

    def __cinit__(self, path, window=None):
        self.f.fd = -1
        if window is not None and window < 0:
            raise ValueError("window must not be negative")
        self.window = CAPSEM_WINDOW_DEFAULT_BYTES if window is None else window
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
        capsem_gate_drop(self.gate)

    @property
    def size(self):
        """Bytes mapped (the file's size when it was opened)."""
        return self.f.size

    def fileno(self):
        """The descriptor of the open file (-1 once closed), for a read-ahead of it."""
        return self.f.fd

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
                capsem_page_estimate(self.f.map, self.f.size, &h, r, n, self.window, out)
            return [out[i] for i in range(n)]
        finally:
            free(out)
            free(r)

    def walk(self, roots, rules=None):
        """Walk the freelist, every tree of ``roots`` (sqlite_schema rootpages; include 1) and
        every page's use; returns a ``Walk``. ``rules``: per root, None for no judgement, or
        (fields, not_null, null, no_number, no_text): 0 fields for an index tree, else a rowid
        table's record field count and the bit masks (field i: bit i, i < 64) of the fields
        every record holds a value in, is NULL in, holds no number in and no text in;
        ``Walk.sound`` says which trees passed. ``cancel()`` from another thread stops it."""
        if self.walking:
            raise RuntimeError("a walk of this file is already running")
        cdef size_t n = 0
        cdef size_t i
        if rules is not None:
            rules = list(rules)
            if len(rules) != len(roots):
                raise ValueError("one rule per root")
        cdef uint32_t *r = _roots_array(roots, &n)
        cdef uint64_t *pages = NULL
        cdef capsem_page_walk *w = NULL
        cdef capsem_tree_rule *judged = NULL
        cdef uint8_t *sound = NULL
        cdef int rc
        try:
            pages = <uint64_t *>malloc((n if n else 1) * sizeof(uint64_t))
            w = <capsem_page_walk *>malloc(sizeof(capsem_page_walk))
            if rules is not None:
                judged = <capsem_tree_rule *>calloc(n if n else 1, sizeof(capsem_tree_rule))
                sound = <uint8_t *>calloc(n if n else 1, 1)
                if judged == NULL or sound == NULL:
                    raise MemoryError()
                for i in range(n):
                    if rules[i] is None:
                        judged[i].fields = 0xFFFFFFFF   # a table of no rule: never sound, nor an index
                    else:
                        (judged[i].fields, judged[i].not_null, judged[i].null, judged[i].no_number,
                         judged[i].no_text) = rules[i]
            if pages == NULL or w == NULL:
                raise MemoryError()
            self.busy += 1
            self.walking = 1
            try:
                with nogil:
                    rc = capsem_page_walk_run(self.f.map, self.f.size, r, n, pages, &self.cancel_flag, self.window,
                                              judged, sound, w)
            finally:
                self.busy -= 1
                self.walking = 0
            if rc < 0:
                raise MemoryError()
            return Walk([_finding(&w.findings[i]) for i in range(w.nfindings)], w.findings_total,
                        w.in_tree_total, [pages[i] for i in range(n)], w.btree_pages, w.overflow_pages,
                        w.freelist_pages, w.ptrmap_pages, rc == 1,
                        [sound != NULL and rc == 0 and sound[i] != 0 for i in range(n)])
        finally:
            free(r)
            free(pages)
            free(w)
            free(judged)
            free(sound)

    def records(self, uint32_t root, columns):
        """Read chosen columns of every row of the table tree at ``root``, in rowid order.
        ``columns``: (record column number, kind) pairs, in increasing column order, ``ROWID``
        (an integer) anywhere. Kinds: None, an integer column (its value, ``NULL_VALUE`` for
        NULL); a ``Codes``, a text column as codes (0 NULL); ``TEXT``, a text column's bytes
        (``values[i]`` where row i's start in ``data``, ``-1 - start`` for NULL; each row's
        bytes end where the next row's start); ``DIGEST``, a body_hash (1 for "blake3:" + 64
        lower-case hex, its digest in ``data``; 0 another text; -1 not a text, NULL
        included); ``HEX``, an event id of 12 lower-case hex digits as its 48-bit value
        (``NULL_VALUE`` for NULL; any other value is odd). Returns ``Records``. May run
        beside a walk or another scan, never one sharing a ``Codes``; ``cancel()`` stops it."""
        return self.records_of([(root, columns)])[0]

    def records_of(self, trees):
        """``records`` of several trees (``(root, columns)`` pairs, at most ``MAX_TREES``) in
        one pass on this thread: the trees are walked together, always the page that lies
        first in the file next, so the pass reads the file in about file order (behind a
        read-ahead it follows, see ``follow``) rather than once per tree. Trees of one pass
        may share ``Codes``. A list of ``Records``, one per tree, in order."""
        cdef list given = [(int(root), [(int(c), k) for c, k in columns]) for root, columns in trees]
        cdef size_t ntrees = len(given), t, i, n
        if ntrees > CAPSEM_REC_MAX_TREES:
            raise ValueError("at most MAX_TREES trees")
        for root, spec_in in given:
            if not 0 <= root <= 0xFFFFFFFF:
                raise ValueError(f"page {root} is not a page number")
            if len(spec_in) > CAPSEM_REC_MAX_COLUMNS:
                raise ValueError("at most MAX_COLUMNS columns")
            numbered = [c for c, _k in spec_in if c != ROWID]
            if any(b <= a for a, b in zip(numbered, numbered[1:])):
                raise ValueError("record columns must be in increasing order")
        cdef capsem_page_header h
        cdef capsem_page_finding bad
        cdef capsem_rec_tree *tree = <capsem_rec_tree *>calloc(ntrees if ntrees else 1, sizeof(capsem_rec_tree))
        cdef capsem_rec_column *spec = <capsem_rec_column *>calloc(
            (ntrees if ntrees else 1) * CAPSEM_REC_MAX_COLUMNS, sizeof(capsem_rec_column))
        if tree == NULL or spec == NULL:
            free(tree)
            free(spec)
            raise MemoryError()
        cdef Codes codes
        keep = {}   # the Codes stay alive while the scan holds their tables
        cdef int rc = CAPSEM_REC_OK
        cdef bint started = False
        try:
            for t in range(ntrees):
                root, spec_in = given[t]
                tree[t].root = <uint32_t>root
                tree[t].cols = spec + t * CAPSEM_REC_MAX_COLUMNS
                n = len(spec_in)
                tree[t].ncols = n
                for i in range(n):
                    column, kind = spec_in[i]
                    _column_spec(&tree[t].cols[i], column, kind, keep)
            if capsem_page_header_parse(self.f.map, self.f.size, &h, &bad) != 0:
                return [Records("unreadable", 0, [], [], []) for _t in given]
            if codes_busy(list(keep.values())):
                raise RuntimeError("a scan sharing these codes is running")
            for codes in keep.values():
                codes.busy = 1
            self.busy += 1
            started = True
            with nogil:
                rc = capsem_records_scan_trees(self.f.map, self.f.size, &h, tree, ntrees, &self.cancel_flag,
                                               self.window, self.gate)
            if rc == CAPSEM_REC_NO_MEMORY or any(tree[t].status == CAPSEM_REC_NO_MEMORY for t in range(ntrees)):
                raise MemoryError()
            out = []
            for t in range(ntrees):
                n = tree[t].ncols
                if tree[t].status != CAPSEM_REC_OK:
                    status = {CAPSEM_REC_CANCELLED: "cancelled", CAPSEM_REC_UNREADABLE: "unreadable",
                              CAPSEM_REC_GAVE_UP: "gave_up", CAPSEM_REC_SHRANK: "shrank"}.get(tree[t].status, "unreadable")
                    out.append(Records(status, 0, [], [], []))
                    continue
                values = [_lend(&tree[t].cols[i], tree[t].rows) for i in range(n)]
                data = [_lend_bytes(&tree[t].cols[i], tree[t].rows) for i in range(n)]
                out.append(Records("ok", tree[t].rows, values, [tree[t].cols[i].odd for i in range(n)], data))
            return out
        finally:
            if started:
                self.busy -= 1
                for codes in keep.values():
                    codes.busy = 0
            for t in range(ntrees):
                for i in range(tree[t].ncols if tree[t].cols != NULL else 0):
                    capsem_big_free(tree[t].cols[i].values, tree[t].cols[i].capacity * sizeof(int64_t))
                    capsem_big_free(tree[t].cols[i].bytes, tree[t].cols[i].bytes_cap)
            free(tree)
            free(spec)

    def follow(self, StreamGate gate):
        """Scans (``records``) from now on read no page a read-ahead of this file has not
        read yet while ``gate`` is open: they wait for it (a scan ahead of the stream would
        read each missing page alone, between the stream's reads). None: they read at once.
        Refused while a walk or a scan runs."""
        if self.busy:
            raise RuntimeError("a walk or a scan of this file is running")
        if gate is not None:
            capsem_gate_hold(gate.g)
        capsem_gate_drop(self.gate)
        self.gate = gate.g if gate is not None else NULL

    def cancel(self):
        """Stop a walk or a scan running on another thread, and every later one (a walk
        returns with ``cancelled`` set, a scan with that status)."""
        self.cancel_flag = 1

    def close(self):
        """Unmap and close the file (refused while a walk or a scan runs)."""
        if self.busy:
            raise RuntimeError("a walk or a scan of this file is running")
        capsem_file_close(&self.f)
        capsem_gate_drop(self.gate)
        self.gate = NULL
