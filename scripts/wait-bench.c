// UDP ping-pong between two processes on loopback, both sides waiting the same
// way: ppoll then recvmmsg, epoll_wait then recvmmsg, a blocking recvmmsg, or an
// io_uring multishot receive (raw syscalls, a provided-buffer ring). A benchmark
// for spec/performance.md section 8.3, not a test. Build and run:
//   gcc -O2 -o /tmp/wait-bench scripts/wait-bench.c
//   for m in ppoll epoll block uring; do /tmp/wait-bench $m 10000 24210; done
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <errno.h>
#include <poll.h>
#include <time.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <linux/io_uring.h>

static int mode; // 0 ppoll 1 epoll 2 block 3 uring
static int sock, efd, ep;
static char rbuf[2048];

// ---- io_uring (raw) ----
static int ring_fd;
static unsigned *sq_head, *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
static struct io_uring_sqe *sqes;
static struct io_uring_cqe *cqes;
static struct io_uring_buf_ring *br;
#define NBUF 64
#define BSZ 2048
static char *bufs;
static unsigned br_tail;

static void uring_init(void) {
  struct io_uring_params p; memset(&p, 0, sizeof p);
  ring_fd = syscall(__NR_io_uring_setup, 64, &p);
  if (ring_fd < 0) { perror("io_uring_setup"); exit(2); }
  size_t sq_sz = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  size_t cq_sz = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
  char *sq = mmap(0, sq_sz, PROT_READ|PROT_WRITE, MAP_SHARED|MAP_POPULATE, ring_fd, IORING_OFF_SQ_RING);
  char *cq = mmap(0, cq_sz, PROT_READ|PROT_WRITE, MAP_SHARED|MAP_POPULATE, ring_fd, IORING_OFF_CQ_RING);
  sqes = mmap(0, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ|PROT_WRITE, MAP_SHARED|MAP_POPULATE, ring_fd, IORING_OFF_SQES);
  if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) { perror("mmap"); exit(2); }
  sq_head = (unsigned*)(sq + p.sq_off.head); sq_tail = (unsigned*)(sq + p.sq_off.tail);
  sq_mask = (unsigned*)(sq + p.sq_off.ring_mask); sq_array = (unsigned*)(sq + p.sq_off.array);
  cq_head = (unsigned*)(cq + p.cq_off.head); cq_tail = (unsigned*)(cq + p.cq_off.tail);
  cq_mask = (unsigned*)(cq + p.cq_off.ring_mask); cqes = (struct io_uring_cqe*)(cq + p.cq_off.cqes);
  // provided buffer ring, group 1
  br = mmap(0, NBUF * sizeof(struct io_uring_buf), PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  bufs = malloc(NBUF * BSZ);
  struct io_uring_buf_reg reg; memset(&reg, 0, sizeof reg);
  reg.ring_addr = (uint64_t)(uintptr_t)br; reg.ring_entries = NBUF; reg.bgid = 1;
  if (syscall(__NR_io_uring_register, ring_fd, IORING_REGISTER_PBUF_RING, &reg, 1) < 0) { perror("register pbuf ring"); exit(2); }
  for (int i = 0; i < NBUF; i++) {
    struct io_uring_buf *b = &br->bufs[i];
    b->addr = (uint64_t)(uintptr_t)(bufs + i * BSZ); b->len = BSZ; b->bid = i;
  }
  br_tail = NBUF;
  __atomic_store_n(&br->tail, br_tail, __ATOMIC_RELEASE);
}
static void uring_arm(void) {
  unsigned tail = *sq_tail, idx = tail & *sq_mask;
  struct io_uring_sqe *s = &sqes[idx]; memset(s, 0, sizeof *s);
  s->opcode = IORING_OP_RECV; s->fd = sock; s->flags = IOSQE_BUFFER_SELECT; s->buf_group = 1;
  s->ioprio = IORING_RECV_MULTISHOT;
  sq_array[idx] = idx;
  __atomic_store_n(sq_tail, tail + 1, __ATOMIC_RELEASE);
}
static int to_submit;
// waits for one datagram; returns its length
static int uring_recv(void) {
  for (;;) {
    unsigned head = *cq_head, tail = __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE);
    if (head != tail) {
      struct io_uring_cqe *c = &cqes[head & *cq_mask];
      int res = c->res; unsigned flags = c->flags;
      __atomic_store_n(cq_head, head + 1, __ATOMIC_RELEASE);
      if (!(flags & IORING_CQE_F_MORE)) { uring_arm(); to_submit = 1; }
      if (res < 0) { if (res == -ENOBUFS) continue; fprintf(stderr, "cqe res %d\n", res); exit(2); }
      unsigned bid = flags >> IORING_CQE_BUFFER_SHIFT;
      memcpy(rbuf, bufs + bid * BSZ, res);
      // give the buffer back
      struct io_uring_buf *b = &br->bufs[br_tail & (NBUF - 1)];
      b->addr = (uint64_t)(uintptr_t)(bufs + bid * BSZ); b->len = BSZ; b->bid = bid;
      br_tail++; __atomic_store_n(&br->tail, br_tail, __ATOMIC_RELEASE);
      return res;
    }
    int r = syscall(__NR_io_uring_enter, ring_fd, to_submit, 1, IORING_ENTER_GETEVENTS, NULL, 0);
    if (r < 0 && errno != EINTR) { perror("io_uring_enter"); exit(2); }
    to_submit = 0;
  }
}

