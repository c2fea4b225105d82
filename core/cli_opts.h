/* cli_opts: a verb's options as one static table instead of a getopt loop.
 *
 * Each row names an option, how its argument is read and where the value
 * goes: a field of the verb's own options struct, by offsetof, so the table
 * stays const and the parser holds no state between calls. Numbers are read
 * by cli_args' parsers (same ranges, same messages); a row of kind
 * CLI_CUSTOM hands the argument to the verb's own function (lists, policies,
 * "LAYER,HEAD", ...). -h/--help is always accepted; -o is the short form of
 * a row named "output". An unknown option or a missing argument is
 * cli_bad_option's usage error. An option given twice is a usage error
 * naming it, except a row marked CLI_JOIN (a list: its arguments are read
 * as one, comma-joined: `--policies a --policies b` is `--policies a,b`) or
 * CLI_EACH (read at every occurrence: `--define`, `--plugin`, `--alias`).
 *
 *   static const cli_opt OPTS[] = {
 *       {CLI_ROW("chunk", CLI_I64, sim_opts, chunk), .lo = 1, .hi = 1 << 30},
 *       {CLI_ROW("force", CLI_FLAG, sim_opts, force)},
 *       {0},
 *   };
 *   rc = cli_opts_parse("sim", argc, argv, OPTS, &o, &help, &first, &err);
 */
#ifndef KV_CLI_OPTS_H
#define KV_CLI_OPTS_H

#include <stdbool.h>
#include <stddef.h>

#include "kv_error.h"

typedef enum {
    CLI_FLAG,    /* bool: true when given (no argument) */
    CLI_TEXT,    /* const char *: the argument itself */
    CLI_I64,     /* int64_t in [lo, hi] */
    CLI_INT,     /* int in [lo, hi] */
    CLI_U64,     /* uint64_t */
    CLI_F64,     /* double in [lo, hi] */
    CLI_CHOICE,  /* int: index of the argument in `choices` ("colsum|full|none") */
    CLI_DTYPE,   /* trace_dtype: f32 | f16 */
    CLI_CUSTOM,  /* parse(verb, argument, opts, err) */
    CLI_CUSTOM_AT, /* parse(verb, argument, the field, err): a parser shared by verbs, given its own field */
} cli_kind;

/* How a row takes a second occurrence of its option. */
typedef enum {
    CLI_ONCE = 0, /* refused (exit 2) */
    CLI_JOIN,     /* a list: every occurrence's argument, comma-joined, read once after the others */
    CLI_EACH,     /* read at each occurrence */
} cli_many;

/* Where a table's CLI_JOIN rows write their comma-joined arguments: a field of the verb's options
 * struct (so the text lives as long as the options, and the parser keeps no state). */
enum { CLI_JOIN_SPACE = 16384 };
typedef struct {
    char text[CLI_JOIN_SPACE];
    size_t used;
} cli_join_space;

typedef struct {
    const char *name;   /* the long name without "--"; NULL ends the table */
    cli_kind kind;
    cli_many many;
    size_t join_at;     /* CLI_JOIN: offsetof the cli_join_space in the options struct */
    size_t at;          /* offsetof the field in the verb's options struct */
    double lo, hi;      /* CLI_I64, CLI_INT, CLI_F64: the accepted range */
    const char *choices;
    int (*parse)(const char *verb, const char *arg, void *opts, kv_err *err);
} cli_opt;

/* The first fields of a row: --NAME of KIND into field FIELD of struct TYPE. */
#define CLI_ROW(NAME, KIND, TYPE, FIELD) .name = (NAME), .kind = (KIND), .at = offsetof(TYPE, FIELD)

/* A list row's repeats joined into the cli_join_space SPACE of struct TYPE. */
#define CLI_JOINED(TYPE, SPACE) .many = CLI_JOIN, .join_at = offsetof(TYPE, SPACE)

enum { CLI_MAX_OPTS = 64 };

/* Reads argv[1..] (argv[0] is the verb) by `table` into `opts`; *help is
 * set by -h/--help, *first is the index of the first positional argument.
 * The first bad option is a KV_EUSAGE error; the fields of later options
 * are then untouched. */
int cli_opts_parse(const char *verb, int argc, char **argv, const cli_opt *table, void *opts, bool *help,
                   int *first, kv_err *err);

#endif
