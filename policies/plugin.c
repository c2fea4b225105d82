/* plugin: `--plugin FILE.so`, policies from a shared object built against
 * include/kvtrace/policy.h (docs/plugins.md); its allocators are checked
 * here for their struct sizes and added by allocators/alloc_plugin.c (a layer
 * above). The checks at load time are the ABI's (number and struct sizes), the two symbols', and each policy's
 * (a name that is new, a score, parameters whose defaults parse); at run
 * time only the scores' (a NaN stops the run: a plug-in's bug would
 * otherwise pass as a ranking). A crashing plug-in crashes kvtrace. */
#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "policies/plugin.h"

#include "kvtrace/allocator.h"

/* The plug-in's score, then the check that no score is NaN (policy_select would read it as
 * -inf and the result would silently be the plug-in's bug). */
static int checked_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    const policy_plugin_entry *e = (const policy_plugin_entry *)cfg->iface;
    int rc = e->score(cfg, state, v, scores, err);
    if (rc) return kv_fail_hook(err, rc, e->who, "score");
    for (int64_t j = 0; j < v->n; j++)
        if (isnan(scores[j]))
            return kv_fail(err, KV_EINPUT, "%s: policy %s gave a NaN score (layer %lld, kv head %lld, step %lld, "
                           "candidate at position %lld): scores must be numbers or +-inf", e->file, e->iface.name,
                           (long long)v->layer, (long long)v->kv_head, (long long)v->step, (long long)v->pos[j]);
    return KV_OK;
}

static int checked_create(const policy_config *cfg, void **state, kv_err *err)
{
    const policy_plugin_entry *e = (const policy_plugin_entry *)cfg->iface;
    int rc = e->create(cfg, state, err);
    return rc ? kv_fail_hook(err, rc, e->who, "create") : KV_OK;
}

static int checked_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    const policy_plugin_entry *e = (const policy_plugin_entry *)cfg->iface;
    int rc = e->observe(cfg, state, v, err);
    return rc ? kv_fail_hook(err, rc, e->who, "observe") : KV_OK;
}

static int checked_share_create(const policy_config *cfg, void **share, kv_err *err)
{
    const policy_plugin_entry *e = (const policy_plugin_entry *)cfg->iface;
    int rc = e->share_create(cfg, share, err);
    return rc ? kv_fail_hook(err, rc, e->who, "share_create") : KV_OK;
}

/* The name is new: not a built-in's, an alias's, or a plug-in's loaded before. */
static int check_name(const policy_plugins *t, const policy_aliases *a, const char *path, const char *name,
                      kv_err *err)
{
    size_t len = strlen(name);
    if (len == 0 || len >= 64 || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != len)
        return kv_fail(err, KV_EUSAGE, "%s: policy name '%s' is not 1-63 of letters, digits and _ . -", path, name);
    if (policy_find(name))
        return kv_fail(err, KV_EUSAGE, "%s: policy %s clashes with the built-in %s", path, name, name);
    for (int i = 0; a && i < a->n; i++)
        if (strcmp(a->name[i], name) == 0)
            return kv_fail(err, KV_EUSAGE, "%s: policy %s clashes with the alias %s", path, name, name);
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->entry[i].iface.name, name) == 0)
            return kv_fail(err, KV_EUSAGE, "%s: policy %s clashes with the policy of that name from %s", path, name,
                           t->entry[i].file);
    return KV_OK;
}

/* Whether s names a parameter or a preset: 1-63 of a-z, 0-9 and _. */
static bool key_name_ok(const char *s)
{
    const size_t len = strlen(s);
    return len && len < 64 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_") == len;
}

/* The parser's error in *err restated as a usage error after `prefix` (the file and what was parsed). */
static int restate(kv_err *err, const char *prefix)
{
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    err->code = KV_OK;   /* replaced by the same line, the file named */
    return kv_fail(err, KV_EUSAGE, "%s: %s", prefix, why);
}

/* A parameter table the parser can read (docs/plugins.md): keys of [a-z0-9_], sorted and each once; a
 * default; a choice's choices non-empty, each of [A-Za-z0-9_.-]; a number's range finite and
 * ordered. */
