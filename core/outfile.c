#define _XOPEN_SOURCE 700 /* realpath */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tmpname.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

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

/* Fills final_path and tmp_path (".NAME.tmp.HOST.PID.START" beside it, see
 * tmpname.h) after checking that the parent directory exists; removes stale
 * temporaries of the same output; registers tmp_path for signal cleanup. */
static int name_output(kv_outfile *o, const char *path, bool force, kv_err *err)
{
    o->slot = -1;
    o->tmp_path[0] = '\0';
    o->force = force;
    size_t len = strlen(path);
    if (len == 0 || len + 300 >= sizeof o->final_path)
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
    if (!tmpname_make(o->tmp_path, sizeof o->tmp_path, path, dir_len, base))
        return kv_fail(err, KV_EUSAGE, "output path '%s' is too long", path);
    tmpname_sweep(path, dir_len, base, path);
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
    return name_output(o, path, force, err);
}

/* rename(2) with renameat2's flags; -1 with errno EINVAL or ENOSYS where the
 * kernel or the file system has no such rename. */
static int rename_flags(const char *from, const char *to, unsigned flags)
{
#ifdef SYS_renameat2
    return (int)syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, flags);
#else
    (void)from, (void)to, (void)flags;
    errno = ENOSYS;
    return -1;
#endif
}

/* Another run put an output in place while this one worked, and no --force. */
static int appeared(kv_outfile *o, kv_err *err)
{
    return kv_fail(err, KV_EUSAGE, "%s: output exists: another run wrote it while this one worked "
                   "(use --force to replace it)", o->final_path);
}

int outfile_commit(kv_outfile *o, kv_err *err)
{
    int rc = o->force ? rename(o->tmp_path, o->final_path) : rename_flags(o->tmp_path, o->final_path,
                                                                          RENAME_NOREPLACE);
    if (rc != 0 && !o->force && (errno == EINVAL || errno == ENOSYS)) { /* no renameat2: link, then unlink */
        rc = link(o->tmp_path, o->final_path);
        if (rc == 0) unlink(o->tmp_path);
        else if (errno != EEXIST) rc = rename(o->tmp_path, o->final_path);
    }
    if (rc != 0) {
        int e = errno;
        outfile_abort(o);
        if (e == EEXIST) return appeared(o, err);
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
    int rc = name_output(o, trimmed, force, err);
    if (rc) return rc;
    if (mkdir(o->tmp_path, 0777) != 0) {
        int e = errno;
        outfile_abort(o);
        return kv_fail(err, KV_EFAIL, "%s: cannot create a directory beside it: %s", trimmed, strerror(e));
    }
    return KV_OK;
}

/* Where renameat2 is missing: move the old directory aside, then the new one
 * in (two runs at once may then collide; the loser reports it). */
static int replace_dir_fallback(kv_outfile *o)
{
    char old[4200];
    snprintf(old, sizeof old, "%s.old", o->tmp_path);
    bool moved = rename(o->final_path, old) == 0;
    if (!moved && errno != ENOENT) return -1;
    if (rename(o->tmp_path, o->final_path) != 0) {
        int e = errno;
        if (moved) rename(old, o->final_path);
        errno = e;
        return -1;
    }
    if (moved) kv_remove_tree(old);
    return 0;
}

/* --force: swaps the new directory with the old one in one atomic step
 * (RENAME_EXCHANGE; the path always names a whole output, and two runs at
 * once both succeed, the later one's output staying), then removes the old
 * one from the temporary name. Returns 0 or -1 with errno. */
static int replace_dir(kv_outfile *o)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        if (rename_flags(o->tmp_path, o->final_path, RENAME_EXCHANGE) == 0) {
            kv_remove_tree(o->tmp_path); /* now the old output */
            return 0;
        }
        if (errno == EINVAL || errno == ENOSYS) return replace_dir_fallback(o);
        if (errno != ENOENT) return -1;
        if (rename_flags(o->tmp_path, o->final_path, RENAME_NOREPLACE) == 0) return 0;
        if (errno == EINVAL || errno == ENOSYS) return replace_dir_fallback(o);
        if (errno != EEXIST && errno != ENOTEMPTY) return -1;
        /* another run put its output in place between the two calls: swap again */
    }
    errno = EBUSY;
    return -1;
}

int outdir_commit(kv_outfile *o, kv_err *err)
{
    int rc = o->force ? replace_dir(o) : rename_flags(o->tmp_path, o->final_path, RENAME_NOREPLACE);
    if (rc != 0 && !o->force && (errno == EINVAL || errno == ENOSYS)) rc = rename(o->tmp_path, o->final_path);
    if (rc != 0) {
        int e = errno;
        outdir_abort(o);
        if (!o->force && (e == EEXIST || e == ENOTEMPTY)) return appeared(o, err);
        return kv_fail(err, KV_EFAIL, "%s: cannot move the finished output into place: %s", o->final_path,
                       strerror(e));
    }
    pending_remove(o->slot);
    o->slot = -1;
    return KV_OK;
}

void outdir_abort(kv_outfile *o)
{
    if (o->tmp_path[0]) kv_remove_tree(o->tmp_path);
    pending_remove(o->slot);
    o->slot = -1;
}

/* Whether (dev, ino) is `real` or one of the directories above it. */
static bool holds(const struct stat *out, const char *real)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", real);
    for (;;) {
        struct stat st;
        if (stat(p, &st) == 0 && st.st_dev == out->st_dev && st.st_ino == out->st_ino) return true;
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) break;
        *slash = '\0';
    }
    struct stat root;
    return stat("/", &root) == 0 && root.st_dev == out->st_dev && root.st_ino == out->st_ino;
}

int outfile_check_inputs(const char *path, const char *const *inputs, int n, kv_err *err)
{
    struct stat out;
    if (!path || stat(path, &out) != 0) return KV_OK; /* a new output cannot be an input */
    for (int i = 0; i < n; i++) {
        char real[PATH_MAX];
        if (!inputs[i] || !realpath(inputs[i], real)) continue; /* a missing input is reported by its reader */
        if (holds(&out, real))
            return kv_fail(err, KV_EUSAGE, "%s: the output is the input %s or a directory holding it: "
                           "writing it would destroy the input (choose another output)", path, inputs[i]);
    }
    return KV_OK;
}
