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
 * With `roce` as a third argument it is the floor of any RoCEv2 transport
 * on UDP sockets instead: each end also does the per-byte work every
 * datagram needs and nothing more. The sender computes a CRC-32 over each
 * datagram (the ICRC; the payload read where it lies, no copy of its own,
 * as a sender that hands the kernel iovecs into registered memory would),
 * the receiver computes each datagram's CRC-32 as its check would (the
 * comparison itself left out) and copies its 4 KiB payload into a 4 MiB
 * region (the placement, which may not happen before the check). The CRC is folded with PCLMULQDQ, the method of the CRC crate the
 * library uses, and checked against a bitwise CRC-32 at start.
 * A baseline of scripts/perftest.sh, measured in the same run; it is not
 * softverbs code. 127.0.0.1 only; bounded in time (SECONDS, then 1 s of
 * quiet ends the receiver).
 * Usage: udp-ceiling PORT SECONDS [roce]
 * prints "<MiB/s received> MiB/s ..."; `udp-ceiling check` only checks the
 * folded CRC against the bitwise one (scripts/test.sh). */
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
#include <immintrin.h>
#include <stdint.h>

#include "floor.h"

enum { SEGMENT = 4112, PER_SEND = 15, SENDS = 16, READS = 16, READ_LEN = 65536 };

static struct sockaddr_in to;
static double seconds;
static int roce; /* the per-byte work of RoCEv2 on both ends (see the top) */
static volatile uint32_t sink; /* keeps the CRCs computed */

/* CRC-32 (IEEE 802.3, reflected; RoCEv2's ICRC is one) of `len` bytes, one
 * bit at a time: the reference the folded one is checked against. */
static uint32_t crc32_bitwise(const unsigned char *p, size_t len) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < len; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & -(c & 1));
    }
    return ~c;
}

/* The same CRC by carry-less multiplication (Intel, "Fast CRC Computation
 * for Generic Polynomials Using PCLMULQDQ Instruction", 2009): four lanes of
 * 128 bits folded 64 bytes at a time, then one lane, then the Barrett
 * reduction to 32 bits. `len` at least 64 and a multiple of 16 (a RoCEv2
 * datagram of this program is 4 112 bytes). The constants are x^k mod P for
 * the folding distances, bit-reflected, and P and floor(x^64 / P). */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_fold(const unsigned char *p, size_t len) {
    const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);
    const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124);
    const __m128i pu = _mm_set_epi64x(0x1f7011641, 0x1db710641);
    const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i x0 = _mm_loadu_si128((const __m128i *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)0xffffffffu));
    p += 64;
    len -= 64;
#define FOLD(x, k, next) \
    _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next)
    for (; len >= 64; p += 64, len -= 64) {
        x0 = FOLD(x0, k1k2, _mm_loadu_si128((const __m128i *)p));
        x1 = FOLD(x1, k1k2, _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = FOLD(x2, k1k2, _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = FOLD(x3, k1k2, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    x0 = FOLD(x0, k3k4, x1);
    x0 = FOLD(x0, k3k4, x2);
    x0 = FOLD(x0, k3k4, x3);
    for (; len >= 16; p += 16, len -= 16) x0 = FOLD(x0, k3k4, _mm_loadu_si128((const __m128i *)p));
#undef FOLD
    /* 128 bits to 64 (with 32 zero bits appended), then to 32 more. */
    x0 = _mm_xor_si128(_mm_srli_si128(x0, 8), _mm_clmulepi64_si128(x0, k3k4, 0x10));
    x0 = _mm_xor_si128(_mm_srli_si128(x0, 4), _mm_clmulepi64_si128(_mm_and_si128(x0, low32), k5, 0x00));
    /* Barrett reduction. */
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x0, low32), pu, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), pu, 0x00);
    x0 = _mm_xor_si128(x0, t);
    return ~(uint32_t)_mm_extract_epi32(x0, 1);
}

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
        if (roce) {
            uint32_t c = 0;
            for (size_t at = 0; at < len * SENDS; at += SEGMENT) c ^= crc32_fold((unsigned char *)buf + at, SEGMENT);
            sink = c;
        }
        if (sendmmsg(s, m, SENDS, 0) < 0) {
            perror("sendmmsg (UDP GSO)");
            break;
        }
    }
    free(buf);
}

int main(int argc, char **argv) {
    int check = argc == 2 && strcmp(argv[1], "check") == 0;
    if (!check && (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "roce") != 0))) {
        fprintf(stderr, "usage: udp-ceiling PORT SECONDS [roce] | udp-ceiling check\n");
        return 2;
    }
    roce = check || argc == 4;
    if (roce) {
        /* The folded CRC against the bitwise one at every length it takes
         * up to a datagram, and against CRC-32's check value. */
        unsigned char probe[SEGMENT];
        for (int i = 0; i < SEGMENT; i++) probe[i] = (unsigned char)(i * 131 + 7);
        for (size_t n = 64; n <= SEGMENT; n += 16) {
            if (crc32_fold(probe, n) != crc32_bitwise(probe, n)) {
                fprintf(stderr, "the folded CRC-32 is wrong at %zu bytes\n", n);
                return 1;
            }
        }
        if (crc32_bitwise((const unsigned char *)"123456789", 9) != 0xcbf43926u) {
            fprintf(stderr, "the bitwise CRC-32 is not CRC-32\n");
            return 1;
        }
    }
    if (check) {
        printf("the folded CRC-32 agrees with the bitwise one (64 to %d bytes)\n", SEGMENT);
        return 0;
    }
    seconds = atof(argv[2]);
    enum { REGION = 4 << 20 };
    char *region = roce ? malloc(REGION) : NULL;
    size_t placed_at = 0;
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
        for (int i = 0; i < n; i++) {
            bytes += m[i].msg_len;
            if (!roce) continue;
            /* Each datagram of the buffer checked, then its payload placed. */
            const unsigned char *d = (unsigned char *)buf + (size_t)i * READ_LEN;
            uint32_t c = 0;
            for (size_t at = 0; at + SEGMENT <= m[i].msg_len; at += SEGMENT) {
                c ^= crc32_fold(d + at, SEGMENT);
                memcpy(region + placed_at, d + at + 12, 4096);
                placed_at = (placed_at + 4096) % REGION;
            }
            sink = c;
        }
        reads++;
        last = now();
    }
    waitpid(child, NULL, 0);
    free(region);
    if (last <= first) {
        printf("no result\n");
        return 1;
    }
    printf("%.1f MiB/s received (%lld recvmmsg calls, %.1f s)\n",
           bytes / (last - first) / 1048576.0, reads, last - first);
    return 0;
}
