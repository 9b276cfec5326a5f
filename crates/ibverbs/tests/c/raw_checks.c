/* RAW_PACKET QPs and flow steering through the C ABI (spec/raw-packet.md).
 * `raw_checks eperm` (run without CAP_NET_RAW): ibv_create_qp of a RAW_PACKET
 * QP fails with EPERM. `raw_checks root`: the seed's modify rows, query, the
 * refusals of ibv_create_flow (UD QP, port, unsupported spec, malformed
 * size), of max_tso_header and of post_send (TSO without a header, a frame
 * shorter than a header); TSO (tso_caps; a TCP/IPv4 payload posted with
 * ibv_post_send's wr.tso and with ibv_wr_send_tso comes back on lo as
 * mss-sized frames, each checked field by field); then a frame the QP sends
 * on the loopback interface comes back to it through its flow, whole, while a
 * frame to another MAC does not.
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
	CHECK(dev.tso_caps.max_tso == 256 * 1024 && dev.tso_caps.supported_qpts == 1u << IBV_QPT_RAW_PACKET,
	      "tso_caps max_tso %u qpts %#x", dev.tso_caps.max_tso, dev.tso_caps.supported_qpts);

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

/* RFC 1071 sum over several pieces, folded and complemented. */
static uint16_t csum(const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
	uint64_t s = 0;
	for (size_t i = 0; i < na + nb; i++) {
		uint8_t v = i < na ? a[i] : b[i - na];
		s += (i % 2 == 0) ? (uint64_t)v << 8 : v;
	}
	while (s > 0xffff)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

enum { HDR = 14 + 20 + 20 };

/* Ethernet (to `mac`) + IPv4 (ID 0x0100, 10.9.0.1 -> 10.9.0.2) + TCP (seq
 * 5000, CWR|PSH|ACK|FIN), no options. */
static void tso_header(uint8_t *h, const uint8_t *mac)
{
	memset(h, 0, HDR);
	memcpy(h, mac, 6);
	h[6] = 2, h[11] = 0x77;
	h[12] = 0x08;
	uint8_t *ip = h + 14, *tcp = h + 34;
	ip[0] = 0x45, ip[4] = 0x01, ip[8] = 64, ip[9] = 6;
	ip[12] = 10, ip[13] = 9, ip[15] = 1, ip[16] = 10, ip[17] = 9, ip[19] = 2;
	tcp[0] = 0x9c, tcp[1] = 0x40, tcp[3] = 80;
	tcp[6] = 0x13, tcp[7] = 0x88;
	tcp[12] = 5 << 4, tcp[13] = 0x80 | 0x08 | 0x10 | 0x01;
}

/* Receives `n` segments of the TSO WR `id` (payload at `payload`, `len`
 * bytes, `mss`) and checks each: lengths, ID, checksums, sequence, flags. */
static void check_segments(struct ibv_cq *cq, uint8_t *rx, const uint8_t *payload, int len, int mss,
			   uint64_t id, const char *how)
{
	int n = (len + mss - 1) / mss, got = 0, done = 0;
	struct ibv_wc wc;
	while ((got < n || !done) && wait_wc(cq, &wc, 10.0)) {
		CHECK(wc.status == IBV_WC_SUCCESS, "%s: wr %llu status %d", how, (unsigned long long)wc.wr_id,
		      wc.status);
		if (wc.opcode != IBV_WC_RECV) {
			CHECK(wc.opcode == IBV_WC_TSO && wc.wr_id == id && !done, "%s: opcode %d wr %llu", how,
			      wc.opcode, (unsigned long long)wc.wr_id);
			done = 1;
			continue;
		}
		int i = (int)wc.wr_id - 200;
		MUST(i >= 0 && i < n);
		got++;
		const uint8_t *f = rx + i * 2048, *ip = f + 14, *tcp = f + 34;
		int piece = i + 1 < n ? mss : len - i * mss;
		CHECK((int)wc.byte_len == HDR + piece, "%s: segment %d byte_len %u", how, i, wc.byte_len);
		CHECK(be16(ip + 2) == 40 + piece, "%s: segment %d total length %u", how, i, be16(ip + 2));
		CHECK(be16(ip + 4) == 0x0100 + i, "%s: segment %d IP ID %#x", how, i, be16(ip + 4));
		CHECK(csum(ip, 20, NULL, 0) == 0, "%s: segment %d IPv4 header checksum", how, i);
		CHECK(be32(tcp + 4) == 5000u + (uint32_t)(i * mss), "%s: segment %d seq %u", how, i, be32(tcp + 4));
		int last = i == n - 1;
		CHECK(!!(tcp[13] & 0x09) == last && !!(tcp[13] & 0x80) == (i == 0) && (tcp[13] & 0x10),
		      "%s: segment %d flags %#x", how, i, tcp[13]);
		uint8_t pseudo[12] = {0};
		memcpy(pseudo, ip + 12, 8);
		pseudo[9] = 6;
		pseudo[10] = (uint8_t)((20 + piece) >> 8), pseudo[11] = (uint8_t)(20 + piece);
		uint8_t seg[20 + 2048];
		memcpy(seg, tcp, 20 + (size_t)piece);
		CHECK(csum(pseudo, 12, seg, 20 + (size_t)piece) == 0, "%s: segment %d TCP checksum", how, i);
		CHECK(memcmp(f + HDR, payload + i * mss, (size_t)piece) == 0, "%s: segment %d payload", how, i);
	}
	CHECK(got == n && done, "%s: %d of %d segments, completion %d", how, got, n, done);
}

static void post_rx(struct ibv_qp *qp, struct ibv_mr *mr, uint8_t *rx, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge r = {.addr = (uintptr_t)rx + i * 2048, .length = 2048, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 200 + i, .sg_list = &r, .num_sge = 1}, *bad;
		MUST(ibv_post_recv(qp, &rw, &bad) == 0);
	}
}

