/* RAW_PACKET QPs and flow steering through the C ABI (spec/raw-packet.md).
 * `raw_checks eperm` (run without CAP_NET_RAW): ibv_create_qp of a RAW_PACKET
 * QP fails with EPERM. `raw_checks root`: the seed's modify rows, query, the
 * refusals of ibv_create_flow (UD QP, port, unsupported spec, malformed
 * size), of max_tso_header and of post_send (TSO, a frame shorter than a
 * header); then a frame the QP sends on the loopback interface comes back to
 * it through its flow, whole, while a frame to another MAC does not.
 * Prints "ok" and exits 0 when every check passed. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "check.h"

/* A multicast MAC of this process alone: every packet socket on lo sees
 * every frame, other runs' included. */
static uint8_t MAC[6] = {0x03, 0x5f, 0x76, 0, 0, 0};

/* The attribute and its one spec, laid out as verbs.h's structs are (20 +
 * 40 bytes, no padding between them). */
struct eth_flow {
	struct ibv_flow_attr attr;
	struct ibv_flow_spec_eth eth;
};

static struct eth_flow eth_rule(void)
{
	struct eth_flow f;
	memset(&f, 0, sizeof f);
	f.attr.type = IBV_FLOW_ATTR_NORMAL;
	f.attr.size = sizeof f;
	f.attr.num_of_specs = 1;
	f.attr.port = 1;
	f.eth.type = IBV_FLOW_SPEC_ETH;
	f.eth.size = sizeof f.eth;
	memcpy(f.eth.val.dst_mac, MAC, 6);
	memset(f.eth.mask.dst_mac, 0xff, 6);
	return f;
}

static struct ibv_qp *raw_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
					.sq_sig_all = 1,
					.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	return ibv_create_qp(pd, &init);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Polls for one completion for up to `secs` seconds. */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, double secs)
{
	double end = now_s() + secs;
	while (now_s() < end) {
		int n = ibv_poll_cq(cq, 1, wc);
		MUST(n >= 0);
		if (n == 1)
			return 1;
	}
	return 0;
}

static void send_frame(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, uint32_t len, uint64_t id)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
	MUST(ibv_post_send(qp, &wr, &bad) == 0);
}

/* Work queues and indirection tables: what query_device_ex says of RSS,
 * the WQ state machine, the refusals, and EBUSY for what is in use. */
