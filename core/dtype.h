/* dtype: the element type a trace stores its keys, values and queries in
 * (the trace format is trace/'s; the command line parses the type here). */
#ifndef KV_DTYPE_H
#define KV_DTYPE_H

typedef enum { TRACE_F32 = 0, TRACE_F16 = 1 } trace_dtype;

/* "f32" or "f16". */
static inline const char *trace_dtype_name(trace_dtype t)
{
    return t == TRACE_F16 ? "f16" : "f32";
}

#endif
