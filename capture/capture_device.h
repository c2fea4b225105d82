/* capture_device: what a capture on the GPU (`--device cuda`) adds to the
 * driver (capture.c): the backend and its kernel table, the weights on the
 * device in the chosen type, the memory budget checked before any work, the
 * recording path through pinned buffers and a writer thread
 * (record_device.h), and the column sums brought back at the end. The walk
 * itself is the CPU's (forward.c) on the CUDA table. */
#ifndef KV_CAPTURE_DEVICE_H
#define KV_CAPTURE_DEVICE_H

#include <stdbool.h>

#include "capture/capture.h"
#include "model/forward.h"
#include "capture/record_device.h"

typedef struct {
    bool open;
    kv_model dev_model;    /* weights in device memory (cfg shared with the host model) */
    record_device rd;
    bool recording;        /* rd started */
    bool colsum;           /* column sums accumulated on the device */
} capture_device;

/* Options a capture on the GPU does not take (exit 2), before any work. */
int capture_device_check_opts(const capture_opts *o, kv_err *err);

/* Checks the options and opens the device, before any work: no usable GPU
 * is one error line, code 1. */
int capture_device_open(capture_device *cd, const capture_opts *o, kv_err *err);

/* Checks the budget for T tokens, uploads the weights and starts the walk
 * fw on the CUDA kernels. */
int capture_device_start(capture_device *cd, const capture_opts *o, const kv_model *m, int64_t T, forward_state *fw,
                         kv_err *err);

/* Starts the recording path into rec (after recorder_init). */
int capture_device_record(capture_device *cd, recorder *rec, int64_t B, kv_err *err);

/* The hooks for forward_chunk; the tokens decided so far (generation). */
forward_observer capture_device_observer(capture_device *cd);
void capture_device_known(capture_device *cd, int64_t known);

/* Waits for the writer; the device's column sums into rec's (before recorder_finish). */
int capture_device_finish(capture_device *cd, recorder *rec, kv_err *err);

/* Peak of the backend's own device allocations, GiB. */
double capture_device_peak_gib(const capture_device *cd);

/* Stops the writer, frees the walk, the device weights and the backend. */
void capture_device_free(capture_device *cd, forward_state *fw);

#endif
