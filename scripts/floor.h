/* What the floor programs (wakeup-floor.c, pingpong-floor.c) share: the
 * clock they stamp round trips with, and the line they report them in
 * (send-cost.c and cma-cost.c use the clock and the comparison; they and
 * udp-ceiling.c the UDP GSO/GRO option numbers). */
#include <stdio.h>
#include <stdlib.h>
#include <netinet/udp.h>
#include <time.h>

/* The UDP socket options of GSO and GRO (linux/udp.h), for C libraries
 * whose netinet/udp.h lacks them. */
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

static inline double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Prints one way (half of each of the `n` round trips in `rtt`, µs):
 * typical (the median), p99 and min, after `label` if it is not empty. */
static inline void report(const char *label, double *rtt, int n) {
    qsort(rtt, n, sizeof *rtt, cmp_double);
    printf("%s%sone-way (half round trip) typical %.2f us, p99 %.2f us, min %.2f us\n",
           label, *label ? " " : "", rtt[n / 2] / 2, rtt[n * 99 / 100] / 2, rtt[0] / 2);
}
