/* kvtrace/error.h: the error record every kvtrace call and plug-in hook fills
 * (public, installed: part of kvtrace/policy.h's ABI).
 *
 * A hook that fails sets `code` to one of kv_status and writes one line,
 * without a trailing newline, into `msg`; kvtrace prints it as
 * "kvtrace: error: <msg>" and exits with `code`. */
#ifndef KVTRACE_ERROR_H
#define KVTRACE_ERROR_H

enum kv_status {
    KV_OK = 0,
    KV_EFAIL = 1,   /* any other failure (I/O, memory, internal) */
    KV_EUSAGE = 2,  /* bad command line */
    KV_EINPUT = 3,  /* invalid or corrupt input file */
};

typedef struct kv_err {
    int code;        /* enum kv_status */
    char msg[1024];  /* one line, no trailing newline */
} kv_err;

#endif
