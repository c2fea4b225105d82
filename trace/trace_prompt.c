/* /prompt_text: the prompt as text beside its ids in /tokens, and
 * /prompt_chat: the conversation a chat prompt's text renders (a JSON
 * object, docs/trace-format.md). Each one scalar variable-length UTF-8
 * string (what h5py writes for a Python str), so
 * `f["prompt_text"].asstr()[()]` gives it back; readers also accept a
 * fixed-length string, as for the text attributes. */
#include <stdlib.h>
#include <string.h>

#include "core/h5util.h"
#include "core/utf8.h"
#include "trace_schema.h"

const char TRACE_PROMPT_TEXT_DESCRIPTION[] =
    "the prompt's text, UTF-8, exactly as given (--prompt, or the whole --prompt-file); its token ids are "
    "/tokens[0:prompt_len]; generated tokens are not in it";

const char TRACE_PROMPT_CHAT_DESCRIPTION[] =
    "the conversation /prompt_text renders in the model's chat template, JSON: {family, template_sha256, messages: "
    "[{role, content}], and date or enable_thinking where the template reads them}";

static int text_check(const char *text, const char *path, const char *where, kv_err *err)
{
    int64_t bad = kv_utf8_invalid(text, strlen(text));
    if (bad >= 0)
        return kv_fail(err, KV_EINPUT, "%s: %s is not valid UTF-8 at byte offset %lld (byte 0x%02X)", where,
                       path, (long long)bad, (unsigned char)text[bad]);
    return KV_OK;
}

int64_t trace_text_type(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t >= 0 && (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)) {
        H5Tclose(t);
        t = -1;
    }
    return t;
}

static int text_write(int64_t file_id, const char *path, const char *description, const char *text, const char *where,
                      kv_err *err)
{
    int rc = text_check(text, path, where, err);
    if (rc) return rc;
    hid_t type = trace_text_type(), space = H5Screate(H5S_SCALAR), dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    bool ok = type >= 0 && space >= 0 && dcpl >= 0 && H5Pset_obj_track_times(dcpl, 0) >= 0;
    if (ok) d = H5Dcreate2((hid_t)file_id, path, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ok = ok && d >= 0 && H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &text) >= 0;
    if (!ok) rc = kv_fail(err, KV_EFAIL, "%s: cannot write %s", where, path);
    if (!rc) rc = h5u_write_attr_str(d, "description", description, err);
    if (d >= 0) H5Dclose(d);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    return rc;
}

int trace_prompt_text_write(int64_t file_id, const char *text, const char *where, kv_err *err)
{
    return text_write(file_id, TRACE_PROMPT_TEXT_PATH, TRACE_PROMPT_TEXT_DESCRIPTION, text, where, err);
}

int trace_prompt_chat_write(int64_t file_id, const char *record, const char *where, kv_err *err)
{
    return text_write(file_id, TRACE_PROMPT_CHAT_PATH, TRACE_PROMPT_CHAT_DESCRIPTION, record, where, err);
}

/* The string of the open scalar dataset d (file type ftype) into *text. */
static int read_string(hid_t d, hid_t ftype, const char *path, const char *where, char **text, kv_err *err)
{
    hid_t mtype = H5Tcopy(H5T_C_S1);
    bool ok = mtype >= 0 && H5Tset_cset(mtype, H5Tget_cset(ftype)) >= 0;
    if (ok && H5Tis_variable_str(ftype) > 0) {
        char *s = NULL;
        ok = H5Tset_size(mtype, H5T_VARIABLE) >= 0 && H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, &s) >= 0;
        if (ok) *text = strdup(s ? s : "");
        if (s) H5free_memory(s);
    } else if (ok) {
        size_t size = H5Tget_size(ftype);
        *text = size ? calloc(size + 1, 1) : NULL;
        ok = *text && H5Tset_size(mtype, size + 1) >= 0 &&
             H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, *text) >= 0;
    }
    if (mtype >= 0) H5Tclose(mtype);
    if (ok && *text) return KV_OK;
    free(*text);
    *text = NULL;
    return kv_fail(err, KV_EINPUT, "%s: cannot read %s", where, path);
}

static int text_read(int64_t file_id, const char *path, const char *where, char **text, kv_err *err)
{
    *text = NULL;
    const hid_t file = (hid_t)file_id;
    if (!h5u_exists(file, path)) return KV_OK;
    H5O_info_t info;
    if (H5Oget_info_by_name(file, path, &info, H5P_DEFAULT) < 0 || info.type != H5O_TYPE_DATASET)
        return kv_fail(err, KV_EINPUT, "%s: %s is not a dataset", where, path);
    hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
    hid_t ftype = d >= 0 ? H5Dget_type(d) : -1, space = d >= 0 ? H5Dget_space(d) : -1;
    int rc = KV_OK;
    if (d < 0 || ftype < 0 || space < 0)
        rc = kv_fail(err, KV_EINPUT, "%s: cannot open %s", where, path);
    else if (H5Tget_class(ftype) != H5T_STRING || H5Sget_simple_extent_type(space) != H5S_SCALAR)
        rc = kv_fail(err, KV_EINPUT, "%s: %s must be one (scalar) string", where, path);
    else
        rc = read_string(d, ftype, path, where, text, err);
    if (!rc) rc = text_check(*text, path, where, err);
    if (rc) free(*text), *text = NULL;
    if (space >= 0) H5Sclose(space);
    if (ftype >= 0) H5Tclose(ftype);
    if (d >= 0) H5Dclose(d);
    return rc;
}

int trace_prompt_text_read(int64_t file_id, const char *where, char **text, kv_err *err)
{
    return text_read(file_id, TRACE_PROMPT_TEXT_PATH, where, text, err);
}

int trace_prompt_chat_read(int64_t file_id, const char *where, char **record, kv_err *err)
{
    return text_read(file_id, TRACE_PROMPT_CHAT_PATH, where, record, err);
}