static int check_params(const char *path, const char *what, const char *name, const policy_param *params,
                        kv_err *err)
{
    for (int i = 0; i < POLICY_MAX_PARAMS && params[i].key; i++) {
        const policy_param *p = &params[i];
        const char *bad = !key_name_ok(p->key) ? "is not 1-63 of a-z, 0-9 and _"
                          : i > 0 && strcmp(params[i - 1].key, p->key) >= 0 ? "is not after the previous key (the "
                                                                             "keys are sorted, each once)"
                          : !p->def ? "has no default"
                          : p->kind == PARAM_CHOICE && (!p->choices || !p->choices[0]) ? "has no choices"
                          : p->kind == PARAM_CHOICE && (strspn(p->choices, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU"
                                                               "VWXYZ0123456789_.-|") != strlen(p->choices) ||
                                                        strstr(p->choices, "||") || p->choices[0] == '|' ||
                                                        p->choices[strlen(p->choices) - 1] == '|')
                              ? "has choices that are not names separated by |"
                          : p->kind == PARAM_NUMBER && !(p->min <= p->max) /* false for a NaN */
                              ? "has a range that is not two numbers, the first not above the second"
                          : p->kind != PARAM_NUMBER && p->kind != PARAM_CHOICE ? "is of an unknown kind"
                                                                               : NULL;
        if (bad) return kv_fail(err, KV_EUSAGE, "%s: %s %s: parameter '%.63s' %s", path, what, name, p->key, bad);
    }
    return KV_OK;
}

int policy_plugin_defaults(const char *path, const char *what, const char *name, const policy_param *params,
                           kv_err *err)
{
    int rc0 = check_params(path, what, name, params, err);
    if (rc0) return rc0;
    double num[POLICY_MAX_PARAMS];
    int choice[POLICY_MAX_PARAMS];
    char canonical[256];
    if (!policy_params_parse(name, params, name, "", num, choice, canonical, sizeof canonical, err)) return KV_OK;
    char prefix[sizeof err->msg];
    snprintf(prefix, sizeof prefix, "%s: the defaults of %s %s", path, what, name);
    return restate(err, prefix);
}

/* A policy's presets: each named as a key is, once, with a doc, and its values ones its own
 * parameters take (so that name:preset=NAME can never fail or crash later). */
static int check_presets(const char *path, const policy_iface *pi, kv_err *err)
{
    for (int i = 0; i < POLICY_MAX_PRESETS && pi->presets[i].name; i++) {
        const policy_preset *q = &pi->presets[i];
        bool twice = false;
        for (int j = 0; j < i; j++) twice = twice || strcmp(pi->presets[j].name, q->name) == 0;
        const char *bad = !key_name_ok(q->name) ? "is not 1-63 of a-z, 0-9 and _"
                          : twice ? "is there twice" : !q->params ? "has no values" : !q->doc ? "has no doc" : NULL;
        if (bad) return kv_fail(err, KV_EUSAGE, "%s: policy %s: preset '%.63s' %s", path, pi->name, q->name, bad);
        double num[POLICY_MAX_PARAMS];
        int choice[POLICY_MAX_PARAMS];
        char canonical[256], spec[600];
        const int at = snprintf(spec, sizeof spec, "%.63s", pi->name);
        snprintf(spec + at, sizeof spec - (size_t)at, ":%.500s", q->params);
        if (policy_params_parse(pi->name, pi->params, spec, spec + at, num, choice, canonical, sizeof canonical,
                                err)) {
            char prefix[sizeof err->msg];
            snprintf(prefix, sizeof prefix, "%s: policy %s: preset '%s'", path, pi->name, q->name);
            return restate(err, prefix);
        }
    }
    return KV_OK;
}

/* One policy of the plug-in into the next entry: its iface read up to size bytes. */
static int add_policy(policy_plugins *t, const policy_aliases *a, const char *path, const policy_iface *pi,
                      uint32_t size, kv_err *err)
{
    if (t->n >= POLICY_MAX_PLUGIN_POLICIES)
        return kv_fail(err, KV_EUSAGE, "%s: more than %d plug-in policies in all", path, POLICY_MAX_PLUGIN_POLICIES);
    policy_plugin_entry *e = &t->entry[t->n];
    memset(e, 0, sizeof *e);
    memcpy(&e->iface, pi, size);
    e->orig = pi;
    snprintf(e->file, sizeof e->file, "%s", path);
    if (!e->iface.name) return kv_fail(err, KV_EUSAGE, "%s: a policy without a name", path);
    int rc = check_name(t, a, path, e->iface.name, err);
    if (rc) return rc;
    if (!e->iface.score) return kv_fail(err, KV_EUSAGE, "%s: policy %s has no score", path, e->iface.name);
    if (!e->iface.share_create != !e->iface.share_destroy)
        return kv_fail(err, KV_EUSAGE, "%s: policy %s has %s without %s (a share needs both)", path, e->iface.name,
                       e->iface.share_create ? "share_create" : "share_destroy",
                       e->iface.share_create ? "share_destroy" : "share_create");
    if ((rc = policy_plugin_defaults(path, "policy", e->iface.name, e->iface.params, err))) return rc;
    if ((rc = check_presets(path, &e->iface, err))) return rc;
    if (!e->iface.summary) e->iface.summary = "(a plug-in's policy)";
    snprintf(e->who, sizeof e->who, "%s: policy %s", path, e->iface.name);
    e->score = e->iface.score, e->create = e->iface.create, e->observe = e->iface.observe;
    e->share_create = e->iface.share_create;
    e->iface.score = checked_score;
    if (e->create) e->iface.create = checked_create;
    if (e->observe) e->iface.observe = checked_observe;
    if (e->share_create) e->iface.share_create = checked_share_create;
    t->list[t->n++] = &e->iface;
    t->list[t->n] = NULL;
    return KV_OK;
}

