/* pyplug: `--plugin FILE.py`, policies written in Python with numpy
 * (docs/python-policies.md, pyplug.h). One embedded CPython, started on the
 * first file and never finalised (numpy cannot be imported twice into one
 * process); each file is a py_file holding its module, the helper module
 * (pyhelper.h) and one py_policy per declared policy, whose iface is what
 * plugin.c copies into its table. Every hook takes the GIL for its Python
 * calls; a stream's state is a py_stream (its params dict and the object the
 * policy's create returned, made at the stream's first step so that an error
 * there can name the step). */
#include <string.h>

#include "python/pyplug.h"

/* path names a Python file (ends in .py) */
static bool pyplug_file(const char *path)
{
    size_t n = strlen(path);
    return n > 3 && strcmp(path + n - 3, ".py") == 0;
}

#ifndef KV_HAVE_PYTHON

int pyplug_load(policy_plugins *t, policy_aliases *aliases, const char *path, kv_err *err)
{
    if (!pyplug_file(path)) return policy_plugin_load(t, aliases, path, err);
    return kv_fail(err, KV_EUSAGE, "%s: this kvtrace was built without Python policies (build it where "
                   "/usr/bin/python3-config and numpy are: Debian's libpython3-dev and python3-numpy)", path);
}

#else

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>

#include "python/pyhelper.h"

typedef struct py_file py_file;

typedef struct {
    policy_iface iface;   /* first: plugin.c's entry->orig is this address */
    char name[64], summary[160];
    char key[POLICY_MAX_PARAMS][32], def[POLICY_MAX_PARAMS][32], choices[POLICY_MAX_PARAMS][160],
        doc[POLICY_MAX_PARAMS][160];
    PyObject *score, *create, *observe;
    int scope_param, scope_choice;   /* layer scope: param -1 constant (choice 0/1), else when choice */
    int64_t query_window;
    py_file *file;
} py_policy;

struct py_file {
    char path[POLICY_PLUGIN_PATH_MAX];   /* as given, for messages */
    char full[POLICY_PLUGIN_PATH_MAX];   /* the file loaded (policy_plugin_path) */
    PyObject *module, *helper, *view, *describe, *what;
    int n;
    py_policy pol[POLICY_MAX_PLUGIN_POLICIES];
    const policy_iface *list[POLICY_MAX_PLUGIN_POLICIES + 1];
};

typedef struct {
    py_policy *pol;
    PyObject *params, *state;   /* state NULL: the policy's create not called yet */
} py_stream;

static py_policy *pol_of(const policy_config *cfg)
{
    return (py_policy *)(void *)((const policy_plugin_entry *)cfg->iface)->orig;
}

/* The pending Python exception in one line (the helper's describe: the traceback's last line and
 * where), cleared. */
static void exc_line(py_file *f, char *out, size_t cap)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (v && tb) PyException_SetTraceback(v, tb);
    /* without the helper (numpy missing): the exception's own text */
    PyObject *s = !v ? NULL : f->describe ? PyObject_CallOneArg(f->describe, v) : PyObject_Repr(v);
    const char *c = s ? PyUnicode_AsUTF8(s) : NULL;
    snprintf(out, cap, "%s", c ? c : "an exception kvtrace cannot describe");
    Py_XDECREF(s);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    PyErr_Clear();
}

/* A failure at a step: the policy, layer, kv head, step and what went wrong; exit 3 (the file is
 * at fault, as a corrupt input is). */
static int step_fail(const py_policy *p, const policy_view *v, kv_err *err, const char *hook, const char *why)
{
    return kv_fail(err, KV_EINPUT, "%s: policy %s (layer %lld, kv head %lld, step %lld): %s: %s", p->file->path,
                   p->name, (long long)v->layer, (long long)v->kv_head, (long long)v->step, hook, why);
}

static int step_exc(const py_policy *p, const policy_view *v, kv_err *err, const char *hook)
{
    char why[512];
    exc_line(p->file, why, sizeof why);
    return step_fail(p, v, err, hook, why);
}

/* A read-only memoryview of bytes at p, or None for NULL (a new reference; NULL on error). */
static PyObject *mem(const void *p, int64_t count, size_t elem)
{
    if (!p) Py_RETURN_NONE;
    return PyMemoryView_FromMemory((char *)(uintptr_t)p, (Py_ssize_t)count * (Py_ssize_t)elem, PyBUF_READ);
}

