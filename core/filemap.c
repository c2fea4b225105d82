#include "fileopen.h"
#include "filemap.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int kv_filemap_open(const char *path, kv_filemap *fm, kv_err *err)
{
    memset(fm, 0, sizeof *fm);
    int fd;
    int rc = kv_input_open(path, &fd, err);
    if (rc) return rc;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kv_fail(err, KV_EINPUT, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size > 0) {
        void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return kv_fail(err, KV_EFAIL, "%s: cannot map %zu bytes: %s", path, size, strerror(e));
        }
        fm->data = map, fm->size = size;
    }
    close(fd);
    return KV_OK;
}

void kv_filemap_close(kv_filemap *fm)
{
    if (fm->data) munmap((void *)fm->data, fm->size);
    memset(fm, 0, sizeof *fm);
}

void kv_filemap_will_read(const kv_filemap *fm)
{
    if (fm->data) madvise((void *)fm->data, fm->size, MADV_WILLNEED);
}

void kv_filemap_drop(const void *p, size_t n)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p, b = a + n;
    const uintptr_t lo = (a + page - 1) / page * page, hi = b / page * page;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* a hint: its failure changes nothing */
}
