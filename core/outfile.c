#define _XOPEN_SOURCE 700 /* nftw */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Temporary paths the signal handler removes; a handful of outputs at once is plenty. */
enum { MAX_PENDING = 16 };
static char pending[MAX_PENDING][4096];
static volatile sig_atomic_t pending_used[MAX_PENDING];

static int pending_add(const char *path)
{
    for (int i = 0; i < MAX_PENDING; i++) {
        if (!pending_used[i]) {
            snprintf(pending[i], sizeof pending[i], "%s", path);
            pending_used[i] = 1;
            return i;
        }
    }
    return -1;
}

static void pending_remove(int slot)
{
    if (slot >= 0) pending_used[slot] = 0;
}

#ifdef __linux__
/* The entries of the open directory fd, removed with what a signal handler may
 * call: getdents64 (a raw system call: readdir may allocate), unlinkat,
 * openat, close. Output directories are shallow (demo: two levels). */
static void clear_dir_fd(int fd, int depth)
{
    struct dent { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; };
    _Alignas(8) char buf[2048];
    long n;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
        for (long at = 0; at < n;) {
            const struct dent *e = (const void *)(buf + at);
            at += e->reclen;
            if (e->name[0] == '.' && (!e->name[1] || (e->name[1] == '.' && !e->name[2]))) continue;
            if (unlinkat(fd, e->name, 0) == 0 || depth == 0) continue;
            int sub = openat(fd, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
            if (sub < 0) continue;
            clear_dir_fd(sub, depth - 1);
            close(sub);
            unlinkat(fd, e->name, AT_REMOVEDIR);
        }
}

static void remove_pending_dir(const char *path)
{
    for (int pass = 0; pass < 3 && rmdir(path) != 0; pass++) { /* entries removed while listing: list again */
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        if (fd < 0) return;
        clear_dir_fd(fd, 4);
        close(fd);
    }
}
#else
static void remove_pending_dir(const char *path) { (void)path; }
#endif

/* Removes every pending temporary output, a file or (outdir_begin's) a
 * directory and what it holds, then dies of the signal as it would have. */
static void on_signal(int sig)
{
    for (int i = 0; i < MAX_PENDING; i++)
        if (pending_used[i] && unlink(pending[i]) != 0 && (errno == EISDIR || errno == EPERM))
            remove_pending_dir(pending[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

void outfile_install_signal_cleanup(void)
{
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
}

/* Fills final_path and tmp_path (".NAME.tmp.PID" beside it) after checking
 * that the parent directory exists; registers tmp_path for signal cleanup. */
static int name_output(kv_outfile *o, const char *path, kv_err *err)
{
    o->slot = -1;
    o->tmp_path[0] = '\0';
    size_t len = strlen(path);
    if (len == 0 || len + 32 >= sizeof o->final_path)
        return kv_fail(err, KV_EUSAGE, "output path '%s' is empty or too long", path);
    memcpy(o->final_path, path, len + 1);
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    const char *base = path + dir_len;
    if (*base == '\0')
        return kv_fail(err, KV_EUSAGE, "output path '%s' names a directory, not a file", path);
    struct stat st;
    if (dir_len > 0) {
        char dir[4096];
        memcpy(dir, path, dir_len);
        dir[dir_len] = '\0';
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return kv_fail(err, KV_EFAIL, "%s: output directory '%s' does not exist", path, dir);
    }
    snprintf(o->tmp_path, sizeof o->tmp_path, "%.*s.%s.tmp.%ld", (int)dir_len, path, base, (long)getpid());
    o->slot = pending_add(o->tmp_path);
    return KV_OK;
}

int outfile_begin(kv_outfile *o, const char *path, bool force, kv_err *err)
{
    struct stat st;
    o->slot = -1;
    o->tmp_path[0] = '\0';
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return kv_fail(err, KV_EUSAGE, "%s: output path is a directory", path);
        if (!force)
            return kv_fail(err, KV_EUSAGE, "%s: output exists (use --force to replace it)", path);
    }
    return name_output(o, path, err);
}

int outfile_commit(kv_outfile *o, kv_err *err)
{
    if (rename(o->tmp_path, o->final_path) != 0) {
        int e = errno;
        outfile_abort(o);
        return kv_fail(err, KV_EFAIL, "%s: cannot move the finished output into place: %s",
                       o->final_path, strerror(e));
    }
    pending_remove(o->slot);
    o->slot = -1;
    return KV_OK;
}

void outfile_abort(kv_outfile *o)
{
    if (o->tmp_path[0]) unlink(o->tmp_path);
    pending_remove(o->slot);
    o->slot = -1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int outdir_begin(kv_outfile *o, const char *path, bool force, kv_err *err)
{
    char trimmed[4096];
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--; /* "res/" names the directory res */
    if (len >= sizeof trimmed) return kv_fail(err, KV_EUSAGE, "output path '%s' is too long", path);
    memcpy(trimmed, path, len);
    trimmed[len] = '\0';
    struct stat st;
    o->slot = -1;
    o->tmp_path[0] = '\0';
    if (stat(trimmed, &st) == 0 && !S_ISDIR(st.st_mode))
        return kv_fail(err, KV_EUSAGE, "%s: output exists and is not a directory", trimmed);
    if (stat(trimmed, &st) == 0 && !force)
        return kv_fail(err, KV_EUSAGE, "%s: output exists (use --force to replace it)", trimmed);
    int rc = name_output(o, trimmed, err);
    if (rc) return rc;
    if (mkdir(o->tmp_path, 0777) != 0) {
        int e = errno;
        outfile_abort(o);
        return kv_fail(err, KV_EFAIL, "%s: cannot create a directory beside it: %s", trimmed, strerror(e));
    }
    return KV_OK;
}

int outdir_commit(kv_outfile *o, kv_err *err)
{
    struct stat st;
    char old[4200] = "";
    if (stat(o->final_path, &st) == 0) { /* --force: move the old one aside first */
        snprintf(old, sizeof old, "%s.old.%ld", o->tmp_path, (long)getpid());
        if (rename(o->final_path, old) != 0) {
            int e = errno;
            outdir_abort(o);
            return kv_fail(err, KV_EFAIL, "%s: cannot replace it: %s", o->final_path, strerror(e));
        }
    }
    if (rename(o->tmp_path, o->final_path) != 0) {
        int e = errno;
        if (old[0]) rename(old, o->final_path);
        outdir_abort(o);
        return kv_fail(err, KV_EFAIL, "%s: cannot move the finished output into place: %s", o->final_path,
                       strerror(e));
    }
    if (old[0]) remove_tree(old);
    pending_remove(o->slot);
    o->slot = -1;
    return KV_OK;
}

void outdir_abort(kv_outfile *o)
{
    if (o->tmp_path[0]) remove_tree(o->tmp_path);
    pending_remove(o->slot);
    o->slot = -1;
}