static void wq_checks(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_device_attr_ex dev;
	MUST(ibv_query_device_ex(ctx, NULL, &dev) == 0);
	CHECK(dev.rss_caps.supported_qpts == 1u << IBV_QPT_RAW_PACKET && dev.rss_caps.rx_hash_function ==
	      IBV_RX_HASH_FUNC_TOEPLITZ && dev.rss_caps.rx_hash_fields_mask == 0xff &&
	      dev.rss_caps.max_rwq_indirection_table_size == 256 && dev.max_wq_type_rq > 0,
	      "rss_caps qpts %#x function %#x fields %#llx size %u", dev.rss_caps.supported_qpts,
	      dev.rss_caps.rx_hash_function, (unsigned long long)dev.rss_caps.rx_hash_fields_mask,
	      dev.rss_caps.max_rwq_indirection_table_size);
	CHECK(dev.tso_caps.max_tso == 0, "max_tso %u", dev.tso_caps.max_tso);

	struct ibv_wq_init_attr wa = {.wq_type = IBV_WQT_RQ, .max_wr = 4, .max_sge = 1, .pd = pd, .cq = cq,
				      .comp_mask = IBV_WQ_INIT_ATTR_FLAGS,
				      .create_flags = IBV_WQ_FLAGS_CVLAN_STRIPPING};
	errno = 0;
	CHECK(ibv_create_wq(ctx, &wa) == NULL && errno == EOPNOTSUPP, "CVLAN stripping errno %d", errno);
	wa.comp_mask = 0;
	struct ibv_wq *wq = ibv_create_wq(ctx, &wa);
	MUST(wq);
	CHECK(wq->state == IBV_WQS_RESET && wq->wq_num != 0, "state %d wq_num %u", wq->state, wq->wq_num);
	struct ibv_wq_attr m = {.attr_mask = IBV_WQ_ATTR_STATE, .wq_state = IBV_WQS_ERR};
	CHECK(ibv_modify_wq(wq, &m) == EINVAL, "RESET -> ERR");
	m.wq_state = IBV_WQS_RDY;
	CHECK(ibv_modify_wq(wq, &m) == 0 && wq->state == IBV_WQS_RDY, "RESET -> RDY");
	static char rb[256];
	struct ibv_mr *mr = ibv_reg_mr(pd, rb, sizeof rb, IBV_ACCESS_LOCAL_WRITE);
	MUST(mr);
	struct ibv_sge s = {.addr = (uintptr_t)rb, .length = sizeof rb, .lkey = mr->lkey};
	struct ibv_recv_wr r = {.wr_id = 77, .sg_list = &s, .num_sge = 1}, *bad;
	CHECK(ibv_post_wq_recv(wq, &r, &bad) == 0, "post_wq_recv");
	/* RDY -> ERR flushes the WQE to the WQ's CQ. */
	m.wq_state = IBV_WQS_ERR;
	CHECK(ibv_modify_wq(wq, &m) == 0, "RDY -> ERR");
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, 1, &wc) == 1 && wc.wr_id == 77 && wc.status == IBV_WC_WR_FLUSH_ERR &&
	      wc.qp_num == wq->wq_num, "flushed WQE: wr_id %llu status %d", (unsigned long long)wc.wr_id, wc.status);
	struct ibv_wq *tbl[2] = {wq, wq};
	struct ibv_rwq_ind_table_init_attr ta = {.log_ind_tbl_size = 1, .ind_tbl = tbl};
	struct ibv_rwq_ind_table *t = ibv_create_rwq_ind_table(ctx, &ta);
	MUST(t);
	CHECK(ibv_destroy_wq(wq) == EBUSY, "a WQ in a table");
	struct ibv_qp_init_attr_ex qa = {.qp_type = IBV_QPT_RAW_PACKET, .pd = pd, .rwq_ind_tbl = t,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE};
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &qa) == NULL && errno == EINVAL, "IND_TABLE without RX_HASH errno %d", errno);
	CHECK(ibv_destroy_rwq_ind_table(t) == 0, "destroy table");
	CHECK(ibv_destroy_wq(wq) == 0, "destroy WQ");
	MUST(ibv_dereg_mr(mr) == 0);
}

