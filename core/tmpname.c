#define _XOPEN_SOURCE 700 /* nftw */
#include "tmpname.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The start time (field 22 of /proc/PID/stat) of process `pid`: 1 found, 0 no
 * such process, -1 unknown (no /proc, unreadable, unparsable). */
static int start_time(long pid, unsigned long long *start)
{
    char path[64], buf[1024];
    if (pid > 0) snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    else snprintf(path, sizeof path, "/proc/self/stat");
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT || errno == ESRCH ? 0 : -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name (field 2) may hold spaces and ')' */
    if (!p) return -1;
    p++;
    for (int field = 2; field < 21; field++) { /* skip fields 3..21 */
        p = strchr(p + 1, ' ');
        if (!p) return -1;
    }
    char *end;
    errno = 0;
    *start = strtoull(p + 1, &end, 10);
    return errno || end == p + 1 ? -1 : 1;
}

/* This host's name with anything but [A-Za-z0-9_-] (dots included) made '_'. */
static void host_name(char *buf, size_t cap)
{
    if (gethostname(buf, cap) != 0) snprintf(buf, cap, "localhost");
    buf[cap - 1] = '\0';
    for (char *c = buf; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-'))
            *c = '_';
    if (!buf[0]) snprintf(buf, cap, "localhost");
}

bool tmpname_make(char *buf, size_t cap, const char *dir, size_t dir_len, const char *base)
{
    char host[256];
    unsigned long long start = 0;
    host_name(host, sizeof host);
    if (start_time(0, &start) != 1) start = 0; /* unknown: such a name is never taken for stale */
    int n = snprintf(buf, cap, "%.*s.%s.tmp.%s.%ld.%llu", (int)dir_len, dir, base, host, (long)getpid(), start);
    return n > 0 && (size_t)n < cap;
}

/* Parses the decimal number that is all of s (digits only, no leading zero). */
static bool parse_num(const char *s, unsigned long long *v)
{
    if (!*s || (s[0] == '0' && s[1]) || strspn(s, "0123456789") != strlen(s) || strlen(s) > 19) return false;
    *v = strtoull(s, NULL, 10);
    return true;
}

/* Whether the temporary name `entry` (a directory entry's name) belongs to
 * output BASE and its writer is certainly gone. */
static bool tmpname_is_stale(const char *entry, const char *base)
{
    size_t bl = strlen(base);
    if (entry[0] != '.' || strncmp(entry + 1, base, bl) != 0 || strncmp(entry + 1 + bl, ".tmp.", 5) != 0)
        return false;
    char rest[512], host[256];
    if (snprintf(rest, sizeof rest, "%s", entry + 1 + bl + 5) >= (int)sizeof rest) return false;
    size_t rl = strlen(rest);
    if (rl > 4 && strcmp(rest + rl - 4, ".old") == 0) rest[rl - 4] = '\0';
    char *dot_start = strrchr(rest, '.');
    if (!dot_start) return false;
    *dot_start = '\0';
    char *dot_pid = strrchr(rest, '.');
    unsigned long long start, pid, now;
    if (!dot_pid || dot_pid == rest || !parse_num(dot_start + 1, &start) || !parse_num(dot_pid + 1, &pid) ||
        start == 0 || pid == 0 || pid > 0x7fffffffULL)
        return false;
    *dot_pid = '\0';
    host_name(host, sizeof host);
    if (strcmp(rest, host) != 0) return false; /* another host's: never ours to judge */
    if (start_time(0, &now) != 1) return false; /* no /proc here: nothing is certain */
    int found = start_time((long)pid, &now);
    return found == 0 || (found == 1 && now != start);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void kv_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) unlink(path);
    else nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void tmpname_sweep(const char *dir, size_t dir_len, const char *base, const char *final_path)
{
    char d[4096], path[8192], first[512] = "";
    snprintf(d, sizeof d, "%.*s", (int)(dir_len ? dir_len : 1), dir_len ? dir : ".");
    DIR *dh = opendir(d);
    if (!dh) return;
    int removed = 0;
    for (struct dirent *e; (e = readdir(dh));) {
        if (!tmpname_is_stale(e->d_name, base)) continue;
        snprintf(path, sizeof path, "%s%s%s", d, d[strlen(d) - 1] == '/' ? "" : "/", e->d_name);
        kv_remove_tree(path);
        if (!removed++) snprintf(first, sizeof first, "%s", e->d_name);
    }
    closedir(dh);
    if (removed)
        fprintf(stderr, "kvtrace: note: %s: removed %d stale temporar%s (%s%s) left by a run that was killed\n",
                final_path, removed, removed == 1 ? "y" : "ies", first, removed > 1 ? ", ..." : "");
}
