/* The floor under ib_write_lat on this host: two processes, each with a
 * thread spinning on memory (as perftest's ib_write_lat does) and a thread
 * blocked in recv(2) on a UDP socket (as a progress thread is). A datagram
 * wakes the receiving thread, which writes the spinning thread's flag; the
 * spinner answers with a datagram of its own. Half the round trip is one
 * datagram, one wake-up and one flag: what a userspace device's WRITE costs
 * at the least when the program spins on memory and nobody polls.
 * A baseline of scripts/perftest.sh, measured in the same run; it is not
 * softverbs code. Two processes on 127.0.0.1; every wait bounded (1 s).
 * Usage: wakeup-floor PORT_SELF PORT_PEER ITERS START(0|1) */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "floor.h"

static int sock;
static struct sockaddr_in peer;
static atomic_int flag;

static void *receiver(void *arg) {
    (void)arg;
    char b[64];
    for (;;) {
        if (recv(sock, b, sizeof b, 0) < 0) return NULL;
        atomic_fetch_add_explicit(&flag, 1, memory_order_release);
    }
}

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    int self = atoi(argv[1]), other = atoi(argv[2]), iters = atoi(argv[3]), start = atoi(argv[4]);
    sock = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = htons(self)};
    inet_pton(AF_INET, "127.0.0.1", &me.sin_addr);
    if (bind(sock, (void *)&me, sizeof me) < 0) return 3;
    peer = me;
    peer.sin_port = htons(other);
    pthread_t t;
    pthread_create(&t, NULL, receiver, NULL);
    double *rtt = calloc(iters, sizeof *rtt);
    usleep(300000);
    int seen = 0;
    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        if (start) sendto(sock, "x", 1, 0, (void *)&peer, sizeof peer);
        /* the spin: wait for the flag, bounded by 1 s */
        while (atomic_load_explicit(&flag, memory_order_acquire) == seen)
            if (now_us() - t0 > 1e6) { fprintf(stderr, "lost at %d\n", i); return 4; }
        seen++;
        if (!start) sendto(sock, "x", 1, 0, (void *)&peer, sizeof peer);
        rtt[i] = now_us() - t0;
    }
    if (start) {
        report("", rtt, iters);
    }
    return 0;
}