/* The step as a View of zero-copy read-only numpy arrays and scalars (pyhelper.h). */
static PyObject *make_view(const py_file *f, const policy_view *v)
{
    const int64_t rows = v->q_heads * v->T;
    return PyObject_CallFunction(f->view, "NNNLLLLLLLNLNNLLLLNNLLLd", mem(v->keys, v->n * v->D, sizeof(float)),
                                 mem(v->values, v->n * v->D, sizeof(float)), mem(v->pos, v->n, sizeof(int64_t)),
                                 (long long)v->n, (long long)v->D, (long long)v->budget, (long long)v->now,
                                 (long long)v->layer, (long long)v->kv_head, (long long)v->step,
                                 mem(v->attn, v->n_queries * v->n, sizeof(float)), (long long)v->n_queries,
                                 mem(v->queries, rows * v->D, sizeof(float)), mem(v->lse, rows, sizeof(double)),
                                 (long long)v->q_heads, (long long)v->T, (long long)v->q0,
                                 (long long)v->prompt_len, mem(v->kvzip, rows, sizeof(float)),
                                 mem(v->wo, v->wo_dim * v->wo_ld, sizeof(float)), (long long)v->wo_dim,
                                 (long long)v->wo_ld, (long long)v->q_head0, v->rope.theta);
}

/* score's return value into scores[n]: a 1-D float64 or float32 array (any strides) of n. */
static int take_scores(const py_policy *p, const policy_view *v, PyObject *r, double *scores, kv_err *err)
{
    Py_buffer b;
    int ok = PyObject_GetBuffer(r, &b, PyBUF_RECORDS_RO) == 0;
    if (!ok) PyErr_Clear();
    const char *f = ok && b.format ? b.format : "";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    const int kind = strcmp(f, "d") == 0 ? 2 : strcmp(f, "f") == 0 ? 1 : 0;
    if (!ok || kind == 0 || b.ndim != 1 || b.shape[0] != v->n) {
        if (ok) PyBuffer_Release(&b);
        PyObject *s = PyObject_CallOneArg(p->file->what, r);
        const char *c = s ? PyUnicode_AsUTF8(s) : NULL;
        char why[320];
        snprintf(why, sizeof why, "returned %s; it must be a float64 (or float32) numpy array of shape (%lld,), one "
                 "score per candidate", c ? c : "something else", (long long)v->n);
        Py_XDECREF(s);
        PyErr_Clear();
        return step_fail(p, v, err, "score", why);
    }
    const char *base = b.buf;
    for (int64_t j = 0; j < v->n; j++) {
        const char *x = base + j * b.strides[0];
        if (kind == 2) memcpy(&scores[j], x, sizeof(double));
        else {
            float s;
            memcpy(&s, x, sizeof s);
            scores[j] = (double)s;
        }
    }
    PyBuffer_Release(&b);
    return KV_OK;
}

/* The stream's state at its first step: the policy's create(params), or None. */
static int ensure_state(py_stream *s, const policy_view *v, kv_err *err)
{
    if (s->state) return KV_OK;
    s->state = s->pol->create ? PyObject_CallOneArg(s->pol->create, s->params) : Py_NewRef(Py_None);
    return s->state ? KV_OK : step_exc(s->pol, v, err, "create");
}

/* score and observe: view, call, and (score) the scores checked and copied. */
static int call_hook(py_stream *s, const policy_view *v, double *scores, kv_err *err)
{
    py_policy *p = s->pol;
    const char *hook = scores ? "score" : "observe";
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = ensure_state(s, v, err);
    PyObject *view = rc ? NULL : make_view(p->file, v);
    if (!rc && !view) rc = step_exc(p, v, err, "the view");
    PyObject *r = view ? PyObject_CallFunctionObjArgs(scores ? p->score : p->observe, view, s->params, s->state, NULL)
                       : NULL;
    if (view && !r) rc = step_exc(p, v, err, hook);
    if (r && scores) rc = take_scores(p, v, r, scores, err);
    Py_XDECREF(r);
    Py_XDECREF(view);
    PyGILState_Release(g);
    return rc;
}

static int py_score(const policy_config *cfg, void *state, const policy_view *v, double *scores, kv_err *err)
{
    (void)cfg;
    return call_hook(state, v, scores, err);
}

static int py_observe(const policy_config *cfg, void *state, const policy_view *v, kv_err *err)
{
    (void)cfg;
    return call_hook(state, v, NULL, err);
}

/* The configuration as the dict score gets: numbers (int for integer parameters), choices as text. */
static PyObject *params_dict(const py_policy *p, const policy_config *cfg)
{
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < cfg->n; i++) {
        const policy_param *q = &p->iface.params[i];
        PyObject *x;
        if (q->kind == PARAM_NUMBER) {
            x = q->integer ? PyLong_FromDouble(cfg->num[i]) : PyFloat_FromDouble(cfg->num[i]);
        } else {
            const char *c = q->choices;
            for (int k = 0; k < cfg->choice[i]; k++) c = strchr(c, '|') + 1;
            x = PyUnicode_FromStringAndSize(c, (Py_ssize_t)strcspn(c, "|"));
        }
        if (!x || PyDict_SetItemString(d, q->key, x) < 0) Py_CLEAR(d);
        Py_XDECREF(x);
    }
    return d;
}