static int recv_one(void) {
  struct mmsghdr m[8]; struct iovec iov[8]; static char b[8][2048];
  for (int i = 0; i < 8; i++) { iov[i].iov_base = b[i]; iov[i].iov_len = 2048; memset(&m[i].msg_hdr, 0, sizeof m[i].msg_hdr); m[i].msg_hdr.msg_iov = &iov[i]; m[i].msg_hdr.msg_iovlen = 1; }
  for (;;) {
    if (mode == 0) {
      struct pollfd f[2] = {{sock, POLLIN, 0}, {efd, POLLIN, 0}};
      if (ppoll(f, 2, NULL, NULL) < 0) continue;
    } else if (mode == 1) {
      struct epoll_event e[4];
      if (epoll_wait(ep, e, 4, -1) < 0) continue;
    } else if (mode == 3) {
      return uring_recv();
    }
    int n = recvmmsg(sock, m, mode == 2 ? 1 : 8, mode == 2 ? MSG_WAITFORONE : MSG_DONTWAIT, NULL);
    if (n > 0) { memcpy(rbuf, b[0], m[0].msg_len); return m[0].msg_len; }
    if (n < 0 && errno != EAGAIN && errno != EINTR) { perror("recvmmsg"); exit(2); }
  }
}

static int cmp(const void *a, const void *b) { double x = *(double*)a, y = *(double*)b; return x < y ? -1 : x > y; }
static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }

static void setup(int port, int peer_port) {
  sock = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = {0}; a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(0x7f000001); a.sin_port = htons(port);
  if (bind(sock, (void*)&a, sizeof a) < 0) { perror("bind"); exit(2); }
  a.sin_port = htons(peer_port);
  if (connect(sock, (void*)&a, sizeof a) < 0) { perror("connect"); exit(2); }
  efd = eventfd(0, EFD_NONBLOCK);
  ep = epoll_create1(0);
  struct epoll_event e = {.events = EPOLLIN, .data.fd = sock}; epoll_ctl(ep, EPOLL_CTL_ADD, sock, &e);
  struct epoll_event e2 = {.events = EPOLLIN, .data.fd = efd}; epoll_ctl(ep, EPOLL_CTL_ADD, efd, &e2);
  if (mode == 3) { uring_init(); uring_arm(); to_submit = 1; }
}

int main(int argc, char **argv) {
  const char *m = argv[1]; int iters = atoi(argv[2]); int port = atoi(argv[3]);
  mode = !strcmp(m, "ppoll") ? 0 : !strcmp(m, "epoll") ? 1 : !strcmp(m, "block") ? 2 : 3;
  pid_t pid = fork();
  if (pid == 0) { // echo
    setup(port + 1, port);
    for (int i = 0; i < iters + 100; i++) { int n = recv_one(); send(sock, rbuf, n, 0); }
    _exit(0);
  }
  setup(port, port + 1);
  usleep(100000);
  double *rtt = malloc(sizeof(double) * iters);
  char msg[64] = {0};
  for (int i = 0; i < iters + 100; i++) {
    double t0 = now_us();
    send(sock, msg, 32, 0);
    recv_one();
    if (i >= 100) rtt[i - 100] = now_us() - t0;
  }
  waitpid(pid, NULL, 0);
  qsort(rtt, iters, sizeof(double), cmp);
  printf("%-6s rtt median %7.1f us  p99 %8.1f us  min %6.1f\n", m, rtt[iters / 2], rtt[iters * 99 / 100], rtt[0]);
  return 0;
}
