/* fuzz_model.h: what the files of the fuzz_trace_validate harness share.
 *
 * The harness is one libFuzzer target in five files, one concern each:
 *   fuzz_model.c          the model of a trace file: element types and their
 *                         bytes, plausible contents, the pseudo-random stream;
 *   fuzz_input.c          what the input bytes mean: the header that picks a
 *                         valid trace, then one mutation per group of bytes;
 *   fuzz_write.c          the model written as an in-memory HDF5 file;
 *   fuzz_oracle.c         whether the model is a valid trace (docs/trace.md), and
 *                         what its attributes say;
 *   fuzz_trace_validate.c the entry point: open the file with core/, and
 *                         check what it accepts, refuses and reads.
 * Everything here is internal to the harness (prefix fz_); see README.md.
 */
#ifndef FUZZ_MODEL_H
#define FUZZ_MODEL_H

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace/trace.h"

/* ---- failure reporting (fuzz_trace_validate.c) ------------------------- */

/* Prints where and what failed, then what the oracle decided (fz_oracle_ctx),
 * and aborts: libFuzzer saves the input. */
_Noreturn void fz_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define CHECK(c, ...)                                                                      \
    do {                                                                                   \
        if (!(c)) fz_fail_at(__FILE__, __LINE__, "check '" #c "' failed: " __VA_ARGS__); \
    } while (0)
/* An HDF5 call made by the harness itself must work. */
#define H5OK(c)                                                                        \
    do {                                                                               \
        if ((c) < 0) fz_fail_at(__FILE__, __LINE__, "harness HDF5 call failed: " #c); \
    } while (0)

/* ---- input bytes (read in fuzz_input.c) -------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t n;
} src;

/* ---- the pseudo-random stream (fuzz_model.c) --------------------------- */

/* Seeded from the input header; the same input draws the same numbers, from
 * building the model through the partial reads of the checks. */
void fz_seed(uint64_t seed);
uint64_t fz_rnd(void);

/* ---- element types (fuzz_model.c) -------------------------------------- */

typedef enum {
    ET_I8, ET_U8, ET_I16, ET_U16, ET_I32, ET_U32, ET_I64, ET_U64,
    ET_F16, ET_F32, ET_F64,
    ET_BF16,      /* a 2-byte float that is not IEEE binary16 */
    ET_I128,      /* a 16-byte integer */
    ET_ENUM,      /* enum over int32 */
    ET_COMPOUND,  /* {int32 a; float b} */
    ET_STR,       /* fixed-length string, 6 bytes */
    ET_ARR,       /* array type of 2 int64 (one element holds two numbers) */
    ET_COUNT
} etype;

/* What docs/trace.md#conventions accepts for each: any integer (<= 64 bits), IEEE f16/f32/f64, else other. */
typedef enum { K_INT, K_F16, K_F32, K_F64, K_OTHER, K_STRING } okind;

okind fz_kind_of(etype e);
size_t fz_esize(etype e);
/* The name trace_describe gives the type ("?" for types a trace never holds). */
const char *fz_type_label(etype e);
void fz_put_le(uint8_t *p, uint64_t v, size_t n);
/* Stores v in an element of type e (integers truncate, as a cast would). */
void fz_encode(etype e, uint8_t *p, double v, int64_t iv);
/* Integer value of an integer element; false when it does not fit int64. */
bool fz_decode_int(etype e, const uint8_t *p, int64_t *out);
/* What a float32 reader must see for a float element. */
float fz_decode_f32(etype e, const uint8_t *p);
double fz_decode_f64(etype e, const uint8_t *p);

/* ---- the model of the file (fuzz_model.c) ------------------------------ */

enum { NDS = TRACE_NDSETS, MAX_RANK = 6, MAX_ELEMS = 100000, MAX_STR = 700 };

extern const char *const FZ_DS_PATH[NDS];

/* What sits at a dataset's path: nothing, a dataset, a group, a committed
 * datatype, or a soft link to nowhere. */
typedef enum { OBJ_ABSENT, OBJ_DSET, OBJ_GROUP, OBJ_NAMED_TYPE, OBJ_DANGLING } objkind;

enum { F_SHUFFLE = 1, F_DEFLATE = 2, F_FLETCHER = 4 };

typedef struct {
    objkind obj;
    int rank;
    hsize_t dims[MAX_RANK];
    etype et;
    bool be;
    bool chunked;
    bool compact;      /* compact layout (when not chunked and small) */
    unsigned filters;
    bool unwritten;    /* no H5Dwrite: every element reads as the fill value */
    bool fill_never;   /* ... or, with H5D_FILL_TIME_NEVER, is undefined */
    double fill_v;     /* the fill value, encoded in `et` by fz_finalize() */
    int64_t fill_i;
    uint8_t fill[16];
    uint8_t *raw;      /* nelem elements, memory (little-endian) layout */
    size_t nelem;
} dmodel;

typedef enum {
    A_SCHEMA, A_CREATOR, A_MODEL, A_ARCH, A_ROPE_STYLE, A_MODE, A_STORAGE,
    A_LAYERS, A_HEADS, A_KV_HEADS, A_HEAD_DIM, A_TOKENS, A_PROMPT, A_VOCAB,
    A_THETA, A_CHUNK, A_EV_POLICY, A_EV_PARAMS, A_EV_BUDGET, A_EV_CHUNK, NATTR
} attr_id;

extern const char *const FZ_ATTR_NAME[NATTR];

/* String flavours: variable length (UTF-8 / ASCII), fixed length with each padding. */
enum { S_VL_UTF8, S_VL_ASCII, S_FIX_NULLTERM, S_FIX_NULLPAD, S_FIX_SPACEPAD, S_NFLAVORS };
#define S_FIX_UTF8 8 /* or-ed into a fixed-length flavour: UTF-8 character set */

typedef struct {
    bool present;
    etype et;          /* ET_STR: a string attribute (flavour `sflavor`) */
    bool be;
    int n;             /* elements: 0 = null dataspace */
    bool as_array;     /* n == 1 written as 1-D [1] instead of scalar */
    uint8_t raw[2][16];
    int sflavor;
    uint8_t s[MAX_STR];
    size_t slen;
} amodel;

typedef struct {
    int64_t L, H, K, D, T, V;   /* what the data was built with */
    bool f16, evict;
    amodel a[NATTR];
    dmodel d[NDS];
    int attention_as;           /* 0 group, 1 a dataset named /attention */
    int evict_as;               /* 0 group, 1 a dataset named /evict */
    bool extra;                 /* unknown extra attribute, dataset and group */
    bool reopen;                /* open read-only from the file image */
} model;

void fz_set_int_attr(amodel *a, int64_t v);
void fz_set_str_attr(amodel *a, const char *s, int flavor);
/* Plausible contents for dataset `which` in its current shape and type. */
void fz_gen_values(model *m, int which);
/* A dataset of this shape and type, chunked, unfiltered, written. */
void fz_set_dset(model *m, int which, int rank, const int64_t *dims, etype et);
/* The dataset in the shape and type the model's L, H, K, D, T, V give it. */
void fz_default_dset(model *m, int which);
/* Whether a reader finds dataset `which` at its path (a container that is a
 * dataset hides what would be below it). */
bool fz_visible(const model *m, int which);
/* Fills unwritten datasets with their fill value, in their final type. */
void fz_finalize(model *m);
void fz_free_model(model *m);

/* ---- what the input means (fuzz_input.c) ------------------------------- */

/* The 10-byte header: a well-formed small trace. */
void fz_build_valid(model *m, src *in);
/* The rest of the input: up to 64 mutations of the model. */
void fz_mutate(model *m, src *in);

/* ---- the HDF5 file (fuzz_write.c) -------------------------------------- */

/* Writes the model into a new in-memory file named into `name`; returns it
 * open (read-only when the model says reopen). */
hid_t fz_write_model(const model *m, char *name, size_t cap);

/* ---- the oracle (fuzz_oracle.c) ---------------------------------------- */

/* What a valid file's attributes say, and which datasets a reader must find. */
typedef struct {
    int64_t L, H, K, D, T, V, prompt, chunk, budget, evchunk, smajor, sminor;
    double theta;
    char creator[MAX_STR + 1], model_name[MAX_STR + 1], arch[MAX_STR + 1], rope[MAX_STR + 1];
    char mode[MAX_STR + 1], storage[MAX_STR + 1], policy[MAX_STR + 1], params[MAX_STR + 1];
    bool evict, f16;
    bool present[NDS];
} expect;

/* Why the oracle decided as it did, for the failure report. */
extern char fz_oracle_ctx[4096];

/* Whether the model is a valid trace (docs/trace.md, trace.h); fills `e` when it is. */
bool fz_oracle(const model *m, expect *e);

#endif