static int py_create(const policy_config *cfg, void **state, kv_err *err)
{
    py_policy *p = pol_of(cfg);
    py_stream *s = kv_calloc(1, sizeof *s, "a Python policy's stream", err);
    if (!s) return err->code;
    s->pol = p;
    PyGILState_STATE g = PyGILState_Ensure();
    s->params = params_dict(p, cfg);
    if (!s->params) PyErr_Clear();
    PyGILState_Release(g);
    if (!s->params) {
        free(s);
        return kv_fail(err, KV_EFAIL, "%s: policy %s: out of memory for its parameters", p->file->path, p->name);
    }
    *state = s;
    return KV_OK;
}

static void py_destroy(void *state)
{
    py_stream *s = state;
    if (!s) return;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF(s->params);
    Py_XDECREF(s->state);
    PyGILState_Release(g);
    free(s);
}

static bool py_layer_scope(const policy_config *cfg)
{
    const py_policy *p = pol_of(cfg);
    return p->scope_param < 0 ? p->scope_choice != 0 : cfg->choice[p->scope_param] == p->scope_choice;
}

static int64_t py_query_window(const policy_config *cfg)
{
    return pol_of(cfg)->query_window;
}

/* ---- loading ---- */

/* The interpreter, once per process: Debian's (KV_PYTHON_EXE, home KV_PYTHON_HOME, pinned at build
 * time so that another python3 on PATH or PYTHONHOME cannot swap in a stdlib without numpy), no
 * signal handlers of its own (kvtrace's remove partial outputs), the GIL released for the hooks. */
static int py_start(const char *path, kv_err *err)
{
    if (Py_IsInitialized()) return KV_OK;
#ifdef __SANITIZE_ADDRESS__
    /* under ASan, Python's objects come from malloc: checked, and followed by LeakSanitizer */
    PyPreConfig pre;
    PyPreConfig_InitPythonConfig(&pre);
    pre.allocator = PYMEM_ALLOCATOR_MALLOC;
    PyStatus pst = Py_PreInitialize(&pre);
    if (PyStatus_Exception(pst))
        return kv_fail(err, KV_EFAIL, "%s: cannot start Python: %s", path, pst.err_msg ? pst.err_msg : "failed");
#endif
    PyConfig c;
    PyConfig_InitPythonConfig(&c);
    c.install_signal_handlers = 0;
    c.parse_argv = 0;
    PyStatus st = PyConfig_SetBytesString(&c, &c.program_name, KV_PYTHON_EXE);
    if (!PyStatus_Exception(st)) st = PyConfig_SetBytesString(&c, &c.home, KV_PYTHON_HOME);
    if (!PyStatus_Exception(st)) st = Py_InitializeFromConfig(&c);
    PyConfig_Clear(&c);
    if (PyStatus_Exception(st))
        return kv_fail(err, KV_EFAIL, "%s: cannot start Python (%s, home %s): %s", path, KV_PYTHON_EXE,
                       KV_PYTHON_HOME, st.err_msg ? st.err_msg : "failed");
    (void)PyEval_SaveThread();
    return KV_OK;
}

/* One declared policy (pyhelper.h policy(): checked there) into p and its iface. */
static int fill_policy(py_file *f, py_policy *p, PyObject *t, kv_err *err)
{
    const char *name, *summary;
    PyObject *params, *score, *create, *observe;
    int attn, comparable, offline, kvzip;
    long long qw;
    if (!PyArg_ParseTuple(t, "ssO!OOOppL(ii)pp", &name, &summary, &PyList_Type, &params, &score, &create, &observe,
                          &attn, &comparable, &qw, &p->scope_param, &p->scope_choice, &offline, &kvzip))
        return KV_EFAIL;
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->summary, sizeof p->summary, "%s", summary);
    policy_iface *pi = &p->iface;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(params) && i < POLICY_MAX_PARAMS; i++) {
        const char *key, *def, *choices, *doc;
        int kind, integer;
        double lo, hi;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(params, i), "sissddsp", &key, &kind, &def, &choices, &lo, &hi, &doc,
                              &integer))
            return KV_EFAIL;
        snprintf(p->key[i], sizeof p->key[i], "%s", key);
        snprintf(p->def[i], sizeof p->def[i], "%s", def);
        snprintf(p->choices[i], sizeof p->choices[i], "%s", choices);
        snprintf(p->doc[i], sizeof p->doc[i], "%s", doc);
        pi->params[i] = (policy_param){.key = p->key[i], .kind = kind ? PARAM_CHOICE : PARAM_NUMBER, .def = p->def[i],
                                       .choices = kind ? p->choices[i] : NULL, .min = lo, .max = hi,
                                       .doc = p->doc[i], .integer = integer};
    }
    p->score = Py_NewRef(score);
    p->create = create == Py_None ? NULL : Py_NewRef(create);
    p->observe = observe == Py_None ? NULL : Py_NewRef(observe);
    p->query_window = qw;
    p->file = f;
    pi->name = p->name;
    pi->summary = p->summary;
    pi->needs_attention = attn;
    pi->scores_comparable = comparable;
    pi->offline_only = offline;
    pi->needs_kvzip = kvzip;
    pi->create = py_create;
    pi->destroy = py_destroy;
    pi->score = py_score;
    pi->observe = p->observe ? py_observe : NULL;
    pi->layer_scope = py_layer_scope;
    pi->query_window = qw ? py_query_window : NULL;
    (void)err;
    return KV_OK;
}

