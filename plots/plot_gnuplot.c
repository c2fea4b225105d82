#include "plot_gnuplot.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The child: stderr to the pipe, stdin and stdout to /dev/null, cwd = dir.
 * An exec failure is reported through `status_fd` (close-on-exec) as errno. */
static _Noreturn void child(const char *dir, const char *script, int err_fd, int status_fd)
{
    int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
        dup2(null_fd, STDIN_FILENO);
        dup2(null_fd, STDOUT_FILENO);
    }
    dup2(err_fd, STDERR_FILENO);
    int e = 0;
    if (chdir(dir) != 0) e = errno;
    else {
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        e = errno;
    }
    if (write(status_fd, &e, sizeof e) < 0) { /* nothing more to do */
    }
    _exit(127);
}

/* Reads everything from fd into buf (keeps the first cap-1 bytes). */
static void drain(int fd, char *buf, size_t cap)
{
    size_t used = 0;
    char tmp[4096];
    ssize_t n;
    while ((n = read(fd, tmp, sizeof tmp)) != 0) {
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        size_t take = (size_t)n < cap - 1 - used ? (size_t)n : cap - 1 - used;
        memcpy(buf + used, tmp, take);
        used += take;
    }
    buf[used] = '\0';
}

/* The first non-blank line of gnuplot's stderr, trimmed. */
static void first_line(const char *text, char *out, size_t cap)
{
    while (*text == '\n' || *text == ' ' || *text == '\r' || *text == '\t') text++;
    size_t n = strcspn(text, "\n");
    if (n >= cap) n = cap - 1;
    memcpy(out, text, n);
    out[n] = '\0';
}

/* Reads everything gnuplot writes to fd (so that it never blocks on a full
 * pipe) and keeps its first non-blank line in out. */
static void drain_first_line(int fd, char *out, size_t cap)
{
    char text[65536];
    drain(fd, text, sizeof text);
    first_line(text, out, cap);
}

static int wait_child(pid_t pid, int *status)
{
    while (waitpid(pid, status, 0) < 0)
        if (errno != EINTR) return -1;
    return 0;
}

int plot_gnuplot_run(const char *dir, const char *script, const char *output, kv_err *err)
{
    int errp[2], statp[2];
    if (pipe(errp) != 0) return kv_fail(err, KV_EFAIL, "plot: pipe: %s", strerror(errno));
    if (pipe(statp) != 0 || fcntl(statp[1], F_SETFD, FD_CLOEXEC) != 0) {
        close(errp[0]), close(errp[1]);
        return kv_fail(err, KV_EFAIL, "plot: pipe: %s", strerror(errno));
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(errp[0]), close(errp[1]), close(statp[0]), close(statp[1]);
        return kv_fail(err, KV_EFAIL, "plot: cannot start gnuplot: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(errp[0]), close(statp[0]);
        child(dir, script, errp[1], statp[1]);
    }
    close(errp[1]), close(statp[1]);
    char line[512];
    drain_first_line(errp[0], line, sizeof line);
    close(errp[0]);
    int exec_errno = 0;
    ssize_t got = read(statp[0], &exec_errno, sizeof exec_errno);
    close(statp[0]);
    int status = 0;
    if (wait_child(pid, &status) != 0) return kv_fail(err, KV_EFAIL, "plot: waiting for gnuplot: %s", strerror(errno));
    if (got == (ssize_t)sizeof exec_errno && exec_errno == ENOENT)
        return kv_fail(err, KV_EFAIL, "gnuplot not found on PATH: install gnuplot (Debian: gnuplot-nox) to draw %s",
                       script);
    if (got == (ssize_t)sizeof exec_errno)
        return kv_fail(err, KV_EFAIL, "cannot run gnuplot for %s: %s", script, strerror(exec_errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return kv_fail(err, KV_EFAIL, "gnuplot failed on %s/%s (%s %d): %s", dir, script,
                       WIFEXITED(status) ? "exit status" : "signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), line[0] ? line : "(no message)");
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, output);
    struct stat st;
    bool missing = stat(path, &st) != 0;
    if (missing || st.st_size == 0)
        return kv_fail(err, KV_EFAIL, "gnuplot ran %s but %s is %s%s%s", script, output, missing ? "missing" : "empty",
                       line[0] ? ": " : "", line);
    return KV_OK;
}
