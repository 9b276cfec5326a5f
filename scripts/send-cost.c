/* What one send(2)-family call to a loopback UDP socket costs the sender
 * while a second process spins on the reading socket with a nonblocking
 * recv(2), as the peer of a latency ping-pong does (spec/performance.md
 * §21: most of the spinning UDP floor is this call). Per way of sending a
 * 36-byte datagram (a 2-byte RDMA WRITE) and a 20-byte one (its ACK):
 *   sendto   the 36 bytes alone, sendto(2);
 *   gso      both as one UDP GSO send (segment size 36, the 20 last);
 *   sendmmsg both as two messages of one sendmmsg(2).
 * Sends are 5 µs apart; prints the median and mean time per call. The
 * reading socket has UDP_GRO on, as softverbs' does. A measurement, not
 * softverbs code; 127.0.0.1 only, a bounded number of sends.
 * Usage: send-cost [SENDS] [PORT] */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "floor.h"

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#define UDP_SEGMENT_OPT 103 /* include/uapi/linux/udp.h */
#define UDP_GRO_OPT 104

static int bound(int port, int nonblock) {
    int s = socket(AF_INET, SOCK_DGRAM | (nonblock ? SOCK_NONBLOCK : 0), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("socket");
        exit(1);
    }
    return s;
}

int main(int argc, char **argv) {
    int sends = argc > 1 ? atoi(argv[1]) : 20000;
    int port = argc > 2 ? atoi(argv[2]) : 24011;
    if (sends < 1 || sends > 1000000) sends = 20000;
    int tx = bound(port, 0), rx = bound(port + 1, 1), one = 1;
    setsockopt(rx, SOL_UDP, UDP_GRO_OPT, &one, sizeof one);
    pid_t reader = fork();
    if (reader == 0) {
        /* Spins on the socket until the parent ends it (at most 60 s). */
        char buf[65536];
        double until = now_us() + 60e6;
        while (now_us() < until) recv(rx, buf, sizeof buf, 0);
        _exit(0);
    }
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port + 1)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char d[64];
    memset(d, 1, sizeof d);
    struct iovec iov[2] = {{d, 36}, {d, 20}};
    struct mmsghdr m[2];
    memset(m, 0, sizeof m);
    for (int k = 0; k < 2; k++) {
        m[k].msg_hdr.msg_name = &to;
        m[k].msg_hdr.msg_namelen = sizeof to;
        m[k].msg_hdr.msg_iov = &iov[k];
        m[k].msg_hdr.msg_iovlen = 1;
    }
    char ctl[CMSG_SPACE(sizeof(unsigned short))];
    memset(ctl, 0, sizeof ctl);
    struct msghdr gso = {.msg_name = &to, .msg_namelen = sizeof to, .msg_iov = iov,
                         .msg_iovlen = 2, .msg_control = ctl, .msg_controllen = sizeof ctl};
    struct cmsghdr *c = CMSG_FIRSTHDR(&gso);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT_OPT;
    c->cmsg_len = CMSG_LEN(sizeof(unsigned short));
    unsigned short seg = 36;
    memcpy(CMSG_DATA(c), &seg, sizeof seg);
    usleep(100000);
    double *t = malloc(sizeof *t * sends);
    const char *names[3] = {"sendto", "gso", "sendmmsg"};
    for (int mode = 0; mode < 3; mode++) {
        double sum = 0;
        int failed = 0;
        for (int i = 0; i < sends; i++) {
            double gap = now_us() + 5;
            while (now_us() < gap)
                ;
            double s = now_us();
            int r = mode == 0   ? (int)sendto(tx, d, 36, 0, (struct sockaddr *)&to, sizeof to)
                    : mode == 1 ? (int)sendmsg(tx, &gso, 0)
                                : sendmmsg(tx, m, 2, 0);
            t[i] = now_us() - s;
            failed += r < 0;
            sum += t[i];
        }
        qsort(t, sends, sizeof *t, cmp_double);
        printf("%-9s median %.2f us, mean %.2f us per call (%d failed)\n", names[mode],
               t[sends / 2], sum / sends, failed);
    }
    kill(reader, SIGKILL);
    waitpid(reader, NULL, 0);
    free(t);
    return 0;
}
