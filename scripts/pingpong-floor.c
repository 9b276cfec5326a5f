/* The floors under a latency round trip whose two ends spin, as perftest's
 * ib_write_lat ends do once a post waits for its answer (spec/performance.md
 * §19): two processes (the second a fork of the first) pass a token back and
 * forth, each spinning for it, nobody blocking and nobody woken.
 *   udp     the token is a 40-byte datagram on 127.0.0.1 (a RoCEv2 WRITE of
 *           2 bytes is about that long), read by a nonblocking recv(2) in a
 *           loop: what the UDP path's ping-pong costs at the least here;
 *   udp-rc  as udp, but each turn is two datagrams in one sendmmsg(2): a
 *           20-byte ACK of the token that came, then the 40-byte token,
 *           and a turn ends only when both came (recvmmsg(2) in a loop).
 *           An RC WRITE ping-pong over RoCEv2 has this shape: the
 *           responder acknowledges every WRITE, ib_write_lat waits for
 *           the ACK (its completion) and the answer before its next post,
 *           and softverbs sends the ACK in the answer's call
 *           (spec/performance.md §18);
 *   udp-gso as udp-rc, but the two leave as softverbs sends them: one
 *           message of UDP GSO (UDP_SEGMENT 40: the token, then the
 *           shorter ACK as the last segment) to a receiver with UDP_GRO,
 *           so on loopback they cross the stack as one buffer and are read
 *           in one recvmmsg(2). The floor of the UDP latency row;
 * *   memory  the token is a word in shared memory: what one cache line
 *           costs between two processes on two cores, the least any
 *           same-host exchange costs.
 * Prints the one-way time (half the round trip): typical (median), p99, min.
 * A baseline of scripts/perftest.sh, measured in the same run; it is not
 * softverbs code. 127.0.0.1 only; every wait bounded (1 s), the run too.
 * Usage: pingpong-floor udp|udp-rc|udp-gso|memory ITERS [PORT] */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdatomic.h>
#include <stdint.h>
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

/* One turn of udp-rc: (the ACK of the token that came and) the token in
 * one call, then spin until both of the peer's came. The first turn of
 * the first end has no ACK to send. */
static int rc_turn(int s, int to_port, int send_first, int first) {
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(to_port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    char ack[20] = {0}, tok[40] = {0}, in[2][64];
    struct iovec iv[2] = {{ack, sizeof ack}, {tok, sizeof tok}};
    struct mmsghdr out[2], got[2];
    for (int i = 0; i < 2; i++) {
        out[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &to, .msg_namelen = sizeof to,
                                              .msg_iov = &iv[i], .msg_iovlen = 1}};
    }
    struct iovec ii[2] = {{in[0], 64}, {in[1], 64}};
    int skip = send_first && first; /* nothing to acknowledge yet */
    if (send_first && sendmmsg(s, out + skip, 2 - skip, 0) != 2 - skip) return -1;
    int want = (!send_first && first) ? 1 : 2, have = 0;
    double t0 = now_us();
    while (have < want) {
        for (int i = 0; i < 2; i++)
            got[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &ii[i], .msg_iovlen = 1}};
        int n = recvmmsg(s, got, want - have, MSG_DONTWAIT, NULL);
        if (n > 0) have += n;
        else if (now_us() - t0 > 1e6) return -1;
    }
    if (!send_first && sendmmsg(s, out, 2, 0) != 2) return -1;
    return 0;
}

/* One turn of udp-gso: the token and (after the first turn) the ACK of the
 * one that came, as one GSO message, then spin until the peer's bytes came
 * (60 a turn: both segments, whether they arrive coalesced or not). */
static int gso_turn(int s, int to_port, int send_first, int first) {
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(to_port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    char out[60] = {0}, in[4][128];
    union { /* a control buffer aligned for its header */
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } ctl = {{0}};
    struct iovec iv = {out, 60};
    struct msghdr m = {.msg_name = &to, .msg_namelen = sizeof to, .msg_iov = &iv,
                       .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    *(uint16_t *)CMSG_DATA(c) = 40;
    int skip = send_first && first; /* nothing to acknowledge yet: the token alone */
    iv.iov_len = skip ? 40 : 60;
    if (send_first && sendmsg(s, &m, 0) != (ssize_t)iv.iov_len) return -1;
    int want = (!send_first && first) ? 40 : 60, have = 0;
    struct iovec ii[4];
    struct mmsghdr got[4];
    union {
        char buf[64];
        struct cmsghdr align;
    } gctl[4];
    double t0 = now_us();
    while (have < want) {
        for (int i = 0; i < 4; i++) {
            ii[i] = (struct iovec){in[i], sizeof in[i]};
            got[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &ii[i], .msg_iovlen = 1,
                                                  .msg_control = gctl[i].buf,
                                                  .msg_controllen = sizeof gctl[i].buf}};
        }
        int n = recvmmsg(s, got, 4, MSG_DONTWAIT, NULL);
        if (n > 0)
            for (int i = 0; i < n; i++) have += got[i].msg_len;
        else if (now_us() - t0 > 1e6) return -1;
    }
    iv.iov_len = 60;
    if (!send_first && sendmsg(s, &m, 0) != 60) return -1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s udp|udp-rc|udp-gso|memory ITERS [PORT]\n", argv[0]);
        return 2;
    }
    int rc = strcmp(argv[1], "udp-rc") == 0, gso = strcmp(argv[1], "udp-gso") == 0;
    int udp = rc || gso || strcmp(argv[1], "udp") == 0, iters = atoi(argv[2]);
    int port = argc > 3 ? atoi(argv[3]) : 19490;
    if (iters < 100) return 2;
    int a = -1, b = -1;
    if (udp && ((a = udp_socket(port)) < 0 || (b = udp_socket(port + 1)) < 0)) {
        fprintf(stderr, "no UDP ports %d-%d\n", port, port + 1);
        return 3;
    }
    int on = 1;
    if (gso && (setsockopt(a, SOL_UDP, UDP_GRO, &on, sizeof on) < 0 ||
                setsockopt(b, SOL_UDP, UDP_GRO, &on, sizeof on) < 0)) {
        fprintf(stderr, "no UDP_GRO here\n");
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
            if (gso) {
                if (gso_turn(b, port, 0, i == 1) < 0) _exit(4);
            } else if (rc) {
                if (rc_turn(b, port, 0, i == 1) < 0) _exit(4);
            } else if (udp) {
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
        if (gso) {
            if (gso_turn(a, port + 1, 1, i == 1) < 0) break;
        } else if (rc) {
            if (rc_turn(a, port + 1, 1, i == 1) < 0) break;
        } else if (udp) {
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
