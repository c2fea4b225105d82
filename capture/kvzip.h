/* kvzip: `capture --kvzip`, the reconstruction pass of KVzip (Kim et al.,
 * "KVzip: Query-Agnostic KV Cache Compression with Context Reconstruction",
 * 2025; NVIDIA kvpress kvpress/presses/kvzip_press.py). After the sequence
 * the model reads the reconstruction prompt: "\n\nRepeat the previous context
 * exactly." and "\n" (each encoded without BOS: the source's prompt and its
 * suffix for a model without a chat template), then the sequence again; each
 * key j < T of every (layer, query head) gets the largest softmax weight any
 * query of that pass gave it, /attention/kvzip [L, H, T] (docs/trace.md).
 * Memory: L·H·T floats beside the caches of T + R rows, never T×T. */
#ifndef KV_CAPTURE_KVZIP_H
#define KV_CAPTURE_KVZIP_H

#include <stdint.h>

#include "capture/run.h"
#include "core/kv_error.h"
#include "model/model.h"

/* The reconstruction pass's template ids for model m (malloc'ed *ids, *n):
 * KV_EUSAGE naming the model when it has no tokenizer. The pass walks
 * *n + T positions after the sequence. */
int kvzip_template(const kv_model *m, const char *model_path, int32_t **ids, int64_t *n, kv_err *err);

/* The pass over the template then tokens[0..T) on run r (opened with
 * extra = n_template + T, after every step of the sequence), and its
 * /attention/kvzip rows into the run's trace. */
int kvzip_record(kv_run *r, const model_config *c, const int32_t *tmpl, int64_t n_template, const int32_t *tokens,
                 int64_t T, kv_err *err);

#endif