static void root_checks(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	wq_checks(ctx, pd, cq);
	struct ibv_qp *qp = raw_qp(pd, cq);
	MUST(qp);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "INIT without PORT");
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT) == 0);
	a.qp_state = IBV_QPS_RTR;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
	a.qp_state = IBV_QPS_RTS;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	MUST(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_PORT, &qi) == 0);
	CHECK(q.qp_state == IBV_QPS_RTS && q.port_num == 1 && qi.qp_type == IBV_QPT_RAW_PACKET,
	      "query: state %d port %d type %d", q.qp_state, q.port_num, qi.qp_type);

	/* ibv_create_flow refusals. */
	struct eth_flow f = eth_rule();
	struct ibv_qp_init_attr ud_init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
					   .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *ud = ibv_create_qp(pd, &ud_init);
	MUST(ud);
	errno = 0;
	CHECK(ibv_create_flow(ud, &f.attr) == NULL && errno == EOPNOTSUPP, "flow on UD errno %d", errno);
	f.attr.port = 2;
	errno = 0;
	CHECK(ibv_create_flow(qp, &f.attr) == NULL && errno == EINVAL, "port 2 errno %d", errno);
	f = eth_rule();
	f.eth.type = IBV_FLOW_SPEC_VXLAN_TUNNEL;
	errno = 0;
	CHECK(ibv_create_flow(qp, &f.attr) == NULL && errno == EOPNOTSUPP, "VXLAN errno %d", errno);
	f = eth_rule();
	f.eth.size = sizeof f.eth - 2;
	errno = 0;
	CHECK(ibv_create_flow(qp, &f.attr) == NULL && errno == EINVAL, "bad size errno %d", errno);
	MUST(ibv_destroy_qp(ud) == 0);

	/* max_tso_header: RAW_PACKET only, and no TSO is offered. */
	struct ibv_qp_init_attr_ex ex = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET, .pd = pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER,
					 .max_tso_header = 64,
					 .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &ex) == NULL && errno == EINVAL, "max_tso_header 64 errno %d", errno);
	ex.max_tso_header = 0;
	struct ibv_qp *zero = ibv_create_qp_ex(ctx, &ex);
	CHECK(zero != NULL, "max_tso_header 0 errno %d", errno);
	if (zero)
		ibv_destroy_qp(zero);

	static char buf[8192];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	MUST(mr);
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 10, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL, "a 10-byte frame");
	s.length = 100;
	wr.opcode = IBV_WR_TSO;
	CHECK(ibv_post_send(qp, &wr, &bad) == EOPNOTSUPP, "IBV_WR_TSO");

	/* Loopback: lo hands every frame sent back in, to every packet socket. */
	f = eth_rule();
	struct ibv_flow *flow = ibv_create_flow(qp, &f.attr);
	MUST(flow);
	for (int i = 0; i < 2; i++) {
		struct ibv_sge r = {.addr = (uintptr_t)buf + 4096 + i * 2048, .length = 2048, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 100 + i, .sg_list = &r, .num_sge = 1}, *bad_r;
		MUST(ibv_post_recv(qp, &rw, &bad_r) == 0);
	}
	/* First a frame to another MAC (the flow does not take it), then ours. */
	for (int i = 0; i < 200; i++)
		buf[i] = (char)(i * 7 + 3);
	memcpy(buf, MAC, 6);
	buf[5] ^= 0x10;
	send_frame(qp, mr, buf, 200, 1);
	memcpy(buf + 1024, buf, 200);
	memcpy(buf + 1024, MAC, 6);
	send_frame(qp, mr, buf + 1024, 200, 2);
	int sends = 0, recvs = 0;
	struct ibv_wc wc;
	while ((sends < 2 || recvs < 1) && wait_wc(cq, &wc, 10.0)) {
		CHECK(wc.status == IBV_WC_SUCCESS, "wr %llu status %d", (unsigned long long)wc.wr_id, wc.status);
		if (wc.opcode == IBV_WC_SEND) {
			sends++;
		} else {
			recvs++;
			CHECK(wc.wr_id == 100 && wc.opcode == IBV_WC_RECV && wc.byte_len == 200,
			      "recv wr %llu opcode %d byte_len %u", (unsigned long long)wc.wr_id, wc.opcode,
			      wc.byte_len);
			CHECK(memcmp(buf + 4096, buf + 1024, 200) == 0, "the frame, whole");
		}
	}
	CHECK(sends == 2 && recvs == 1, "sends %d recvs %d", sends, recvs);
	/* Nothing more: the frame to the other MAC was not delivered. */
	CHECK(!wait_wc(cq, &wc, 0.3), "an extra completion: wr %llu", (unsigned long long)wc.wr_id);
	/* The kernel's QP use count: no destroy while a flow steers to it. */
	CHECK(ibv_destroy_qp(qp) == EBUSY, "destroy_qp with a flow attached");
	CHECK(ibv_destroy_flow(flow) == 0, "destroy_flow");
	MUST(ibv_destroy_qp(qp) == 0);
	MUST(ibv_dereg_mr(mr) == 0);
}

int main(int argc, char **argv)
{
	MUST(argc == 2);
	pid_t pid = getpid();
	MAC[3] = (uint8_t)(pid >> 16);
	MAC[4] = (uint8_t)(pid >> 8);
	MAC[5] = (uint8_t)pid;
	struct ibv_device **list = ibv_get_device_list(NULL);
	MUST(list && list[0]);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	MUST(ctx);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	MUST(pd);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	MUST(cq);
	if (strcmp(argv[1], "eperm") == 0) {
		errno = 0;
		struct ibv_qp *qp = raw_qp(pd, cq);
		CHECK(qp == NULL && errno == EPERM, "RAW_PACKET without CAP_NET_RAW: errno %d", errno);
	} else {
		root_checks(ctx, pd, cq);
	}
	MUST(ibv_destroy_cq(cq) == 0);
	MUST(ibv_dealloc_pd(pd) == 0);
	MUST(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	if (failures)
		return 1;
	printf("ok\n");
	return 0;
}
