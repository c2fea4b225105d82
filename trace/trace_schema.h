/* trace_schema: what schema 1.0 says, in one table that the writer, the
 * reader and `info` all use (internal to core/). */
#ifndef KV_TRACE_SCHEMA_H
#define KV_TRACE_SCHEMA_H

#include "trace.h"

typedef enum {
    ELEM_TOKEN,    /* any integer type on read; int32 written */
    ELEM_STORAGE,  /* float16 or float32 as storage_dtype says */
    ELEM_FLOAT,    /* float32 written; any IEEE float read */
} trace_elem;

typedef struct {
    const char *path;
    int rank;
    trace_elem elem;
    bool required;
    bool full_mode_only;   /* refused in capture_mode = evict */
    bool evict_mode_only;  /* refused in capture_mode = full */
    int t_axis;            /* the axis that grows with T (-1: none) */
    int t_axis2;           /* a second T axis (full attention), else -1 */
    const char *description; /* the dataset's `description` attribute (units, meaning) */
    const char *shape;       /* docs/trace.md's "type, shape": "float32 [L, H, T]" */
    const char *present;     /* docs/trace.md's "present": when a writer writes it */
} trace_dset_spec;

const trace_dset_spec *trace_spec(trace_dset d);

/* Expected shape of dataset d for meta m and T tokens. Axes that the
 * attributes do not fix (S, N of the eviction snapshots) are set to -1. */
void trace_expected_dims(const trace_meta *m, trace_dset d, int64_t T, int64_t dims[4]);

/* Width of one row of a (layer, head) slice: D, 1, T or V. */
int64_t trace_row_width(const trace_meta *m, trace_dset d, int64_t T);

/* /prompt_text (trace_prompt.c): its path and description, the writer
 * (file_id: the new file's root), and the reader (*text malloc'ed, NULL when
 * the trace has none; a text that is not valid UTF-8 is KV_EINPUT naming the
 * byte offset). */
#define TRACE_PROMPT_TEXT_PATH "/prompt_text"
/* The variable-length UTF-8 string type (caller closes it; -1 on failure): /prompt_text, /spans/names. */
int64_t trace_text_type(void);
extern const char TRACE_PROMPT_TEXT_DESCRIPTION[], TRACE_PROMPT_CHAT_DESCRIPTION[];
int trace_prompt_text_write(int64_t file_id, const char *text, const char *where, kv_err *err);
int trace_prompt_text_read(int64_t file_id, const char *where, char **text, kv_err *err);
/* /prompt_chat, the same way: the chat record of a templated prompt (NULL when absent). */
#define TRACE_PROMPT_CHAT_PATH "/prompt_chat"
int trace_prompt_chat_write(int64_t file_id, const char *record, const char *where, kv_err *err);
int trace_prompt_chat_read(int64_t file_id, const char *where, char **record, kv_err *err);

/* /wo (trace_wo.c): the optional output projection [L, dim, H*D]. Written at
 * creation from meta.wo (wo_dim rows per layer), checked on open (shape, a
 * float type; *dim = 0 when absent), read one layer at a time (finite). */
#define TRACE_WO_PATH "/wo"
extern const char TRACE_WO_DESCRIPTION[];
int trace_wo_write(int64_t file_id, const trace_meta *m, const char *where, kv_err *err);
int trace_wo_check(int64_t file_id, const trace_meta *m, const char *where, int64_t *dim, kv_err *err);
int trace_wo_read(int64_t file_id, const trace_meta *m, int64_t layer, float *out, const char *where, kv_err *err);

/* /spans (trace_spans.c): named token ranges of the prompt. Written at
 * creation from meta.spans; read and checked on open (*spans malloc'ed, NULL
 * when absent); trace_spans_check: count, names, ranges within prompt_len. */
#define TRACE_SPANS_PATH "/spans"
extern const char TRACE_SPANS_DESCRIPTION[];
int trace_spans_write(int64_t file_id, const trace_meta *m, const char *where, kv_err *err);
int trace_spans_read(int64_t file_id, const trace_meta *m, const char *where, trace_span **spans, int64_t *n,
                     kv_err *err);

/* Sanity limits on attributes (keep shapes and products far from overflow). */
enum {
    TRACE_MAX_LAYERS = 1024,
    TRACE_MAX_HEADS = 1024,
    TRACE_MAX_HEAD_DIM = 4096,
};
#define TRACE_MAX_TOKENS ((int64_t)1 << 31)
#define TRACE_MAX_VOCAB ((int64_t)1 << 24)
#define TRACE_MAX_WO_DIM ((int64_t)1 << 20)

#endif
