# Included by _columns.pyx: a page of events built natively (the merge of the tables' heads,
# the Event values, millisecond times rendered as the writer stamps them).

cdef extern from *:
    """
    /* Set a slot of a new object through its member descriptor (a slotted class's field),
     * as attribute assignment would, without the class's own __setattr__. */
    static int cs_set_slot(PyObject *descr, PyObject *obj, PyObject *value) {
        descrsetfunc set = Py_TYPE(descr)->tp_descr_set;
        if (!set) {
            PyErr_SetString(PyExc_TypeError, "not a slot descriptor");
            return -1;
        }
        return set(descr, obj, value);
    }
    """
    int cs_set_slot(object descr, object obj, object value) except -1

cdef extern from "math.h" nogil:
    double nearbyint(double x)

# The last millisecond a ledger timestamp renders (9999-12-31T23:59:59.999Z).
cdef int64_t _MAX_MS = 253402300799999


cdef str _ledger_time(int64_t ms):
    """``ledger_timestamp(ms / 1000)`` of the writer: the same double arithmetic (division,
    then times 10^6 rounded half to even), then the proleptic Gregorian date of the second."""
    cdef double now = <double>ms / 1000.0
    cdef int64_t micros = <int64_t>nearbyint(now * 1000000.0)
    cdef int64_t second = micros // 1000000, fraction = micros - second * 1000000
    cdef int64_t days = second // 86400, rest = second - days * 86400
    cdef int64_t z = days + 719468, era, doe, yoe, y, doy, mp, d, m
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    if m <= 2:
        y += 1
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (y, m, d, rest // 3600, rest // 60 % 60, rest % 60, fraction)


def ledger_time(int64_t ms):
    """A millisecond time as the writer stamps text times (0 <= ms <= 9999-12-31)."""
    if not 0 <= ms <= _MAX_MS:
        raise ValueError("outside the years a ledger timestamp renders")
    return _ledger_time(ms)


def build_events(cls, tuple slots, list tables, list time_ms, list time_columns, list rows, list ids, which,
                 positions, dict bodies, shown):
    """The events of a page, in merge order, as instances of the slotted class ``cls`` whose
    fields' descriptors are ``slots`` (table, id, event_id, timestamp, row, bodies): event k
    is row ``positions[k]`` of taken table ``which[k]`` (its dict in ``rows``, its id in
    ``ids``). A millisecond time is rendered here; any time other than that or a text is
    ``shown(table index, value)``."""
    cdef Py_ssize_t n = len(which), j
    cdef list out = [None] * n
    cdef int k
    cdef int64_t i
    cdef dict row
    cdef PyTypeObject *tp = <PyTypeObject *>cls
    cdef object event_id, when, stamp, obj
    for j in range(n):
        k = which[j]
        i = positions[j]
        row = <dict>(<list>rows[k])[i]
        event_id = row["event_id"]
        when = row[time_columns[k]]
        if time_ms[k] and type(when) is int and 0 <= when <= _MAX_MS:
            stamp = _ledger_time(when)
        elif type(when) is str:
            stamp = when
        else:
            stamp = shown(k, when)
        obj = cls.__new__(cls)
        cs_set_slot(slots[0], obj, tables[k])
        cs_set_slot(slots[1], obj, (<list>ids[k])[i])
        cs_set_slot(slots[2], obj, event_id if type(event_id) is str else str(event_id))
        cs_set_slot(slots[3], obj, stamp)
        cs_set_slot(slots[4], obj, row)
        cs_set_slot(slots[5], obj, bodies.get((tables[k], event_id), ()))
        out[j] = obj
    return out


def merge_heads(list keys, list ids, list sizes, list numbers, int64_t limit, int64_t budget, list more):
    """Rows of several tables in the order a k-way merge of their heads gives (each table's
    rows stay in their order; the next row is the smallest head by (key, number, id)), until
    ``limit`` rows or until the sizes taken reach ``budget``. A table whose ``more`` is true
    has rows past those given: the merge stops when it runs out of them, since its next row
    might come next. Returns (table, row) positions as two int64 arrays and the table that
    ran out (-1 for none)."""
    cdef int k = len(keys), t, best, starved = -1
    cdef int64_t n = 0, spent = 0
    out_t = np.zeros(max(limit, 0), np.int64)
    out_r = np.zeros(max(limit, 0), np.int64)
    cdef int64_t[::1] ot = out_t, orow = out_r
    cdef list kv = [np.ascontiguousarray(x, np.int64) for x in keys]
    cdef list iv = [np.ascontiguousarray(x, np.int64) for x in ids]
    cdef list sv = [np.ascontiguousarray(x, np.int64) for x in sizes]
    cdef int64_t[:, ::1] heads = np.zeros((max(k, 1), 4), np.int64)  # at, length, number, -
    cdef const int64_t *kp[64]
    cdef const int64_t *ip[64]
    cdef const int64_t *sp[64]
    cdef const int64_t[::1] view
    if k > 64:
        raise ValueError("at most 64 tables")
    for t in range(k):
        view = kv[t]
        kp[t] = &view[0] if view.shape[0] else NULL
        heads[t, 1] = view.shape[0]
        view = iv[t]
        ip[t] = &view[0] if view.shape[0] else NULL
        view = sv[t]
        sp[t] = &view[0] if view.shape[0] else NULL
        heads[t, 2] = numbers[t]
        heads[t, 3] = 1 if more[t] else 0
    with nogil:
        while n < limit and starved < 0:
            best = -1
            for t in range(k):
                if heads[t, 0] >= heads[t, 1]:
                    if heads[t, 3]:
                        starved = t
                        break
                    continue
                if best < 0:
                    best = t
                    continue
                if (kp[t][heads[t, 0]] < kp[best][heads[best, 0]] or
                        (kp[t][heads[t, 0]] == kp[best][heads[best, 0]] and
                         (heads[t, 2] < heads[best, 2] or
                          (heads[t, 2] == heads[best, 2] and ip[t][heads[t, 0]] < ip[best][heads[best, 0]])))):
                    best = t
            if best < 0 or starved >= 0:
                break
            ot[n] = best
            orow[n] = heads[best, 0]
            spent += sp[best][heads[best, 0]]
            heads[best, 0] += 1
            n += 1
            if spent >= budget:
                break
    return out_t[:n], out_r[:n], starved

