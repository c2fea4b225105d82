/* user_policies: the four options a user's own policies come in by (user_policies.h). */
#include "userpol/user_policies.h"

#include "python/pyplug.h"

int user_policies_alias(const char *verb, const char *arg, void *user, kv_err *err)
{
    (void)verb;
    return policy_alias_add(&((user_policies *)user)->aliases, arg, err);
}

int user_policies_plugin(const char *verb, const char *arg, void *user, kv_err *err)
{
    (void)verb;
    user_policies *u = user;
    int rc = pyplug_load(&u->plugins, &u->aliases, arg, err);   /* FILE.so or FILE.py */
    return rc ? rc : alloc_plugins_add(&u->alloc_plugins, &u->plugins, err);
}

int user_policies_define(const char *verb, const char *arg, void *user, kv_err *err)
{
    (void)verb;
    return expr_define(&((user_policies *)user)->defs, arg, err);
}

int user_policies_defines(const char *verb, const char *arg, void *user, kv_err *err)
{
    (void)verb;
    return expr_define_file(&((user_policies *)user)->defs, arg, err);
}

int user_policies_ready(user_policies *u, kv_err *err)
{
    return expr_defs_attach(&u->defs, &u->aliases, err);
}

void user_policies_close(user_policies *u)
{
    policy_plugins_close(&u->plugins);
}
