/* The C ABI of the drop-in libibverbs.so.1, driven the way C programs drive
 * it: bad input gets the documented error (never a crash), and data moves
 * through every path of the header: ibv_post_send/recv, the ibv_wr_* builders
 * of ibv_qp_ex, ibv_cq_ex poll-by-parts, completion channels with poll(2),
 * and async events. Prints "ok" and exits 0 when every check passed. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <net/if.h>

#include "check.h"

enum { LEN = 8192, MTU_BYTES = 1024 };

static void connect_rc(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid)
{
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
	CHECK(qp->state == IBV_QPS_INIT, "qp->state %d", qp->state);
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 100;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	/* Missing DEST_QPN first: EINVAL, state unchanged. */
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_RQ_PSN |
				    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == EINVAL, "missing DEST_QPN");
	CHECK(qp->state == IBV_QPS_INIT, "refused modify changed state");
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 100;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
	CHECK(qp->state == IBV_QPS_RTS, "qp->state %d", qp->state);
}

/* Polls the plain way until one completion arrives (bounded). */
static struct ibv_wc wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (long i = 0; i < 200000000L; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		MUST(n >= 0);
		if (n == 1)
			return wc;
	}
	fprintf(stderr, "FATAL: no completion\n");
	exit(2);
}

static void bad_input(struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_port_attr port;
	errno = 0;
	CHECK(ibv_alloc_pd(NULL) == NULL && errno == EINVAL, "alloc_pd(NULL) errno %d", errno);
	CHECK(ibv_dealloc_pd(NULL) == EINVAL, "dealloc_pd(NULL)");
	CHECK(ibv_query_port(ctx, 2, &port) == EINVAL, "query_port(2)");
	CHECK(ibv_query_device(ctx, NULL) == EINVAL, "query_device(NULL)");
	errno = 0;
	CHECK(ibv_create_cq(ctx, 0, NULL, NULL, 0) == NULL && errno == EINVAL, "create_cq(0) errno %d", errno);
	errno = 0;
	CHECK(ibv_create_cq(ctx, 1 << 30, NULL, NULL, 0) == NULL && errno == EINVAL, "create_cq(huge) errno %d", errno);
	errno = 0;
	CHECK(ibv_create_cq(ctx, 4, NULL, NULL, 7) == NULL && errno == EINVAL, "bad comp_vector errno %d", errno);
	char buf[64];
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL,
	      "REMOTE_WRITE without LOCAL_WRITE errno %d", errno);
	errno = 0;
	CHECK(ibv_reg_mr(NULL, buf, sizeof buf, 0) == NULL && errno == EINVAL, "reg_mr(NULL pd)");
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 99, &gid) == -1, "query_gid beyond the table");
	struct ibv_gid_entry entry;
	CHECK(ibv_query_gid_ex(ctx, 1, 99, &entry, 0) != 0, "query_gid_ex beyond the table");
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &entry, 0) == 0 && entry.gid_type == IBV_GID_TYPE_ROCE_V2, "gid_ex type");
	CHECK(ibv_query_gid_table(ctx, &entry, 0, 0) == -EINVAL, "gid table in 0 entries");
	/* The GID's net device, as rdma-core reports the kernel's gid_attr->ndev:
	 * a loopback address is on lo. */
	MUST(ibv_query_gid(ctx, 1, 0, &gid) == 0);
	if (gid.raw[10] == 0xff && gid.raw[11] == 0xff && gid.raw[12] == 127)
		CHECK(entry.ndev_ifindex == if_nametoindex("lo"), "gid_ex ndev_ifindex %u is lo's",
		      entry.ndev_ifindex);
	struct ibv_port_attr gpa;
	MUST(ibv_query_port(ctx, 1, &gpa) == 0);
	struct ibv_gid_entry table[8];
	ssize_t ng = ibv_query_gid_table(ctx, table, 8, 0);
	CHECK(ng == gpa.gid_tbl_len, "gid table: %zd entries, gid_tbl_len %d", ng, gpa.gid_tbl_len);
	for (ssize_t i = 0; i < ng && i < 8; i++)
		CHECK(table[i].gid_index == (uint32_t)i && table[i].port_num == 1 &&
			      table[i].gid_type == IBV_GID_TYPE_ROCE_V2 && table[i].ndev_ifindex != 0,
		      "gid table entry %zd: index %u port %u type %u ndev %u", i, table[i].gid_index, table[i].port_num,
		      table[i].gid_type, table[i].ndev_ifindex);
	CHECK(ng < 1 || (memcmp(&table[0].gid, &gid, sizeof gid) == 0 && table[0].ndev_ifindex == entry.ndev_ifindex),
	      "the table's entry 0 is gid_ex's");
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	MUST(cq);
	struct ibv_qp_init_attr init = {.send_cq = NULL, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	errno = 0;
	CHECK(ibv_create_qp(pd, &init) == NULL && errno == EINVAL, "create_qp without send_cq");
	init.send_cq = cq;
	/* XRC (spec/xrc.md): an initiator through a PD works (no receive side);
	 * a target needs an XRC domain. */
	init.qp_type = IBV_QPT_XRC_SEND;
	struct ibv_qp *xrc = ibv_create_qp(pd, &init);
	CHECK(xrc != NULL && init.cap.max_recv_wr == 0, "XRC_SEND through a PD");
	if (xrc)
		MUST(ibv_destroy_qp(xrc) == 0);
	init.qp_type = IBV_QPT_XRC_RECV;
	errno = 0;
	CHECK(ibv_create_qp(pd, &init) == NULL && errno == EINVAL, "XRC_RECV errno %d", errno);
	init.cap.max_recv_wr = 1;
	init.cap.max_recv_sge = 1;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_sge = 1000;
	errno = 0;
	CHECK(ibv_create_qp(pd, &init) == NULL && errno == EINVAL, "max_send_sge 1000 errno %d", errno);
	init.cap.max_send_sge = 1;
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	MUST(qp);
	CHECK(init.cap.max_send_wr >= 1 && init.cap.max_recv_wr >= 1, "granted caps written back");
	CHECK(ibv_destroy_cq(cq) == EBUSY, "destroy a CQ in use");
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc a PD in use");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS};
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "RESET->RTS");
	CHECK(ibv_modify_qp(qp, &a, 1 << 30) == EOPNOTSUPP || ibv_modify_qp(qp, &a, 1 << 30) == EINVAL, "unknown mask bit");
	CHECK(ibv_modify_qp(qp, NULL, IBV_QP_STATE) == EINVAL, "modify NULL attr");
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = 0};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = -1, .opcode = IBV_WR_SEND}, *bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "num_sge -1");
	wr.num_sge = 1;
	bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "post_send in RESET");
	wr.opcode = 99;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL, "unknown opcode");
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = NULL, .num_sge = 1}, *rbad = NULL;
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == EINVAL && rbad == &rwr, "post_recv with NULL sg_list");
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	MUST(ch);
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 4, NULL, ch, 0);
	MUST(cq2);
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "destroy a channel in use");
	CHECK(ibv_destroy_cq(cq2) == 0, "destroy cq2");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	CHECK(ibv_destroy_qp(qp) == 0, "destroy qp");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	CHECK(strcmp(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded") == 0, "status str");
	CHECK(strcmp(ibv_event_type_str(IBV_EVENT_SQ_DRAINED), "send queue drained") == 0, "event str");
	CHECK(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125 && mbps_to_ibv_rate(103125) == IBV_RATE_100_GBPS, "rates");
}

/* Each context has its own async fd and queue, as each ibv_open_device has
 * its own file in the kernel. A library that opens the device again (librdmacm
 * does) leaves the first context's O_NONBLOCK alone, so its handler gets
 * EAGAIN instead of blocking (UCX's async thread relies on it); and an event
 * of one context's QP reaches that context only. */
static void async_events_per_context(struct ibv_device *dev, union ibv_gid gid)
{
	struct ibv_context *c1 = ibv_open_device(dev);
	MUST(c1);
	MUST(fcntl(c1->async_fd, F_SETFL, fcntl(c1->async_fd, F_GETFL) | O_NONBLOCK) == 0);
	struct ibv_context *c2 = ibv_open_device(dev);
	MUST(c2);
	CHECK(c1->async_fd != c2->async_fd, "one async fd per context");
	CHECK(fcntl(c1->async_fd, F_GETFL) & O_NONBLOCK, "another open cleared O_NONBLOCK");
	CHECK(!(fcntl(c2->async_fd, F_GETFL) & O_NONBLOCK), "a new context's async fd blocks");
	struct ibv_async_event ev;
	errno = 0;
	CHECK(ibv_get_async_event(c1, &ev) == -1 && errno == EAGAIN, "non-blocking and empty: EAGAIN, errno %d", errno);

	struct ibv_pd *pd = ibv_alloc_pd(c2);
	MUST(pd);
	struct ibv_cq *cq = ibv_create_cq(c2, 4, NULL, NULL, 0);
	MUST(cq);
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	MUST(qp);
	connect_rc(qp, qp->qp_num, gid);
	struct ibv_qp_attr d = {.qp_state = IBV_QPS_SQD, .en_sqd_async_notify = 1};
	MUST(ibv_modify_qp(qp, &d, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY) == 0);
	struct pollfd pfd = {.fd = c2->async_fd, .events = POLLIN};
	MUST(poll(&pfd, 1, 10000) == 1);
	MUST(ibv_get_async_event(c2, &ev) == 0);
	CHECK(ev.event_type == IBV_EVENT_SQ_DRAINED && ev.element.qp == qp, "c2 gets its QP's SQ_DRAINED");
	ibv_ack_async_event(&ev);
	pfd.fd = c1->async_fd;
	CHECK(poll(&pfd, 1, 0) == 0, "c1's async fd readable for c2's event");
	errno = 0;
	CHECK(ibv_get_async_event(c1, &ev) == -1 && errno == EAGAIN, "c1 got c2's event, errno %d", errno);
	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "c2's objects");
	CHECK(ibv_close_device(c2) == 0 && ibv_close_device(c1) == 0, "close both");
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	MUST(list && n >= 1 && list[n] == NULL);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	MUST(ctx);
	CHECK(ctx->device == list[0], "ctx->device");
	CHECK(ctx->async_fd >= 0 && ctx->cmd_fd >= 0, "real fds");
	struct ibv_device_attr_ex dex;
	CHECK(ibv_query_device_ex(ctx, NULL, &dex) == 0 && dex.orig_attr.phys_port_cnt == 1, "query_device_ex");
	struct ibv_port_attr port;
	CHECK(ibv_query_port(ctx, 1, &port) == 0 && port.state == IBV_PORT_ACTIVE &&
	      port.link_layer == IBV_LINK_LAYER_ETHERNET, "query_port");
	union ibv_gid gid;
	MUST(ibv_query_gid(ctx, 1, 0, &gid) == 0);
	CHECK(gid.raw[10] == 0xff && gid.raw[11] == 0xff, "IPv4-mapped GID");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	MUST(pd);

	bad_input(ctx, pd);
	async_events_per_context(list[0], gid);

	/* Two RC QPs on this device; A's send CQ is an ibv_cq_ex on a channel. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	MUST(ch);
	struct ibv_cq_init_attr_ex cqa = {.cqe = 64, .channel = ch,
					  .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM};
	struct ibv_cq_init_attr_ex tma = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_TM_INFO};
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &tma) == NULL && errno == EOPNOTSUPP, "tag-matching info refused, errno %d", errno);
	struct ibv_cq_ex *scq_ex = ibv_create_cq_ex(ctx, &cqa);
	MUST(scq_ex);
	/* A non-blocking channel fd with no event: EAGAIN at once. */
	int fl = fcntl(ch->fd, F_GETFL);
	MUST(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0);
	struct ibv_cq *none_cq;
	void *none_ctx;
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &none_cq, &none_ctx) == -1 && errno == EAGAIN, "non-blocking get_cq_event errno %d", errno);
	MUST(fcntl(ch->fd, F_SETFL, fl) == 0);
	struct ibv_cq *scq = ibv_cq_ex_to_cq(scq_ex);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	MUST(rcq);
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2, .max_inline_data = 64},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
				  IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
				  IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
	};
	struct ibv_qp *a = ibv_create_qp_ex(ctx, &qa);
	MUST(a);
	struct ibv_qp_init_attr qb = {.send_cq = rcq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2}};
	struct ibv_qp *b = ibv_create_qp(pd, &qb);
	MUST(b);
	connect_rc(a, b->qp_num, gid);
	connect_rc(b, a->qp_num, gid);
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	MUST(ibv_query_qp(a, &qattr, IBV_QP_STATE | IBV_QP_DEST_QPN, &qinit) == 0);
	CHECK(qattr.qp_state == IBV_QPS_RTS && qattr.dest_qp_num == b->qp_num && qattr.path_mtu == IBV_MTU_1024 &&
	      qattr.max_rd_atomic == 4 && qinit.send_cq == scq && qinit.qp_type == IBV_QPT_RC, "query_qp");

	char *ma = aligned_alloc(4096, LEN), *mb = aligned_alloc(4096, LEN);
	MUST(ma && mb);
	memset(ma, 0, LEN);
	memset(mb, 0, LEN);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_mr *mra = ibv_reg_mr(pd, ma, LEN, acc), *mrb = ibv_reg_mr(pd, mb, LEN, acc);
	MUST(mra && mrb);
	CHECK(mra->addr == ma && mra->length == LEN && mra->lkey != mra->rkey, "mr fields");

	/* 1. SEND with immediate through the ibv_wr_* API, inline, into two SGEs. */
	struct ibv_sge rs[2] = {{(uintptr_t)mb, 10, mrb->lkey}, {(uintptr_t)mb + 100, 100, mrb->lkey}};
	struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = rs, .num_sge = 2}, *rbad;
	MUST(ibv_post_recv(b, &rwr, &rbad) == 0);
	struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(a);
	MUST(ax && &ax->qp_base == a);
	const char msg[] = "inline through ibv_wr_send_imm";
	MUST(ibv_req_notify_cq(scq, 0) == 0);
	ibv_wr_start(ax);
	ax->wr_id = 11;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(ax, htonl(0x1234));
	ibv_wr_set_inline_data(ax, (void *)msg, sizeof msg);
	MUST(ibv_wr_complete(ax) == 0);
	/* Event mode on the send CQ (armed before posting): wait on the fd with
	 * poll(2), then get the event. */
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	MUST(poll(&pfd, 1, 10000) == 1);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	MUST(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0);
	CHECK(ev_cq == scq, "event names the CQ");
	ibv_ack_cq_events(ev_cq, 1);
	struct ibv_poll_cq_attr pa = {0};
	int r;
	for (long i = 0; (r = ibv_start_poll(scq_ex, &pa)) == ENOENT && i < 100000000L; i++)
		;
	MUST(r == 0);
	CHECK(scq_ex->status == IBV_WC_SUCCESS && scq_ex->wr_id == 11 &&
	      ibv_wc_read_opcode(scq_ex) == IBV_WC_SEND && ibv_wc_read_qp_num(scq_ex) == a->qp_num,
	      "cq_ex send completion status %d wr_id %lu", scq_ex->status, (unsigned long)scq_ex->wr_id);
	CHECK(ibv_next_poll(scq_ex) == ENOENT, "one completion only");
	ibv_end_poll(scq_ex);
	struct ibv_wc wc = wait_wc(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 && wc.opcode == IBV_WC_RECV && wc.byte_len == sizeof msg &&
	      (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0x1234 && wc.qp_num == b->qp_num,
	      "recv wc: status %d len %u flags %x imm %x qp %u", wc.status, wc.byte_len, wc.wc_flags, ntohl(wc.imm_data), wc.qp_num);
	CHECK(memcmp(mb, msg, 10) == 0 && memcmp(mb + 100, msg + 10, sizeof msg - 10) == 0, "scattered bytes");

	/* An operation the QP type does not have (TSO is for UD and RAW_PACKET,
	 * ibv_post_send(3)): ibv_wr_complete says so, nothing is posted. */
	ibv_wr_start(ax);
	ax->wr_id = 12;
	ibv_wr_send_tso(ax, NULL, 0, 0);
	CHECK(ibv_wr_complete(ax) == EINVAL, "TSO on an RC QP refused");

	/* 2. RDMA WRITE of two SGEs with ibv_post_send, then READ it back. */
	for (int i = 0; i < LEN / 2; i++)
		ma[i] = (char)(i * 7);
	struct ibv_sge ws[2] = {{(uintptr_t)ma, 1000, mra->lkey}, {(uintptr_t)ma + 1000, 3000, mra->lkey}};
	struct ibv_send_wr w = {.wr_id = 21, .sg_list = ws, .num_sge = 2, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	w.wr.rdma.remote_addr = (uintptr_t)mb + 4096;
	w.wr.rdma.rkey = mrb->rkey;
	MUST(ibv_post_send(a, &w, &bad) == 0);
	for (long i = 0; (r = ibv_start_poll(scq_ex, &pa)) == ENOENT && i < 100000000L; i++)
		;
	MUST(r == 0);
	CHECK(scq_ex->status == IBV_WC_SUCCESS && scq_ex->wr_id == 21, "write wc");
	ibv_end_poll(scq_ex);
	CHECK(memcmp(mb + 4096, ma, 4000) == 0, "RDMA WRITE bytes");
	ibv_wr_start(ax);
	ax->wr_id = 22;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(ax, mrb->rkey, (uintptr_t)mb + 4096);
	ibv_wr_set_sge(ax, mra->lkey, (uintptr_t)ma + 4096, 4000);
	MUST(ibv_wr_complete(ax) == 0);
	for (long i = 0; (r = ibv_start_poll(scq_ex, &pa)) == ENOENT && i < 100000000L; i++)
		;
	MUST(r == 0);
	CHECK(scq_ex->status == IBV_WC_SUCCESS && scq_ex->wr_id == 22 && ibv_wc_read_byte_len(scq_ex) == 4000 &&
	      ibv_wc_read_opcode(scq_ex) == IBV_WC_RDMA_READ, "read wc");
	ibv_end_poll(scq_ex);
	CHECK(memcmp(ma + 4096, ma, 4000) == 0, "RDMA READ bytes");

	/* 3. Atomics: FETCH_ADD then CMP_SWP on B's first 8 bytes. */
	uint64_t *target = (uint64_t *)(mb + 8000);
	*target = 40;
	ibv_wr_start(ax);
	ax->wr_id = 31;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(ax, mrb->rkey, (uintptr_t)target, 2);
	ibv_wr_set_sge(ax, mra->lkey, (uintptr_t)ma + 8000, 8);
	ax->wr_id = 32;
	ibv_wr_atomic_cmp_swp(ax, mrb->rkey, (uintptr_t)target, 42, 7);
	ibv_wr_set_sge(ax, mra->lkey, (uintptr_t)ma + 8008, 8);
	MUST(ibv_wr_complete(ax) == 0);
	for (int k = 0; k < 2; k++) {
		for (long i = 0; (r = ibv_start_poll(scq_ex, &pa)) == ENOENT && i < 100000000L; i++)
			;
		MUST(r == 0);
		CHECK(scq_ex->status == IBV_WC_SUCCESS && scq_ex->wr_id == (uint64_t)(31 + k), "atomic wc %d", k);
		ibv_end_poll(scq_ex);
	}
	CHECK(*(uint64_t *)(ma + 8000) == 40 && *(uint64_t *)(ma + 8008) == 42 && *target == 7,
	      "atomics: fetched %lu, compared %lu, now %lu", (unsigned long)*(uint64_t *)(ma + 8000),
	      (unsigned long)*(uint64_t *)(ma + 8008), (unsigned long)*target);

	/* 4. SQD with en_sqd_async_notify on B: IBV_EVENT_SQ_DRAINED for B. */
	struct ibv_qp_attr d = {.qp_state = IBV_QPS_SQD, .en_sqd_async_notify = 1};
	{
		MUST(ibv_modify_qp(b, &d, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY) == 0);
		struct pollfd apfd = {.fd = ctx->async_fd, .events = POLLIN};
		MUST(poll(&apfd, 1, 10000) == 1);
		struct ibv_async_event ev;
		for (;;) {
			MUST(ibv_get_async_event(ctx, &ev) == 0);
			ibv_ack_async_event(&ev);
			if (ev.event_type == IBV_EVENT_SQ_DRAINED)
				break;
		}
		CHECK(ev.element.qp == b, "SQ_DRAINED names B");
		CHECK(b->events_completed == 1 || b->events_completed >= 1, "ack counted");
	}

	/* 5. A bad rkey: REM_ACCESS_ERR, B's memory untouched, A in ERR. */
	w.wr_id = 41;
	w.wr.rdma.rkey = mrb->rkey ^ 0x100;
	MUST(ibv_post_send(a, &w, &bad) == 0);
	for (long i = 0; (r = ibv_start_poll(scq_ex, &pa)) == ENOENT && i < 100000000L; i++)
		;
	MUST(r == 0);
	CHECK(scq_ex->status == IBV_WC_REM_ACCESS_ERR && scq_ex->wr_id == 41, "bad rkey status %d", scq_ex->status);
	ibv_end_poll(scq_ex);
	MUST(ibv_query_qp(a, &qattr, IBV_QP_STATE, &qinit) == 0);
	CHECK(qattr.qp_state == IBV_QPS_ERR && a->state == IBV_QPS_ERR, "A in ERR after REM_ACCESS_ERR");

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy qps");
	CHECK(ibv_dereg_mr(mra) == 0 && ibv_dereg_mr(mrb) == 0, "dereg");
	CHECK(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0, "destroy cqs");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc pd");
	CHECK(ibv_close_device(ctx) == 0, "close");
	ibv_free_device_list(list);
	free(ma);
	free(mb);
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
