/* The floors under a latency round trip whose two ends spin, as perftest's
 * ib_write_lat ends do once a post waits for its answer (spec/performance.md
 * §19): two processes (the second a fork of the first) pass a token back and
 * forth, each spinning for it, nobody blocking and nobody woken.
 *   udp     the token is a 40-byte datagram on 127.0.0.1 (a RoCEv2 WRITE of
 *           2 bytes is about that long), read by a nonblocking recv(2) in a
 *           loop: what the UDP path's ping-pong costs at the least here;
 *   memory  the token is a word in shared memory: what one cache line
 *           costs between two processes on two cores, the least any
 *           same-host exchange costs.
 * Prints the one-way time (half the round trip): typical (median), p99, min.
 * A baseline of scripts/perftest.sh, measured in the same run; it is not
 * softverbs code. 127.0.0.1 only; every wait bounded (1 s), the run too.
 * Usage: pingpong-floor udp|memory ITERS [PORT] */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "floor.h"

static int udp_socket(int port) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (s < 0 || bind(s, (void *)&a, sizeof a) < 0) return -1;
    return s;
}

/* One token through UDP: send it, then spin until the peer's comes back. */
static int udp_turn(int s, int to_port, int send_first) {
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(to_port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    char b[64] = {0};
    if (send_first && sendto(s, b, 40, 0, (void *)&to, sizeof to) != 40) return -1;
    double t0 = now_us();
    while (recv(s, b, sizeof b, MSG_DONTWAIT) < 0)
        if (now_us() - t0 > 1e6) return -1;
    if (!send_first && sendto(s, b, 40, 0, (void *)&to, sizeof to) != 40) return -1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s udp|memory ITERS [PORT]\n", argv[0]);
        return 2;
    }
    int udp = strcmp(argv[1], "udp") == 0, iters = atoi(argv[2]);
    int port = argc > 3 ? atoi(argv[3]) : 19490;
    if (iters < 100) return 2;
    int a = -1, b = -1;
    if (udp && ((a = udp_socket(port)) < 0 || (b = udp_socket(port + 1)) < 0)) {
        fprintf(stderr, "no UDP ports %d-%d\n", port, port + 1);
        return 3;
    }
    /* the memory token: one word per direction, each on its own line */
    _Atomic long *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 3;
    _Atomic long *ping = m, *pong = m + 16;
    double *rtt = calloc(iters, sizeof *rtt);
    pid_t child = fork();
    if (child == 0) {
        /* the answering end: each token back as soon as it came */
        for (long i = 1; i <= iters; i++) {
            if (udp) {
                if (udp_turn(b, port, 0) < 0) _exit(4);
            } else {
                double t0 = now_us();
                while (atomic_load_explicit(ping, memory_order_acquire) != i)
                    if (now_us() - t0 > 1e6) _exit(4);
                atomic_store_explicit(pong, i, memory_order_release);
            }
        }
        _exit(0);
    }
    for (long i = 1; i <= iters; i++) {
        double t0 = now_us();
        if (udp) {
            if (udp_turn(a, port + 1, 1) < 0) break;
        } else {
            atomic_store_explicit(ping, i, memory_order_release);
            while (atomic_load_explicit(pong, memory_order_acquire) != i)
                if (now_us() - t0 > 1e6) break;
        }
        rtt[i - 1] = now_us() - t0;
    }
    int status = 1;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "the answering end failed (a token lost or late)\n");
        return 4;
    }
    report(argv[1], rtt, iters);
    return 0;
}
