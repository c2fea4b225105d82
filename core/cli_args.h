/* cli_args: the pieces every verb's command line uses: number parsing with
 * ranges, usage errors that point at --help, and the final error report. */
#ifndef KV_CLI_ARGS_H
#define KV_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "kv_error.h"
#include "dtype.h"

/* Parses a whole decimal integer in [lo, hi]: an optional '-' and digits,
 * nothing else (no sign '+', space, hex or exponent); KV_EUSAGE naming verb
 * and option otherwise. */
int cli_parse_i64(const char *verb, const char *opt, const char *s, int64_t lo, int64_t hi,
                  int64_t *out, kv_err *err);
enum { CLI_LIST_MAX = 256 };

/* A comma-separated list split strictly, the one way every list option is
 * read: item[0..n) point into buf. An empty list, an empty entry (",a",
 * "a,", "a,,b"), white space or a control character anywhere, or more than
 * max items (max <= CLI_LIST_MAX) is a usage error naming the option. */
typedef struct {
    char buf[4096];
    const char *item[CLI_LIST_MAX];
    int n;
} cli_list;
int cli_list_split(const char *verb, const char *opt, const char *list, int max, cli_list *out, kv_err *err);

/* The usage error for item j repeating item i (i < j) after
 * canonicalisation: "OPT names WHAT twice: 'SPELLING_I' and 'SPELLING_J'
 * are both CANONICAL". */
int cli_list_repeat(const char *verb, const char *opt, const cli_list *l, int i, int j, const char *what,
                    const char *canonical, kv_err *err);

/* A comma-separated list of distinct integers in [lo, hi] into out[0..max):
 * *n of them, split by cli_list_split, each item by cli_parse_i64; a
 * repeated value ("16,016") is a usage error naming both spellings. */
int cli_parse_i64_list(const char *verb, const char *opt, const char *list, int64_t lo, int64_t hi, int64_t *out,
                       int max, int *n, kv_err *err);
int cli_parse_u64(const char *verb, const char *opt, const char *s, uint64_t *out, kv_err *err);
/* A number (strtod syntax; NaN and infinities refused) in [lo, hi]. */
int cli_parse_double(const char *verb, const char *opt, const char *s, double lo, double hi, double *out,
                     kv_err *err);
/* "f32" or "f16" as a trace storage type. */
int cli_parse_dtype(const char *verb, const char *opt, const char *s, trace_dtype *out, kv_err *err);

/* Records a usage error "VERB: MESSAGE (see 'kvtrace VERB --help')". */
int cli_usage(kv_err *err, const char *verb, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Turns getopt_long's '?' or ':' (optstring starting with ':') into a usage
 * error; `arg` is argv[optind - 1]. */
int cli_bad_option(kv_err *err, const char *verb, int c, int optopt_value, const char *arg);

/* For verbs that read options with getopt_long itself: option c (a short code under 256, seen[256]
 * counting them) given a second time is a usage error naming its long name from `longs` (a struct
 * option array). */
/* The largest cache budget any verb takes (a budget at or over the trace's length keeps every row). */
#define CLI_BUDGET_MAX ((int64_t)1 << 30)

/* A list of cache budgets ("32,64", each once): integers in [1, CLI_BUDGET_MAX], or with fractions
 * (not NULL: sim, which knows each trace's length T) also "F%" with F in (0, 100], a fraction of T
 * (fractions[i] = F / 100, budgets[i] = 0; NAN for an integer). At most `max` items. The one
 * reader of --budgets (and, max 1, capture's --budget) in every verb. */
int cli_parse_budgets(const char *verb, const char *opt, const char *list, int max, int64_t *budgets,
                      double *fractions, int *n, kv_err *err);

/* The number grammar of the command line, policy and allocator parameters and expressions alike:
 * an optional '-', decimal digits with an optional fraction ("3", "0.25", ".5", "2."), an optional
 * exponent ("1e-5"); an integer is the optional '-' and digits alone. No hex, no '+', no inf or
 * nan, no white space. The length of the longest such prefix of s[0..n), 0 when there is none. */
size_t kv_number_len(const char *s, size_t n, bool integer);

int cli_once(unsigned char *seen, const void *longs, int c, const char *verb, kv_err *err);

/* Prints "kvtrace: error: MSG" for a failed err and returns its code (0 if none). */
int cli_report(const kv_err *err);
/* A verb's exit status after its work returned rc: 0 when rc is 0; else the message (err's, or one
 * saying rc when err holds none) and err's code when it is 1, 2 or 3, else 1: a failure never exits 0
 * and never with a status outside 0-3, whatever left err as it is. */
int cli_exit(int rc, const kv_err *err);
/* The same status without printing (an MPI rank other than 0, whose error rank 0 reports). */
int cli_status(int rc, const kv_err *err);

/* "kvtrace VERB ARGS..." as a shell would take it back (arguments with
 * spaces or shell characters single-quoted), for the outputs that record
 * the command that made them. argv[0] is the verb. Caller frees; NULL when
 * out of memory. */
char *cli_command_line(int argc, char **argv);

#endif
