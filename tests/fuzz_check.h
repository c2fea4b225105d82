/* fuzz_check: the checks the file-reader harnesses (fuzz_gguf,
 * fuzz_safetensors, fuzz_hf_config, fuzz_hf_tokenizer, fuzz_csv) share.
 * Define FUZZ_NAME (the harness) and WHERE (the name the input is parsed
 * under: a string literal or an expression) before including it.
 * Header-only: each harness is one program. */
#ifndef KV_FUZZ_CHECK_H
#define KV_FUZZ_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kv_error.h"

const char *__ubsan_default_options(void);

/* Stop at the first UBSan report so that libFuzzer saves the input. */
const char *__ubsan_default_options(void) { return "halt_on_error=1:print_stacktrace=1"; }

__attribute__((format(printf, 1, 2))) static _Noreturn void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, FUZZ_NAME ": ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

#define CHECK(cond, ...)                   \
    do {                                   \
        if (!(cond)) die(__VA_ARGS__);     \
    } while (0)

/* An error: code 1 or 3, one line, naming the file ("WHERE: ..." or
 * "WHERE:LINE: ..."; allocation failures excepted). */
static void check_err(int rc, kv_err *err, const char *what)
{
    CHECK(rc == err->code, "%s: returned %d, err.code %d", what, rc, err->code);
    CHECK(rc == KV_EINPUT || rc == KV_EFAIL, "%s: code %d ('%s')", what, rc, err->msg);
    CHECK(err->msg[0] != '\0', "%s: empty message", what);
    CHECK(memchr(err->msg, '\0', sizeof err->msg) != NULL, "%s: unterminated message", what);
    CHECK(!strchr(err->msg, '\n') && !strchr(err->msg, '\r'), "%s: not one line: '%s'", what,
          err->msg);
    const size_t wl = strlen(WHERE);
    CHECK(rc == KV_EFAIL || (strncmp(err->msg, WHERE, wl) == 0 && err->msg[wl] == ':'),
          "%s: message does not name the file: '%s'", what, err->msg);
    kv_err_clear(err);
}

#endif
