/* load: model_load and the table of formats it walks (model/formats/format.h).
 *
 * Rows are probed in order and the first that claims the spec loads it:
 * `random:` by its prefix, a directory as a Hugging Face checkpoint, a GGUF
 * by its magic or name, and any other file as a llama2.c checkpoint (the
 * last row claims everything that reaches it). What the probes look at is
 * gathered as the rows ask for it, so a spec that names no file fails only
 * when a row needs the file. */
#include "core/fileopen.h"
#include "model/model.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "model/formats/format.h"
#include "model/weights.h"

static const struct {
    const char *name;
    model_source_level needs;  /* what the probe looks at */
    bool (*probe)(const model_source *s);
    int (*load)(const model_source *s, kv_model *m, kv_err *err);
    /* NULL: the format takes --tokenizer; else why not (after "SPEC: ") */
    const char *refuse_tokenizer;
} FORMATS[] = {
    {"random", SOURCE_SPEC, model_probe_random, model_load_random, NULL}, /* a llama2.c tokenizer of V tokens */
    {"hf", SOURCE_STAT, model_probe_hf, model_load_hf,
     "--tokenizer is for llama2.c checkpoints; a Hugging Face directory's vocabulary is its "
     "tokenizer.json"},
    {"gguf", SOURCE_HEAD, model_probe_gguf, model_load_gguf,
     "--tokenizer is for llama2.c checkpoints; a GGUF holds its own vocabulary"},
    {"llama2c", SOURCE_HEAD, model_probe_llama2c, model_load_llama2c, NULL},
};

/* s up to `level`: stat() of the path, then its first bytes. */
static int gather(model_source *s, model_source_level level, kv_err *err)
{
    if (s->level < SOURCE_STAT && level >= SOURCE_STAT) {
        if (stat(s->spec, &s->st) != 0)
            return kv_fail(err, KV_EFAIL, "%s: cannot open model: %s", s->spec, strerror(errno));
        s->level = SOURCE_STAT;
    }
    if (s->level < SOURCE_HEAD && level >= SOURCE_HEAD) {
        if (S_ISREG(s->st.st_mode) && s->st.st_size == 0)
            return kv_fail(err, KV_EINPUT, "%s: empty file", s->spec);
        FILE *f = kv_input_fopen(s->spec, err);
        if (!f) return err->code;
        s->n_head = fread(s->head, 1, sizeof s->head, f);
        fclose(f);
        s->level = SOURCE_HEAD;
    }
    return KV_OK;
}

static int load_spec(const char *spec, const char *tokenizer, kv_model *m, kv_err *err)
{
    model_source s = {.spec = spec, .level = SOURCE_SPEC};
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++) {
        int rc = gather(&s, FORMATS[i].needs, err);
        if (rc) return rc;
        if (!FORMATS[i].probe(&s)) continue;
        if (tokenizer && FORMATS[i].refuse_tokenizer)
            return kv_fail(err, KV_EUSAGE, "%s: %s", spec, FORMATS[i].refuse_tokenizer);
        s.tokenizer = tokenizer;
        return FORMATS[i].load(&s, m, err);
    }
    return kv_fail(err, KV_EINPUT, "%s: no model format claims it", spec);
}

int model_load(const char *spec, const char *tokenizer, kv_model *m, kv_err *err)
{
    return model_load_as(spec, tokenizer, MODEL_W_F32, m, err);
}

/* A reader that knows 16-bit types (random, hf, gguf) honours m->wtype_want
 * itself; what any reader left as float32 is rounded here when asked. */
int model_load_as(const char *spec, const char *tokenizer, model_wtype want, kv_model *m, kv_err *err)
{
    model_init(m);
    m->wtype_want = want;
    int rc = spec && spec[0] ? load_spec(spec, tokenizer, m, err)
                             : kv_fail(err, KV_EUSAGE, "no model given");
    if (!rc) rc = model_config_check(&m->cfg, spec, err);
    if (!rc && m->wtype == MODEL_W_F32 && weights_size(want) == 2) rc = weights_narrow_model(m, want, err);
    if (rc) model_free(m);
    return rc;
}
