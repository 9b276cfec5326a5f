/* Cross-memory attach across processes (spec/same-host.md §4): how fast
 * process_vm_readv(2) copies 64 KiB blocks out of another process's
 * memory, beside memcpy(3) of the same blocks, over a 4 MiB working set,
 * one second each. The other process is a fork that holds the source
 * both ways it may lie: a shared mapping and private (copy-on-write)
 * memory. A measurement, not softverbs code; no network at all.
 * Usage: cma-cost [BLOCK_BYTES] */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "floor.h"

#define TOTAL (4u << 20)

static void measure(const char *what, int flags, size_t block) {
    char *src = mmap(NULL, TOTAL, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);
    char *dst = aligned_alloc(4096, TOTAL);
    if (src == MAP_FAILED || dst == NULL) {
        perror("memory");
        exit(1);
    }
    memset(src, 1, TOTAL);
    memset(dst, 2, TOTAL);
    pid_t holder = fork();
    if (holder == 0) {
        sleep(30); /* holds the source; killed when done */
        _exit(0);
    }
    double bytes = 0, start = now_us();
    int failed = 0;
    while (now_us() - start < 1e6 && !failed) {
        for (size_t o = 0; o + block <= TOTAL; o += block) {
            struct iovec l = {dst + o, block}, r = {src + o, block};
            if (process_vm_readv(holder, &l, 1, &r, 1, 0) != (ssize_t)block) {
                perror("process_vm_readv");
                failed = 1;
                break;
            }
            bytes += block;
        }
    }
    double cma = bytes / (now_us() - start); /* bytes per µs = MB/s */
    bytes = 0;
    start = now_us();
    while (now_us() - start < 1e6)
        for (size_t o = 0; o + block <= TOTAL; o += block) {
            memcpy(dst + o, src + o, block);
            bytes += block;
        }
    double copy = bytes / (now_us() - start);
    if (failed)
        printf("%-8s process_vm_readv refused (no ptrace rights over the peer?)\n", what);
    else
        printf("%-8s process_vm_readv %.0f MB/s, memcpy %.0f MB/s (%zu-byte blocks)\n", what, cma,
               copy, block);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    munmap(src, TOTAL);
    free(dst);
}

int main(int argc, char **argv) {
    size_t block = argc > 1 ? strtoul(argv[1], NULL, 0) : 65536;
    if (block == 0 || block > TOTAL) block = 65536;
    measure("shared", MAP_SHARED, block);
    measure("private", MAP_PRIVATE, block);
    return 0;
}