/* TSO through both posting interfaces, on lo: the QP's own flow takes its
 * segments back. */
static void tso_checks(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex ex = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET, .pd = pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
						      IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO,
					 .max_tso_header = HDR, .sq_sig_all = 1,
					 .cap = {.max_send_wr = 4, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ex);
	MUST(qp);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT) == 0);
	a.qp_state = IBV_QPS_RTR;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
	a.qp_state = IBV_QPS_RTS;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
	uint8_t mac[6];
	memcpy(mac, MAC, 6);
	mac[1] ^= 0x40; /* this run's, apart from the other checks' */
	struct eth_flow f = eth_rule();
	memcpy(f.eth.val.dst_mac, mac, 6);
	struct ibv_flow *flow = ibv_create_flow(qp, &f.attr);
	MUST(flow);
	static uint8_t mem[32768];
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, sizeof mem, IBV_ACCESS_LOCAL_WRITE);
	MUST(mr);
	uint8_t *payload = mem, *hdr = mem + 8192, *rx = mem + 16384;
	for (int i = 0; i < 2500; i++)
		payload[i] = (uint8_t)(i * 13 + 1);
	tso_header(hdr, mac);

	/* ibv_post_send with wr.tso: 2500 bytes, mss 1000: three frames. */
	post_rx(qp, mr, rx, 3);
	struct ibv_sge s = {.addr = (uintptr_t)payload, .length = 2500, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 50, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_TSO}, *bad;
	wr.tso.hdr = hdr;
	wr.tso.hdr_sz = HDR + 1; /* beyond max_tso_header */
	wr.tso.mss = 1000;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "hdr_sz > max_tso_header");
	wr.tso.hdr_sz = HDR;
	CHECK(ibv_post_send(qp, &wr, &bad) == 0, "post TSO");
	check_segments(cq, rx, payload, 2500, 1000, 50, "post_send");

	/* ibv_wr_send_tso: 1400 bytes, mss 700: two frames; a bad header is
	 * reported by ibv_wr_complete. */
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
	MUST(qx);
	ibv_wr_start(qx);
	qx->wr_id = 51;
	ibv_wr_send_tso(qx, hdr, 10, 700);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)payload, 1400);
	CHECK(ibv_wr_complete(qx) == EINVAL, "ibv_wr_send_tso with a 10-byte header");
	post_rx(qp, mr, rx, 2);
	ibv_wr_start(qx);
	qx->wr_id = 52;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_tso(qx, hdr, HDR, 700);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)payload, 1400);
	CHECK(ibv_wr_complete(qx) == 0, "ibv_wr_send_tso");
	check_segments(cq, rx, payload, 1400, 700, 52, "ibv_wr_send_tso");

	MUST(ibv_destroy_flow(flow) == 0);
	MUST(ibv_destroy_qp(qp) == 0);
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

	/* max_tso_header: RAW_PACKET only, up to the device's 512. */
	struct ibv_qp_init_attr_ex ex = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET, .pd = pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER,
					 .max_tso_header = 600,
					 .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &ex) == NULL && errno == EINVAL, "max_tso_header 600 errno %d", errno);
	ex.qp_type = IBV_QPT_UD;
	ex.max_tso_header = 64;
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &ex) == NULL && errno == EINVAL, "max_tso_header on UD errno %d", errno);
	ex.qp_type = IBV_QPT_RAW_PACKET;
	struct ibv_qp *tso64 = ibv_create_qp_ex(ctx, &ex);
	CHECK(tso64 != NULL, "max_tso_header 64 errno %d", errno);
	if (tso64)
		ibv_destroy_qp(tso64);
	tso_checks(ctx, pd, cq);

	static char buf[8192];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	MUST(mr);
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 10, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL, "a 10-byte frame");
	s.length = 100;
	wr.opcode = IBV_WR_TSO; /* no header (wr.tso zero), and max_tso_header 0 */
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL, "IBV_WR_TSO without a header");

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
