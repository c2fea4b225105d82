#include "fileopen.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int kv_input_open(const char *path, int *fd, kv_err *err)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
        if (errno == EISDIR) return kv_fail(err, KV_EUSAGE, "%s: is a directory", path);
        return kv_fail(err, KV_EFAIL, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(*fd, &st) == 0 && S_ISDIR(st.st_mode)) { /* open(O_RDONLY) takes a directory */
        close(*fd);
        *fd = -1;
        return kv_fail(err, KV_EUSAGE, "%s: is a directory", path);
    }
    return KV_OK;
}

FILE *kv_input_fopen(const char *path, kv_err *err)
{
    int fd;
    if (kv_input_open(path, &fd, err)) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        kv_fail(err, KV_EFAIL, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int kv_input_check(const char *path, bool missing_ok, kv_err *err)
{
    int fd;
    struct stat st;
    if (missing_ok && stat(path, &st) != 0 && errno == ENOENT) return KV_OK;
    int rc = kv_input_open(path, &fd, err);
    if (!rc) close(fd);
    return rc;
}

int kv_input_dir_check(const char *dir, const char *what, kv_err *err)
{
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kv_fail(err, KV_EFAIL, "%s: cannot open: %s", dir, strerror(errno));
    struct stat st;
    const bool is_dir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
    close(fd);
    return is_dir ? KV_OK : kv_fail(err, KV_EUSAGE, "%s: is not a directory (%s)", dir, what);
}
