/* fuzz_file: the input as a file, for harnesses of readers that take a path
 * (config.json, tokenizer.json, CSV files). The bytes go into one anonymous
 * in-memory file (memfd_create, nothing on disk), rewritten for each input;
 * readers open it as /proc/self/fd/N, the name their messages then carry.
 * Header-only: each harness is one program, and defines _GNU_SOURCE before
 * its first include. */
#ifndef KV_FUZZ_FILE_H
#define KV_FUZZ_FILE_H

#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE first (memfd_create)"
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static int fuzz_fd = -1;
static char fuzz_dir[] = "/proc/self/fd";
static char fuzz_name[16];    /* "N" */
static char fuzz_path[64];    /* "/proc/self/fd/N" */

/* Makes the file hold exactly data[size]; aborts when the OS refuses. */
static void fuzz_file_set(const uint8_t *data, size_t size)
{
    if (fuzz_fd < 0) {
        fuzz_fd = memfd_create("fuzz-input", 0);
        if (fuzz_fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(fuzz_name, sizeof fuzz_name, "%d", fuzz_fd);
        snprintf(fuzz_path, sizeof fuzz_path, "%s/%d", fuzz_dir, fuzz_fd);
    }
    if (ftruncate(fuzz_fd, 0) != 0 || (size && pwrite(fuzz_fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz input file");
        abort();
    }
}

#endif
