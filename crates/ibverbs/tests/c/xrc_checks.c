/* XRC through the C ABI of the drop-in libibverbs.so.1 (spec/xrc.md):
 * ibv_open_xrcd with a file (shared by inode, O_CREAT / O_EXCL, each errno),
 * XRC SRQs (ibv_create_srq_ex, ibv_get_srq_num), an XRC_SEND and an XRC_RECV
 * QP (ibv_create_qp_ex), messages to two SRQs through one target QP named by
 * wr.qp_type.xrc.remote_srqn and by ibv_wr_set_xrc_srqn, ibv_open_qp,
 * ibv_close_xrcd while used (EBUSY), a send to an SRQ of another XRC
 * domain (IBV_WC_REM_INV_REQ_ERR), whose IBV_EVENT_QP_REQ_ERR reaches the
 * creating context and a second one that opened the target QP (each naming
 * its own handle) but not a third, and the creator's handle going first.
 * Prints "ok" and exits 0 when every check passed. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <poll.h>
#include <infiniband/verbs.h>
#include "check.h"
#include "rc.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static union ibv_gid gid;

static struct ibv_xrcd *open_xrcd(int fd, int oflags, uint32_t mask)
{
	struct ibv_xrcd_init_attr a = {.comp_mask = mask, .fd = fd, .oflags = oflags};
	errno = 0;
	return ibv_open_xrcd(ctx, &a);
}

static struct ibv_srq *xrc_srq(struct ibv_xrcd *x, uint32_t mask)
{
	struct ibv_srq_init_attr_ex a = {.attr = {.max_wr = 8, .max_sge = 1}, .comp_mask = mask,
					 .srq_type = IBV_SRQT_XRC, .pd = pd, .xrcd = x, .cq = cq};
	errno = 0;
	return ibv_create_srq_ex(ctx, &a);
}

static void modify(struct ibv_qp *qp, enum ibv_qp_state s, uint32_t dest, int target)
{
	struct ibv_qp_attr a = {0};
	int mask = IBV_QP_STATE;
	a.qp_state = s;
	if (s == IBV_QPS_INIT) {
		a.port_num = 1;
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
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
		mask |= IBV_QP_SQ_PSN | IBV_QP_TIMEOUT;
		if (!target) {
			a.retry_cnt = 7;
			a.rnr_retry = 7;
			a.max_rd_atomic = 1;
			mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
		}
	}
	MUST(ibv_modify_qp(qp, &a, mask) == 0);
}

static void connect_pair(struct ibv_qp *send, struct ibv_qp *recv)
{
	modify(send, IBV_QPS_INIT, 0, 0);
	modify(recv, IBV_QPS_INIT, 0, 1);
	modify(send, IBV_QPS_RTR, recv->qp_num, 0);
	modify(recv, IBV_QPS_RTR, send->qp_num, 1);
	modify(send, IBV_QPS_RTS, 0, 0);
	modify(recv, IBV_QPS_RTS, 0, 1);
}

static struct ibv_qp *send_qp(void)
{
	struct ibv_qp_init_attr_ex a = {.send_cq = cq, .qp_type = IBV_QPT_XRC_SEND,
					.cap = {.max_send_wr = 8, .max_send_sge = 1},
					.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					.pd = pd, .send_ops_flags = IBV_QP_EX_WITH_SEND};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &a);
	MUST(qp);
	CHECK(a.cap.max_recv_wr == 0, "an XRC_SEND QP has no receive queue");
	return qp;
}

static struct ibv_qp *recv_qp(struct ibv_xrcd *x)
{
	struct ibv_qp_init_attr_ex a = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x};
	return ibv_create_qp_ex(ctx, &a);
}

static void domains(int fd)
{
	struct ibv_xrcd *x = open_xrcd(fd, 0, IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS);
	CHECK(!x && errno == EAGAIN, "no XRCD for the file, no O_CREAT: errno %d", errno);
	struct ibv_xrcd *x1 = open_xrcd(fd, O_CREAT, IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS);
	MUST(x1);
	struct ibv_xrcd *x2 = open_xrcd(fd, 0, IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS);
	CHECK(x2 != NULL, "the file's XRCD is shared");
	x = open_xrcd(fd, O_CREAT | O_EXCL, IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS);
	CHECK(!x && errno == EINVAL, "O_EXCL on an existing XRCD: errno %d", errno);
	x = open_xrcd(fd, O_CREAT, IBV_XRCD_INIT_ATTR_FD);
	CHECK(!x && errno == EINVAL, "comp_mask without OFLAGS: errno %d", errno);
	x = open_xrcd(fd, O_CREAT, 7);
	CHECK(!x && errno == EOPNOTSUPP, "reserved comp_mask bit: errno %d", errno);
	x = open_xrcd(1000, O_CREAT, IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS);
	CHECK(!x && errno == EBADF, "a closed fd: errno %d", errno);

	/* A target QP made through one open is opened through the other. */
	struct ibv_qp *t = recv_qp(x1);
	MUST(t);
	struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
				      .qp_num = t->qp_num, .xrcd = x2, .qp_type = IBV_QPT_XRC_RECV};
	struct ibv_qp *o = ibv_open_qp(ctx, &oa);
	MUST(o);
	CHECK(o->qp_num == t->qp_num, "the same QP");
	oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD;
	errno = 0;
	CHECK(!ibv_open_qp(ctx, &oa) && errno == EINVAL, "open_qp without TYPE: errno %d", errno);
	CHECK(ibv_close_xrcd(x1) == EBUSY, "its target QP keeps the open busy");
	MUST(ibv_destroy_qp(t) == 0);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(o, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RESET,
	      "the opened handle keeps the QP");
	MUST(ibv_destroy_qp(o) == 0);
	CHECK(ibv_close_xrcd(x1) == 0, "unused: closes");
	CHECK(ibv_close_xrcd(x2) == 0, "the last open of the file");
	x = open_xrcd(fd, 0, IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS);
	CHECK(!x && errno == EAGAIN, "the domain went with its last open: errno %d", errno);
}

