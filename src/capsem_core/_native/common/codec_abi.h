/* The few entry points of libzstd (soname libzstd.so.1) and libdeflate (libdeflate.so.0)
 * that the reader and verify kernel call, declared here from their documented, stable ABI.
 *
 * Why not the libraries' own headers: a fresh Debian machine has the runtime libraries but
 * not their -dev packages, and `pip install .` must work there with no manual step. Only
 * functions, two plain structs and four enum values are used; their layout and values are
 * fixed by both projects' ABI guarantees (zstd >= 1.4 stable API, libdeflate >= 1.0). */
#ifndef CAPSEM_CODEC_ABI_H
#define CAPSEM_CODEC_ABI_H

#include <stddef.h>

/* --- zstd --------------------------------------------------------------------------- */
typedef struct ZSTD_DCtx_s ZSTD_DCtx;

typedef struct ZSTD_inBuffer_s {
    const void *src;
    size_t size;
    size_t pos;
} ZSTD_inBuffer;

typedef struct ZSTD_outBuffer_s {
    void *dst;
    size_t size;
    size_t pos;
} ZSTD_outBuffer;

typedef enum { ZSTD_reset_session_and_parameters = 3 } ZSTD_ResetDirective;
typedef enum { ZSTD_d_windowLogMax = 100 } ZSTD_dParameter;

ZSTD_DCtx *ZSTD_createDCtx(void);
size_t ZSTD_freeDCtx(ZSTD_DCtx *dctx);
size_t ZSTD_DCtx_reset(ZSTD_DCtx *dctx, ZSTD_ResetDirective reset);
size_t ZSTD_DCtx_setParameter(ZSTD_DCtx *dctx, ZSTD_dParameter param, int value);
size_t ZSTD_decompressStream(ZSTD_DCtx *zds, ZSTD_outBuffer *output, ZSTD_inBuffer *input);
unsigned ZSTD_isError(size_t code);
const char *ZSTD_getErrorName(size_t code);

/* --- libdeflate ------------------------------------------------------------------------ */
struct libdeflate_decompressor;

enum libdeflate_result {
    LIBDEFLATE_SUCCESS = 0,
    LIBDEFLATE_BAD_DATA = 1,
    LIBDEFLATE_SHORT_OUTPUT = 2,
    LIBDEFLATE_INSUFFICIENT_SPACE = 3,
};

struct libdeflate_decompressor *libdeflate_alloc_decompressor(void);
enum libdeflate_result libdeflate_deflate_decompress_ex(struct libdeflate_decompressor *decompressor,
                                                        const void *in, size_t in_nbytes, void *out,
                                                        size_t out_nbytes_avail, size_t *actual_in_nbytes_ret,
                                                        size_t *actual_out_nbytes_ret);
void libdeflate_free_decompressor(struct libdeflate_decompressor *decompressor);

#endif
