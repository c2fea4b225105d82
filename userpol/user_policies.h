/* user_policies: the policies and allocators a user brings to one command, without touching
 * kvtrace: --alias NAME=POLICY:k=v, --plugin FILE.so|FILE.py (policies and allocators),
 * --define 'NAME = EXPR' and --defines FILE. sim, capture --evict, fidelity and features take
 * the same four options; each verb keeps one user_policies in its options struct and puts
 * USER_POLICY_OPTIONS in its option table, so the rules (order, clashes, what a plug-in may
 * declare) are the same everywhere. Nothing here is process-wide: the command owns the table. */
#ifndef KV_USER_POLICIES_H
#define KV_USER_POLICIES_H

#include <stddef.h>

#include "allocators/alloc_plugin.h"
#include "core/cli_opts.h"
#include "expr/expr.h"
#include "policies/policy.h"

typedef struct {
    policy_aliases aliases;       /* --alias in the order given; the plug-ins' and expressions' policies hang off it */
    policy_plugins plugins;       /* --plugin: open until user_policies_close */
    alloc_plugins alloc_plugins;  /* --plugin's allocators */
    expr_defs defs;               /* --define, --defines (the configurations point into it) */
} user_policies;

/* The four options' parsers; arg points at the verb's user_policies (a CLI_CUSTOM_AT row). */
int user_policies_alias(const char *verb, const char *arg, void *user, kv_err *err);
int user_policies_plugin(const char *verb, const char *arg, void *user, kv_err *err);
int user_policies_define(const char *verb, const char *arg, void *user, kv_err *err);
int user_policies_defines(const char *verb, const char *arg, void *user, kv_err *err);

/* The four rows of a verb's option table, for the user_policies FIELD of struct TYPE. */
#define USER_POLICY_OPTIONS(TYPE, FIELD)                                                                  \
    {.name = "alias", .kind = CLI_CUSTOM_AT, .many = CLI_EACH, .at = offsetof(TYPE, FIELD), .parse = user_policies_alias},  \
    {.name = "plugin", .kind = CLI_CUSTOM_AT, .many = CLI_EACH, .at = offsetof(TYPE, FIELD), .parse = user_policies_plugin}, \
    {.name = "define", .kind = CLI_CUSTOM_AT, .many = CLI_EACH, .at = offsetof(TYPE, FIELD), .parse = user_policies_define}, \
    {.name = "defines", .kind = CLI_CUSTOM_AT, .many = CLI_EACH, .at = offsetof(TYPE, FIELD), .parse = user_policies_defines}

/* After every option: the expressions become policies by name (a name an alias or a plug-in's
 * policy also has is refused, whichever came first). */
int user_policies_ready(user_policies *u, kv_err *err);

/* Closes the plug-ins (after the run: configurations point into them). */
void user_policies_close(user_policies *u);

#endif
