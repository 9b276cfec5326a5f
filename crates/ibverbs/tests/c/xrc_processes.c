/* XRC across processes (spec/xrc-processes.md), one side per run:
 * `xrc_processes owner <file>` opens an XRC domain on <file>, creates an XRC
 * SRQ and an XRC_RECV QP and prints "QPN <qpn> SRQN <srqn>"; reads "SEND
 * <qpn>" (the other process's XRC_SEND QP), connects its target QP to it,
 * posts a receive on its SRQ and prints "READY"; reads "DONE" and checks that
 * nothing reached its SRQ and that the target QP went to ERR.
 * `xrc_processes opener <file>` reads the owner's line, opens an XRC domain on
 * the same file, creates its own XRC SRQ (its number differs from the
 * owner's: SRQ numbers, like QPNs, are per process of an address), fails to
 * ibv_open_qp the owner's target QP (EINVAL: XRC domains are not shared
 * between processes), then sends through the owner's target QP to its own
 * SRQ number: an invalid request (IBV_WC_REM_INV_REQ_ERR), never delivered
 * to the owner's SRQ. Each prints "ok" last and exits 0 when every check
 * passed. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "check.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static union ibv_gid gid;

static void modify(struct ibv_qp *qp, enum ibv_qp_state s, uint32_t dest, int target)
{
	struct ibv_qp_attr a = {0};
	int mask = IBV_QP_STATE;
	a.qp_state = s;
	if (s == IBV_QPS_INIT) {
		a.port_num = 1;
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (s == IBV_QPS_RTR) {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = dest;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = gid;
		a.ah_attr.grh.hop_limit = 1;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (target) {
			a.max_dest_rd_atomic = 1;
			a.min_rnr_timer = 12;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	} else {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	MUST(ibv_modify_qp(qp, &a, mask) == 0);
}

static struct ibv_xrcd *open_xrcd(const char *path)
{
	int fd = open(path, O_RDONLY);
	MUST(fd >= 0);
	struct ibv_xrcd_init_attr a = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
				       .fd = fd, .oflags = O_CREAT};
	struct ibv_xrcd *x = ibv_open_xrcd(ctx, &a);
	MUST(x);
	close(fd);
	return x;
}

static struct ibv_srq *xrc_srq(struct ibv_xrcd *x, uint32_t *num)
{
	struct ibv_srq_init_attr_ex a = {.attr = {.max_wr = 8, .max_sge = 1},
					 .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
						      IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
					 .srq_type = IBV_SRQT_XRC, .pd = pd, .xrcd = x, .cq = cq};
	struct ibv_srq *s = ibv_create_srq_ex(ctx, &a);
	MUST(s);
	MUST(ibv_get_srq_num(s, num) == 0);
	return s;
}

static int poll_for(struct ibv_wc *wc, double secs)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		MUST(n >= 0);
		if (n == 1)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 > secs)
			return 0;
	}
}

static void owner(const char *path)
{
	static char buf[256];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	MUST(mr);
	struct ibv_xrcd *x = open_xrcd(path);
	uint32_t srqn;
	struct ibv_srq *srq = xrc_srq(x, &srqn);
	struct ibv_qp_init_attr_ex qa = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x};
	struct ibv_qp *tgt = ibv_create_qp_ex(ctx, &qa);
	MUST(tgt);
	printf("QPN %u SRQN %u\n", tgt->qp_num, srqn);
	fflush(stdout);
	unsigned send_qpn;
	MUST(scanf(" SEND %u", &send_qpn) == 1);
	modify(tgt, IBV_QPS_INIT, 0, 1);
	modify(tgt, IBV_QPS_RTR, send_qpn, 1);
	struct ibv_sge s = {(uintptr_t)buf, sizeof buf, mr->lkey};
	struct ibv_recv_wr r = {.wr_id = 7, .sg_list = &s, .num_sge = 1}, *bad;
	MUST(ibv_post_srq_recv(srq, &r, &bad) == 0);
	printf("READY\n");
	fflush(stdout);
	char done[8];
	MUST(scanf(" %7s", done) == 1 && strcmp(done, "DONE") == 0);
	struct ibv_wc wc;
	CHECK(!poll_for(&wc, 0.3), "the other process's message reached this SRQ: wr %llu status %d",
	      (unsigned long long)wc.wr_id, wc.status);
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	MUST(ibv_query_qp(tgt, &qattr, IBV_QP_STATE, &qinit) == 0);
	CHECK(qattr.qp_state == IBV_QPS_ERR, "the target QP after an invalid request: state %d", qattr.qp_state);
	MUST(ibv_destroy_qp(tgt) == 0);
	MUST(ibv_destroy_srq(srq) == 0);
	MUST(ibv_close_xrcd(x) == 0);
	MUST(ibv_dereg_mr(mr) == 0);
}

static void opener(const char *path)
{
	static char buf[64] = "for my own SRQ";
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	MUST(mr);
	unsigned tgt_qpn, their_srqn;
	MUST(scanf(" QPN %u SRQN %u", &tgt_qpn, &their_srqn) == 2);
	struct ibv_xrcd *x = open_xrcd(path);
	uint32_t srqn;
	struct ibv_srq *srq = xrc_srq(x, &srqn);
	CHECK(srqn != their_srqn, "SRQ numbers of two processes of one address: both %u", srqn);

	/* The other process's target QP cannot be opened here. */
	struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
						   IBV_QP_OPEN_ATTR_TYPE,
				      .qp_num = tgt_qpn, .xrcd = x, .qp_type = IBV_QPT_XRC_RECV};
	errno = 0;
	struct ibv_qp *opened = ibv_open_qp(ctx, &oa);
	CHECK(opened == NULL && errno == EINVAL, "ibv_open_qp of another process's target QP: errno %d", errno);

	/* A send through its target QP to this process's SRQ number: refused. */
	struct ibv_qp_init_attr_ex sa = {.send_cq = cq, .qp_type = IBV_QPT_XRC_SEND,
					 .cap = {.max_send_wr = 4, .max_send_sge = 1},
					 .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd};
	struct ibv_qp *snd = ibv_create_qp_ex(ctx, &sa);
	MUST(snd);
	printf("SEND %u\n", snd->qp_num);
	fflush(stdout);
	char ready[8];
	MUST(scanf(" %7s", ready) == 1 && strcmp(ready, "READY") == 0);
	modify(snd, IBV_QPS_INIT, 0, 0);
	modify(snd, IBV_QPS_RTR, tgt_qpn, 0);
	modify(snd, IBV_QPS_RTS, 0, 0);
	struct ibv_sge s = {(uintptr_t)buf, 15, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.qp_type.xrc.remote_srqn = srqn;
	MUST(ibv_post_send(snd, &wr, &bad) == 0);
	struct ibv_wc wc;
	CHECK(poll_for(&wc, 10.0) && wc.wr_id == 9 && wc.status == IBV_WC_REM_INV_REQ_ERR,
	      "a send to this process's SRQ through another process's target QP: status %d", wc.status);
	printf("DONE\n");
	fflush(stdout);
	MUST(ibv_destroy_qp(snd) == 0);
	MUST(ibv_destroy_srq(srq) == 0);
	MUST(ibv_close_xrcd(x) == 0);
	MUST(ibv_dereg_mr(mr) == 0);
}

int main(int argc, char **argv)
{
	MUST(argc == 3);
	struct ibv_device **list = ibv_get_device_list(NULL);
	MUST(list && list[0]);
	ctx = ibv_open_device(list[0]);
	MUST(ctx);
	MUST(ibv_query_gid(ctx, 1, 0, &gid) == 0);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	MUST(pd && cq);
	if (strcmp(argv[1], "owner") == 0)
		owner(argv[2]);
	else
		opener(argv[2]);
	MUST(ibv_destroy_cq(cq) == 0);
	MUST(ibv_dealloc_pd(pd) == 0);
	MUST(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	if (failures)
		return 1;
	printf("ok\n");
	return 0;
}