/* The next async event of `c` within `ms` (acknowledged); 0 if none came. */
static int async_event(struct ibv_context *c, int ms, struct ibv_async_event *ev)
{
	struct pollfd p = {.fd = c->async_fd, .events = POLLIN};
	ev->event_type = -1;
	if (poll(&p, 1, ms) != 1 || ibv_get_async_event(c, ev) != 0)
		return 0;
	ibv_ack_async_event(ev);
	return 1;
}

static void post_recv(struct ibv_srq *srq, uint64_t id, char *buf, struct ibv_mr *mr)
{
	struct ibv_sge sge = {(uintptr_t)buf, 64, mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;
	MUST(ibv_post_srq_recv(srq, &wr, &bad) == 0);
}

static void traffic(int fd)
{
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	MUST(mr);
	struct ibv_xrcd *x = open_xrcd(fd, O_CREAT, IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS);
	MUST(x);
	struct ibv_srq *bad = xrc_srq(x, IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD);
	CHECK(!bad && errno == EINVAL, "an XRC SRQ without a CQ: errno %d", errno);
	uint32_t all = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	struct ibv_srq *s1 = xrc_srq(x, all), *s2 = xrc_srq(x, all);
	MUST(s1 && s2);
	uint32_t n1, n2;
	MUST(ibv_get_srq_num(s1, &n1) == 0 && ibv_get_srq_num(s2, &n2) == 0);
	CHECK(n1 != n2, "two SRQ numbers");
	struct ibv_qp *snd = send_qp(), *rcv = recv_qp(x);
	MUST(rcv);
	CHECK(!rcv->pd && !rcv->send_cq && !rcv->recv_cq, "a target QP has no PD or CQs");
	connect_pair(snd, rcv);
	post_recv(s1, 1, buf + 1024, mr);
	post_recv(s2, 2, buf + 2048, mr);

	/* ibv_post_send with wr.qp_type.xrc.remote_srqn: to SRQ 2. */
	strcpy(buf, "to the second");
	struct ibv_sge sge = {(uintptr_t)buf, 14, mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 10, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *badwr;
	wr.qp_type.xrc.remote_srqn = n2;
	MUST(ibv_post_send(snd, &wr, &badwr) == 0);
	int sent = 0, got2 = 0;
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc = wait_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS, "status %d", wc.status);
		if (wc.wr_id == 10)
			sent = 1;
		if (wc.wr_id == 2) {
			got2 = 1;
			CHECK(wc.qp_num == rcv->qp_num && wc.byte_len == 14, "the target QP reports it");
		}
	}
	CHECK(sent && got2 && strcmp(buf + 2048, "to the second") == 0, "delivered to SRQ 2");

	/* ibv_wr_set_xrc_srqn: to SRQ 1. */
	strcpy(buf, "to the first");
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(snd);
	ibv_wr_start(qx);
	qx->wr_id = 11;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_xrc_srqn(qx, n1);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 13);
	MUST(ibv_wr_complete(qx) == 0);
	int got1 = 0;
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc = wait_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS, "status %d", wc.status);
		got1 |= wc.wr_id == 1;
	}
	CHECK(got1 && strcmp(buf + 1024, "to the first") == 0, "delivered to SRQ 1");

	CHECK(ibv_close_xrcd(x) == EBUSY, "SRQs and a target QP use it");

	/* A second context holds the target QP too (ibv_open_qp through its own
	 * open of the same file); a third holds nothing. */
	struct ibv_context *ctx2 = ibv_open_device(ctx->device), *ctx3 = ibv_open_device(ctx->device);
	MUST(ctx2 && ctx3);
	struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					.fd = fd, .oflags = 0};
	struct ibv_xrcd *x2 = ibv_open_xrcd(ctx2, &xa);
	MUST(x2);
	struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
						   IBV_QP_OPEN_ATTR_TYPE,
				      .qp_num = rcv->qp_num, .xrcd = x2, .qp_type = IBV_QPT_XRC_RECV};
	struct ibv_qp *held = ibv_open_qp(ctx2, &oa);
	MUST(held);

	/* An SRQ of another XRC domain: the target refuses, the sender's WR fails. */
	struct ibv_xrcd *other = open_xrcd(-1, O_CREAT, IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS);
	MUST(other);
	struct ibv_srq *s3 = xrc_srq(other, all);
	MUST(s3);
	uint32_t n3;
	MUST(ibv_get_srq_num(s3, &n3) == 0);
	post_recv(s3, 3, buf + 3072, mr);
	wr.wr_id = 12;
	wr.qp_type.xrc.remote_srqn = n3;
	MUST(ibv_post_send(snd, &wr, &badwr) == 0);
	struct ibv_wc wc = wait_wc(cq);
	CHECK(wc.wr_id == 12 && wc.status == IBV_WC_REM_INV_REQ_ERR, "wr %llu status %d",
	      (unsigned long long)wc.wr_id, wc.status);
	struct ibv_wc rest;
	while (ibv_poll_cq(cq, 1, &rest) == 1)
		CHECK(rest.wr_id != 3, "SRQ 3 of the other domain got nothing");
	/* The target QP's QP_REQ_ERR reaches each context holding it, naming
	 * that context's own handle (the kernel's open_list), and no other. */
	struct ibv_async_event ev;
	CHECK(async_event(ctx, 10000, &ev) && ev.event_type == IBV_EVENT_QP_REQ_ERR &&
		      ev.element.qp == rcv, "the creator's context: event %d", ev.event_type);
	CHECK(async_event(ctx2, 10000, &ev) && ev.event_type == IBV_EVENT_QP_REQ_ERR &&
		      ev.element.qp == held, "the opener's context: event %d", ev.event_type);
	CHECK(!async_event(ctx3, 100, &ev), "a context without a handle: event %d", ev.event_type);

	/* The creator's handle goes first: the opener's keeps the QP, and the
	 * creator's domain closes once its SRQs are gone. */
	MUST(ibv_destroy_qp(snd) == 0 && ibv_destroy_qp(rcv) == 0);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(held, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR,
	      "the opened handle keeps the QP");
	MUST(ibv_destroy_srq(s1) == 0 && ibv_destroy_srq(s2) == 0 && ibv_destroy_srq(s3) == 0);
	CHECK(ibv_close_xrcd(x) == 0 && ibv_close_xrcd(other) == 0, "unused: closed");
	CHECK(ibv_close_xrcd(x2) == EBUSY, "the opened handle counts on its own open");
	MUST(ibv_destroy_qp(held) == 0);
	CHECK(ibv_close_xrcd(x2) == 0, "the last handle gone: closed");
	MUST(ibv_close_device(ctx2) == 0 && ibv_close_device(ctx3) == 0);
	MUST(ibv_dereg_mr(mr) == 0);
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	MUST(list && n >= 1);
	ctx = ibv_open_device(list[0]);
	MUST(ctx);
	MUST(ibv_query_gid(ctx, 1, 0, &gid) == 0);
	struct ibv_device_attr da;
	MUST(ibv_query_device(ctx, &da) == 0);
	CHECK(da.device_cap_flags & IBV_DEVICE_XRC, "IBV_DEVICE_XRC advertised");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	MUST(pd && cq);

	char path[] = "/tmp/softverbs-xrcd-XXXXXX";
	int fd = mkstemp(path);
	MUST(fd >= 0);
	unlink(path);
	domains(fd);
	traffic(fd);
	close(fd);

	MUST(ibv_destroy_cq(cq) == 0);
	MUST(ibv_dealloc_pd(pd) == 0);
	MUST(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	if (failures)
		return 1;
	printf("ok\n");
	return 0;
}
