/* The ceiling under every same-host transport through shared memory on this
 * host: how many bytes two processes move per second through one ring when
 * each byte is copied twice (into the ring by the sender, out of it by the
 * receiver) and nothing else is done. The ring is laid out as the softverbs
 * same-host path's (spec/same-host.md): 4 MiB of records, each an 8-byte
 * record header, a 28-byte RoCEv2 header (BTH and RETH) and 4 KiB of payload,
 * padded to 8 bytes, so that every record starts 4 136 bytes after the last
 * and the copies meet the cache and alignment a real packet stream meets. The
 * sender copies 64 KiB messages (sixteen records) from a buffer of its own,
 * the receiver copies each payload into a 64 KiB buffer of its own. The
 * receiver's rate is the figure: the same-host path does this and, on top of
 * it, runs the protocol, so it cannot pass it. Both processes spin, as
 * perftest's two ends do.
 * A baseline of scripts/perftest.sh, measured in the same run; it is not
 * softverbs code. Bounded in time (SECONDS).
 * Usage: shm-ceiling SECONDS   prints "<MiB/s> MiB/s ..." */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
	RING = 4 << 20,
	PAYLOAD = 4096,
	HEADER = 8 + 28,
	RECORD = (HEADER + PAYLOAD + 7) / 8 * 8,
	RECORDS = RING / RECORD,
	MESSAGE = 16, /* records of a 64 KiB message */
};

struct shared {
	_Alignas(64) _Atomic uint64_t tail; /* records published */
	_Alignas(64) _Atomic uint64_t head; /* records taken */
	_Alignas(64) _Atomic int stop;
};

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2;
	if (secs <= 0 || secs > 60) {
		fprintf(stderr, "usage: shm-ceiling SECONDS (0 < SECONDS <= 60)\n");
		return 2;
	}
	struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	char *ring = mmap(NULL, RING, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	char *own = aligned_alloc(4096, MESSAGE * PAYLOAD);
	if (s == MAP_FAILED || ring == MAP_FAILED || !own) {
		perror("shm-ceiling: memory");
		return 1;
	}
	memset(ring, 0, RING);
	memset(own, 0x5a, MESSAGE * PAYLOAD);
	pid_t child = fork();
	if (child < 0) {
		perror("shm-ceiling: fork");
		return 1;
	}
	if (child == 0) {
		/* The sender. */
		uint64_t tail = 0, head = 0; /* head: as last read */
		double end = now() + secs;
		while (now() < end) {
			for (int i = 0; i < MESSAGE; i++) {
				while (tail - head >= RECORDS)
					head = atomic_load_explicit(&s->head, memory_order_acquire);
				char *r = ring + (tail % RECORDS) * RECORD;
				memcpy(r, &tail, sizeof tail);
				memcpy(r + HEADER, own + i * PAYLOAD, PAYLOAD);
				atomic_store_explicit(&s->tail, ++tail, memory_order_release);
			}
		}
		atomic_store(&s->stop, 1);
		_exit(0);
	}
	/* The receiver: counts from its first record. */
	uint64_t head = 0, first = 0;
	double t0 = 0, t1 = 0;
	for (;;) {
		uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
		if (tail == head) {
			if (atomic_load(&s->stop) && atomic_load(&s->tail) == head)
				break;
			continue;
		}
		if (!t0) {
			t0 = now();
			first = head;
		}
		/* Room goes back a message at a time: a sender that waits for a
		 * whole batch to be copied out alternates with the receiver
		 * instead of working beside it (half the rate). */
		for (; head < tail; head++) {
			char *r = ring + (head % RECORDS) * RECORD;
			memcpy(own + (head % MESSAGE) * PAYLOAD, r + HEADER, PAYLOAD);
			if ((head + 1) % MESSAGE == 0)
				atomic_store_explicit(&s->head, head + 1, memory_order_release);
		}
		atomic_store_explicit(&s->head, head, memory_order_release);
		t1 = now();
	}
	waitpid(child, NULL, 0);
	if (t1 <= t0) {
		fprintf(stderr, "shm-ceiling: nothing received\n");
		return 1;
	}
	double mib = (double)(head - first) * PAYLOAD / (t1 - t0) / 1048576;
	printf("%.0f MiB/s received through a shared ring (two copies per byte, %.1f s)\n", mib, t1 - t0);
	return 0;
}
