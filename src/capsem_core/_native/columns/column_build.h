/* One record batch's columns, filled value by value with SQLite's exact values, then handed out
 * as Arrow arrays (arrow_export.h).
 *
 * A SQLite column is not typed: each value has a storage class. What a column becomes in
 * Arrow is fixed for the whole stream from the set of classes its values hold (found by a
 * first pass before the first batch, so the schema is known before any row is handed out):
 *
 *   one class (NULLs aside)   the plain type: INTEGER int64 ("l"), REAL float64 ("g"), TEXT
 *                             that is valid UTF-8 utf8 ("u"), TEXT that is not binary ("z"),
 *                             BLOB binary ("z"); a NULL clears the validity bit
 *   no class (all NULL, or    the type of its declared affinity, every value null
 *   no rows)
 *   several classes           a dense union ("+ud:") of one child per class present, type id =
 *                             class number; NULLs are the values of a null-type child
 *
 * Text that is not UTF-8 is a class of its own (CS_TEXT_BYTES, binary), never put in a utf8
 * array: Arrow requires valid UTF-8 there. Offsets are 32-bit: a batch is cut before any
 * column's bytes could pass 2^31 - 1 (one value alone is bounded by SQLite's own limit). */
#ifndef CAPSEM_COLUMN_BUILD_H
#define CAPSEM_COLUMN_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "arrow_abi.h"
#include "arrow_export.h"

enum {
    CS_NULL = 0,
    CS_INTEGER = 1,
    CS_REAL = 2,
    CS_TEXT = 3,       /* valid UTF-8 */
    CS_TEXT_BYTES = 4, /* TEXT whose bytes are not UTF-8 */
    CS_BLOB = 5,
    CS_CLASSES = 6,
};

#define CS_UNION 0xFF
/* Bytes every data buffer keeps past its end, so a short value may be copied in whole
 * 16-byte moves. */
#define CS_DATA_SLACK 64

/* How a column is laid out for the whole stream. */
typedef struct {
    uint8_t mask;                  /* classes present (bit per class) */
    uint8_t plain;                 /* the plain class, or CS_UNION */
    int8_t child[CS_CLASSES];      /* union: the child index of each class, -1 absent */
    uint8_t nchild;
} cs_layout;

/* The layout of a column holding the classes of `mask`, typed as `empty` when it holds none. */
void cs_layout_of(cs_layout *lay, uint8_t mask, uint8_t empty);

/* One typed vector: a plain column, or one child of a union. */
typedef struct {
    uint8_t cls;
    int64_t n, nulls, cap;
    uint8_t *valid;     /* plain columns: the validity bitmap (cap bits) */
    void *values;       /* INTEGER int64 / REAL double (cap) */
    int32_t *offs;      /* TEXT / TEXT_BYTES / BLOB: cap + 1 offsets */
    uint8_t *data;
    int64_t data_len, data_cap;
} cs_vec;

typedef struct {
    const cs_layout *lay;
    cs_vec plain;
    /* union */
    int8_t *types;
    int32_t *uoffs;
    int64_t n, cap;
    cs_vec kids[CS_CLASSES];
} cs_col;

/* Start a column of `lay` with room for `rows` values (`counts` / `bytes` per class, when
 * known, size the union children and the data exactly; NULL: grown as needed). 0 or -1. */
int cs_col_init(cs_col *c, const cs_layout *lay, int64_t rows, const int64_t *counts, const int64_t *bytes);
void cs_col_free(cs_col *c);

/* Append a value: 0, or -1 when memory ran out or the column does not take its class. The
 * common case (a plain column with room, as the page path's exact sizes always leave) is
 * inline, without a call per value; growth and a union's children are cs_col_add_*. */
int cs_col_add_null(cs_col *c);
int cs_col_add_int(cs_col *c, int64_t v);
int cs_col_add_real(cs_col *c, double v);
/* Room for `len` bytes of a value of class `cls` (TEXT, TEXT_BYTES or BLOB), appended: the
 * caller writes them there. NULL when memory ran out or the batch's offsets would overflow. */
uint8_t *cs_col_add_bytes(cs_col *c, uint8_t cls, uint32_t len);

static inline void cs_vec_valid(cs_vec *v) {
    if (v->valid) v->valid[v->n >> 3] |= (uint8_t)(1u << (v->n & 7));
}

static inline int cs_col_null(cs_col *c) {
    cs_vec *v = &c->plain;
    if (c->lay->plain == CS_UNION || v->cls == CS_NULL || v->n >= v->cap) return cs_col_add_null(c);
    if (v->values) ((int64_t *)v->values)[v->n] = 0;
    else v->offs[v->n + 1] = (int32_t)v->data_len;
    v->n++;
    v->nulls++;
    return 0;
}

/* Where the next value of a plain number column of class `cls` goes (marked valid), when it
 * has room; else NULL, for the general path. */
static inline void *cs_col_slot(cs_col *c, uint8_t cls) {
    cs_vec *v = &c->plain;
    if (c->lay->plain != cls || v->n >= v->cap) return NULL;
    cs_vec_valid(v);
    return (int64_t *)v->values + v->n++;
}

static inline int cs_col_int(cs_col *c, int64_t x) {
    int64_t *at = cs_col_slot(c, CS_INTEGER);
    return at ? (*at = x, 0) : cs_col_add_int(c, x);
}

static inline int cs_col_real(cs_col *c, double x) {
    double *at = cs_col_slot(c, CS_REAL);
    return at ? (*at = x, 0) : cs_col_add_real(c, x);
}

static inline uint8_t *cs_col_bytes(cs_col *c, uint8_t cls, uint32_t len) {
    cs_vec *v = &c->plain;
    int64_t end = v->data_len + (int64_t)len;
    if (c->lay->plain != cls || v->n >= v->cap || end + CS_DATA_SLACK > v->data_cap || end > INT32_MAX)
        return cs_col_add_bytes(c, cls, len);
    uint8_t *at = v->data + v->data_len;
    cs_vec_valid(v);
    v->data_len = end;
    v->offs[++v->n] = (int32_t)end;
    return at;
}

/* Hand the columns' buffers to a new cs_mem and fill `out` as a struct array of `rows` rows
 * (the columns are left empty). 0 or -1 (out released, buffers freed). */
int cs_batch_export(cs_col *cols, size_t ncols, int64_t rows, struct ArrowArray *out);

/* The schema of columns of `lays` named `names`, as a struct. 0 or -1. */
int cs_schema_export(const cs_layout *lays, const char *const *names, size_t ncols, struct ArrowSchema *out);

/* The Arrow format string of a plain class. */
const char *cs_class_format(uint8_t cls);
extern const char *const CS_CLASS_NAMES[CS_CLASSES];

#endif
