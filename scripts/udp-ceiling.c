/* The ceiling under every UDP transport on this host: how many bytes a
 * thread can take out of a UDP socket per second, with the kernel's best
 * tools and no protocol work at all. A sender hands the kernel
 * RoCEv2-sized datagrams (4 112 bytes: BTH, 4 KiB payload, ICRC) fifteen at
 * a time in one UDP GSO send, sixteen sends per sendmmsg(2); a receiver
 * process (the sender is its child, as perftest's two ends are two
 * processes) with UDP_GRO on reads them (coalesced) with recvmmsg(2) and does
 * nothing with the bytes. The receiver's rate is the figure: the softverbs
 * UDP path does this and, on top of it, checks an ICRC, places the payload
 * and runs the protocol, so it cannot pass it.
 * A baseline of scripts/perftest.sh, measured in the same run; it is not
 * softverbs code. 127.0.0.1 only; bounded in time (SECONDS, then 1 s of
 * quiet ends the receiver).
 * Usage: udp-ceiling PORT SECONDS   prints "<MiB/s received> MiB/s ..." */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "floor.h"

enum { SEGMENT = 4112, PER_SEND = 15, SENDS = 16, READS = 16, READ_LEN = 65536 };

static struct sockaddr_in to;
static double seconds;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void sender(int s) {
    size_t len = (size_t)SEGMENT * PER_SEND;
    char *buf = malloc(len * SENDS);
    memset(buf, 0x5a, len * SENDS);
    struct mmsghdr m[SENDS];
    struct iovec iov[SENDS];
    union {
        char b[CMSG_SPACE(sizeof(unsigned short))];
        struct cmsghdr align;
    } control[SENDS];
    double end = now() + seconds;
    while (now() < end) {
        for (int i = 0; i < SENDS; i++) {
            iov[i] = (struct iovec){buf + i * len, len};
            m[i].msg_hdr = (struct msghdr){.msg_name = &to, .msg_namelen = sizeof to,
                                           .msg_iov = &iov[i], .msg_iovlen = 1,
                                           .msg_control = control[i].b,
                                           .msg_controllen = sizeof control[i].b};
            struct cmsghdr *c = CMSG_FIRSTHDR(&m[i].msg_hdr);
            c->cmsg_level = SOL_UDP;
            c->cmsg_type = UDP_SEGMENT;
            c->cmsg_len = CMSG_LEN(sizeof(unsigned short));
            unsigned short segment = SEGMENT;
            memcpy(CMSG_DATA(c), &segment, sizeof segment);
        }
        if (sendmmsg(s, m, SENDS, 0) < 0) {
            perror("sendmmsg (UDP GSO)");
            break;
        }
    }
    free(buf);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: udp-ceiling PORT SECONDS\n");
        return 2;
    }
    seconds = atof(argv[2]);
    to = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    int rx = socket(AF_INET, SOCK_DGRAM, 0), tx = socket(AF_INET, SOCK_DGRAM, 0);
    int one = 1, buffer = 4 << 20;
    struct timeval quiet = {.tv_sec = 1};
    if (setsockopt(rx, SOL_UDP, UDP_GRO, &one, sizeof one) < 0) perror("UDP_GRO");
    setsockopt(rx, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
    setsockopt(tx, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
    setsockopt(rx, SOL_SOCKET, SO_RCVTIMEO, &quiet, sizeof quiet);
    if (bind(rx, (struct sockaddr *)&to, sizeof to) < 0) {
        perror("bind");
        return 1;
    }
    pid_t child = fork();
    if (child == 0) {
        sender(tx);
        _exit(0);
    }
    char *buf = malloc((size_t)READS * READ_LEN);
    struct mmsghdr m[READS];
    struct iovec iov[READS];
    long long bytes = 0, reads = 0;
    double first = 0, last = 0;
    for (;;) {
        for (int i = 0; i < READS; i++) {
            iov[i] = (struct iovec){buf + (size_t)i * READ_LEN, READ_LEN};
            m[i].msg_hdr = (struct msghdr){.msg_iov = &iov[i], .msg_iovlen = 1};
        }
        int n = recvmmsg(rx, m, READS, MSG_WAITFORONE, NULL);
        if (n <= 0) break; /* a second of quiet: the sender is done */
        if (first == 0) first = now();
        for (int i = 0; i < n; i++) bytes += m[i].msg_len;
        reads++;
        last = now();
    }
    waitpid(child, NULL, 0);
    if (last <= first) {
        printf("no result\n");
        return 1;
    }
    printf("%.1f MiB/s received (%lld recvmmsg calls, %.1f s)\n",
           bytes / (last - first) / 1048576.0, reads, last - first);
    return 0;
}