static void py_close(void *handle);

/* The helper module, then the file through its declare(); holds the GIL. */
static int load_file(py_file *f, kv_err *err)
{
    PyObject *code = Py_CompileString(py_helper_src, "<kvtrace>", Py_file_input);
    f->helper = code ? PyImport_ExecCodeModule("_kvtrace_py", code) : NULL;
    Py_XDECREF(code);
    if (f->helper) {
        f->view = PyObject_GetAttrString(f->helper, "view");
        f->describe = PyObject_GetAttrString(f->helper, "describe");
        f->what = PyObject_GetAttrString(f->helper, "what");
    }
    char why[512];
    if (!f->view || !f->describe || !f->what) {
        exc_line(f, why, sizeof why);
        return kv_fail(err, KV_EFAIL, "%s: cannot set up Python policies in %s: %s (numpy is needed: Debian's "
                       "python3-numpy)", f->path, KV_PYTHON_EXE, why);
    }
    const char *base = strrchr(f->path, '/') ? strrchr(f->path, '/') + 1 : f->path;
    char mod[300];
    snprintf(mod, sizeof mod, "kvtrace_policy_%.*s", (int)(strlen(base) - 3), base);
    PyObject *r = PyObject_CallMethod(f->helper, "declare", "ss", f->full, mod);
    PyObject *list = NULL;
    if (r && PyArg_ParseTuple(r, "OO!", &f->module, &PyList_Type, &list)) Py_INCREF(f->module);
    int rc = list ? KV_OK : KV_EUSAGE;
    for (Py_ssize_t i = 0; !rc && i < PyList_GET_SIZE(list) && i < POLICY_MAX_PLUGIN_POLICIES; i++) {
        rc = fill_policy(f, &f->pol[i], PyList_GET_ITEM(list, i), err);
        f->list[f->n++] = &f->pol[i].iface;
    }
    Py_XDECREF(r);
    if (rc) {
        exc_line(f, why, sizeof why);
        return kv_fail(err, KV_EUSAGE, "%s: %s", f->path, why);
    }
    f->list[f->n] = NULL;
    return KV_OK;
}

int pyplug_load(policy_plugins *t, policy_aliases *aliases, const char *path, kv_err *err)
{
    if (!pyplug_file(path)) return policy_plugin_load(t, aliases, path, err);
    char full[POLICY_PLUGIN_PATH_MAX];
    int rc = policy_plugin_path(path, full, err);
    if (!rc) rc = py_start(path, err);
    if (rc) return rc;
    py_file *f = kv_calloc(1, sizeof *f, "a Python plug-in", err);
    if (!f) return err->code;
    snprintf(f->path, sizeof f->path, "%s", path);
    snprintf(f->full, sizeof f->full, "%s", full);
    PyGILState_STATE g = PyGILState_Ensure();
    rc = load_file(f, err);
    PyGILState_Release(g);
    if (rc) {
        py_close(f);
        return rc;
    }
    return policy_plugin_add(t, aliases, path, f, py_close, f->list, sizeof(policy_iface), err);
}

/* What the file holds; the interpreter stays (numpy cannot be imported twice into a process). */
static void py_close(void *handle)
{
    py_file *f = handle;
    if (!f) return;
    PyGILState_STATE g = PyGILState_Ensure();
    for (int i = 0; i < f->n; i++) {
        Py_XDECREF(f->pol[i].score);
        Py_XDECREF(f->pol[i].create);
        Py_XDECREF(f->pol[i].observe);
    }
    Py_XDECREF(f->module);
    Py_XDECREF(f->view);
    Py_XDECREF(f->describe);
    Py_XDECREF(f->what);
    Py_XDECREF(f->helper);
    PyGILState_Release(g);
    free(f);
}

#endif