/* The plug-in's tables, checked against this kvtrace's ABI and sizes. */
static int plugin_tables(void *h, const char *path, const kvtrace_plugin **out, kv_err *err)
{
    const uint32_t *abi = dlsym(h, "kvtrace_plugin_abi");
    const kvtrace_plugin *(*tables)(const kvtrace_host *) = NULL;
    *(void **)&tables = dlsym(h, "kvtrace_plugin_tables");   /* POSIX: a function from a void * */
    const char *missing = !abi ? "kvtrace_plugin_abi" : !tables ? "kvtrace_plugin_tables" : NULL;
    if (missing)
        return kv_fail(err, KV_EUSAGE, "%s: not a kvtrace plug-in: no symbol %s (define the policies with "
                       "KVTRACE_PLUGIN, kvtrace/policy.h)", path, missing);
    if (*abi != KVTRACE_POLICY_ABI)
        return kv_fail(err, KV_EUSAGE, "%s: built for plug-in ABI %u, this kvtrace has ABI %u: rebuild it against "
                       "this kvtrace's kvtrace/policy.h", path, *abi, KVTRACE_POLICY_ABI);
    const kvtrace_host host = {KVTRACE_POLICY_ABI, sizeof(policy_config), sizeof(policy_view), sizeof(policy_iface),
                               sizeof(alloc_config), sizeof(alloc_scope), sizeof(alloc_buf), sizeof(alloc_iface)};
    const kvtrace_plugin *p = tables(&host);
    if (!p) return kv_fail(err, KV_EUSAGE, "%s: the plug-in refused this kvtrace (ABI %u)", path, KVTRACE_POLICY_ABI);
    const bool pols = p->policies && p->policies[0], allocs = p->allocators && p->allocators[0];
    if (p->abi != KVTRACE_POLICY_ABI || p->config_size > host.config_size || p->view_size > host.view_size ||
        p->iface_size > host.iface_size || (pols && p->iface_size < offsetof(policy_iface, score) + sizeof p->policies))
        return kv_fail(err, KV_EUSAGE, "%s: its tables are for ABI %u with struct sizes config %u, view %u, iface %u; "
                       "this kvtrace has ABI %u and %u, %u, %u: rebuild it against this kvtrace's kvtrace/policy.h",
                       path, p->abi, p->config_size, p->view_size, p->iface_size, host.abi, host.config_size,
                       host.view_size, host.iface_size);
    if (allocs && (p->alloc_config_size > host.alloc_config_size || p->alloc_scope_size > host.alloc_scope_size ||
                   p->alloc_buf_size > host.alloc_buf_size || p->alloc_iface_size > host.alloc_iface_size ||
                   p->alloc_iface_size < offsetof(alloc_iface, shares) + sizeof p->allocators))
        return kv_fail(err, KV_EUSAGE, "%s: its allocator struct sizes are config %u, scope %u, buf %u, iface %u; this "
                       "kvtrace has %u, %u, %u, %u: rebuild it against this kvtrace's kvtrace/allocator.h", path,
                       p->alloc_config_size, p->alloc_scope_size, p->alloc_buf_size, p->alloc_iface_size,
                       host.alloc_config_size, host.alloc_scope_size, host.alloc_buf_size, host.alloc_iface_size);
    if (!pols && !allocs) return kv_fail(err, KV_EUSAGE, "%s: the plug-in lists no policies and no allocators", path);
    *out = p;
    return KV_OK;
}

/* Whether the ELF file at `path` (size bytes) holds what its headers say: the program and section
 * header tables and every loaded segment within the file (a truncated object makes dlopen fault). */
static int elf_whole(const char *given, const char *path, int64_t size, kv_err *err)
{
    FILE *f = fopen(path, "rb");
    Elf64_Ehdr eh;
    bool ok = f && fread(&eh, sizeof eh, 1, f) == 1 && memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
              eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_phentsize == sizeof(Elf64_Phdr);
    uint64_t need = sizeof eh;
    if (ok) {
        const uint64_t ph = eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize;
        const uint64_t sh = eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize;
        need = ph > need ? ph : need;
        need = sh > need ? sh : need;
        for (int i = 0; ok && i < eh.e_phnum && need <= (uint64_t)size; i++) {
            Elf64_Phdr p;
            ok = fseek(f, (long)(eh.e_phoff + (uint64_t)i * sizeof p), SEEK_SET) == 0 && fread(&p, sizeof p, 1, f) == 1;
            if (ok && p.p_type == PT_LOAD && p.p_offset + p.p_filesz > need) need = p.p_offset + p.p_filesz;
        }
    }
    if (f) fclose(f);
    if (!ok) return kv_fail(err, KV_EUSAGE, "%s: not a 64-bit ELF shared object", given);
    if (need > (uint64_t)size)
        return kv_fail(err, KV_EUSAGE, "%s: a truncated shared object: %lld bytes, its headers need %llu", given,
                       (long long)size, (unsigned long long)need);
    return KV_OK;
}

int policy_plugin_path(const char *given, char *out, kv_err *err)
{
    const size_t len = strlen(given);
    if (len == 0 || len >= POLICY_PLUGIN_PATH_MAX)
        return kv_fail(err, KV_EUSAGE, "--plugin: a path of %zu bytes (at most %d): %.80s...", len,
                       POLICY_PLUGIN_PATH_MAX - 1, given);
    char full[PATH_MAX];
    struct stat st;
    if (!realpath(given, full) || stat(full, &st) != 0 || !S_ISREG(st.st_mode))
        return kv_fail(err, KV_EUSAGE, "%s: cannot load the plug-in: not a file that can be read", given);
    if (strlen(full) >= POLICY_PLUGIN_PATH_MAX)
        return kv_fail(err, KV_EUSAGE, "%s: its absolute path is longer than %d bytes", given,
                       POLICY_PLUGIN_PATH_MAX - 1);
    snprintf(out, POLICY_PLUGIN_PATH_MAX, "%s", full);
    const bool python = len > 3 && strcmp(given + len - 3, ".py") == 0;
    return python ? KV_OK : elf_whole(given, full, (int64_t)st.st_size, err);
}

static void so_close(void *h)
{
    dlclose(h);
}

int policy_plugin_add(policy_plugins *t, policy_aliases *aliases, const char *path, void *handle,
                      void (*close)(void *), const policy_iface *const *list, uint32_t size, kv_err *err)
{
    const int n0 = t->n;
    int rc = t->n_files >= POLICY_MAX_PLUGINS
                 ? kv_fail(err, KV_EUSAGE, "--plugin %s: more than %d plug-ins", path, POLICY_MAX_PLUGINS)
                 : KV_OK;
    for (int i = 0; !rc && list && list[i]; i++) rc = add_policy(t, aliases, path, list[i], size, err);
    if (rc) {   /* none of this file's policies stay */
        t->n = n0;
        t->list[n0] = NULL;
        close(handle);
        return rc;
    }
    t->close[t->n_files] = close;
    t->tables[t->n_files] = NULL;   /* a shared object's: set by policy_plugin_load */
    snprintf(t->path[t->n_files], sizeof t->path[0], "%s", path);
    t->handle[t->n_files++] = handle;
    if (aliases) aliases->user = t->list;
    return KV_OK;
}

int policy_plugin_load(policy_plugins *t, policy_aliases *aliases, const char *path, kv_err *err)
{
    if (t->n_files >= POLICY_MAX_PLUGINS)
        return kv_fail(err, KV_EUSAGE, "--plugin %s: more than %d plug-ins", path, POLICY_MAX_PLUGINS);
    char full[POLICY_PLUGIN_PATH_MAX];
    int rc0 = policy_plugin_path(path, full, err);
    if (rc0) return rc0;
    void *h = dlopen(full, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return kv_fail(err, KV_EUSAGE, "%s: cannot load the plug-in: %s", path, why ? why : "dlopen failed");
    }
    const kvtrace_plugin *p = NULL;
    int rc = plugin_tables(h, path, &p, err);
    if (rc) {
        dlclose(h);
        return rc;
    }
    rc = policy_plugin_add(t, aliases, path, h, so_close, p->policies, p->iface_size, err);
    if (!rc) t->tables[t->n_files - 1] = p;   /* its allocators: alloc_plugins_add (allocators/alloc_plugin.h) */
    return rc;
}

void policy_plugins_close(policy_plugins *t)
{
    for (int i = t->n_files; i-- > 0;) t->close[i](t->handle[i]);
    t->n_files = t->n = 0;
    t->list[0] = NULL;
}
