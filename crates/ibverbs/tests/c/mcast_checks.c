/* UD multicast through the C ABI (spec/multicast.md), one role per process:
 *   mcast_checks recv GROUP COUNT   two UD QPs attach to GROUP (an IPv4
 *       multicast address, as the IPv4-mapped MGID ::ffff:GROUP), print
 *       "ready", then each must receive exactly COUNT SENDs; bad input first,
 *       and ibv_destroy_qp is EBUSY while attached.
 *   mcast_checks send GROUP COUNT   COUNT SENDs to the group (QPN 0xFFFFFF).
 * Prints "ok" and exits 0 when every check passed. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#include "check.h"

enum { QKEY = 0x11, MSG = 64, SLOT = 256 };

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static struct ibv_qp *ud_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth)
{
	struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .sq_sig_all = 1,
					.cap = {.max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	MUST(qp);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0);
	a.qp_state = IBV_QPS_RTR;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
	return qp;
}

static void bad_input(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_qp *ud,
		      const union ibv_gid *mgid)
{
	struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *rc = ibv_create_qp(pd, &init);
	MUST(rc);
	CHECK(ibv_attach_mcast(rc, mgid, 0) == EINVAL, "attach on an RC QP");
	CHECK(ibv_destroy_qp(rc) == 0, "destroy rc");
	union ibv_gid own;
	MUST(ibv_query_gid(ctx, 1, 0, &own) == 0);
	CHECK(ibv_attach_mcast(ud, &own, 0) == EINVAL, "attach to a unicast GID");
	CHECK(ibv_attach_mcast(ud, NULL, 0) == EINVAL, "attach to NULL");
	CHECK(ibv_detach_mcast(ud, mgid, 0) == EINVAL, "detach of a group not attached");
	struct ibv_device_attr attr;
	MUST(ibv_query_device(ctx, &attr) == 0);
	CHECK(attr.max_mcast_grp > 0 && attr.max_mcast_qp_attach >= 2 &&
		      attr.max_total_mcast_qp_attach >= attr.max_mcast_qp_attach,
	      "limits %d %d %d", attr.max_mcast_grp, attr.max_mcast_qp_attach, attr.max_total_mcast_qp_attach);
}

static void receiver(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_mr *mr,
		     const union ibv_gid *mgid, int count)
{
	struct ibv_qp *q[2] = {ud_qp(pd, cq, count), ud_qp(pd, cq, count)};
	bad_input(ctx, pd, cq, q[0], mgid);
	char *buf = mr->addr;
	for (int k = 0; k < 2; k++) {
		CHECK(ibv_attach_mcast(q[k], mgid, 0) == 0, "attach %d", k);
		CHECK(ibv_attach_mcast(q[k], mgid, 0) == 0, "attach %d twice", k);
		for (int i = 0; i < count; i++) {
			struct ibv_sge sge = {.addr = (uintptr_t)(buf + (k * count + i) * SLOT), .length = SLOT,
					      .lkey = mr->lkey};
			struct ibv_recv_wr wr = {.wr_id = k * count + i, .sg_list = &sge, .num_sge = 1}, *bad;
			MUST(ibv_post_recv(q[k], &wr, &bad) == 0);
		}
	}
	printf("ready\n");
	fflush(stdout);
	int got[2] = {0, 0}, total = 0;
	/* Every copy (bounded), then a quiet moment in which a duplicate would show. */
	double end = now_s() + 20, quiet = 0;
	while (now_s() < end && (total < 2 * count || now_s() < quiet)) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		MUST(n >= 0);
		if (n == 0)
			continue;
		if (++total == 2 * count)
			quiet = now_s() + 0.3;
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV, "status %d", wc.status);
		CHECK(wc.byte_len == 40 + MSG && (wc.wc_flags & IBV_WC_GRH), "byte_len %u", wc.byte_len);
		int k = wc.qp_num == q[0]->qp_num ? 0 : wc.qp_num == q[1]->qp_num ? 1 : -1;
		MUST(k >= 0);
		got[k]++;
		unsigned char *m = (unsigned char *)buf + wc.wr_id * SLOT;
		/* IPv4 GRH area: the IPv4 header at byte 20, its destination the group. */
		CHECK(m[20] >> 4 == 4 && memcmp(m + 36, mgid->raw + 12, 4) == 0, "GRH destination");
		CHECK(m[40] < count && m[40 + MSG - 1] == m[40], "payload");
	}
	CHECK(got[0] == count && got[1] == count, "one copy each: %d %d of %d", got[0], got[1], count);
	/* ibv_destroy_qp(3): fails while attached. */
	CHECK(ibv_destroy_qp(q[0]) == EBUSY, "destroy while attached");
	for (int k = 0; k < 2; k++) {
		CHECK(ibv_detach_mcast(q[k], mgid, 0) == 0, "detach %d", k);
		CHECK(ibv_destroy_qp(q[k]) == 0, "destroy %d after detach", k);
	}
}

static void sender(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_mr *mr, const union ibv_gid *mgid,
		   int count)
{
	struct ibv_qp *qp = ud_qp(pd, cq, count);
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1,
				 .grh = {.dgid = *mgid, .sgid_index = 0, .hop_limit = 1}};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	MUST(ah);
	char *buf = mr->addr;
	for (int i = 0; i < count; i++) {
		memset(buf + i * SLOT, i, MSG);
		struct ibv_sge sge = {.addr = (uintptr_t)(buf + i * SLOT), .length = MSG, .lkey = mr->lkey};
		struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = 0xffffff;
		wr.wr.ud.remote_qkey = QKEY;
		MUST(ibv_post_send(qp, &wr, &bad) == 0);
		struct ibv_wc wc;
		int n = 0;
		for (long t = 0; n == 0 && t < 200000000L; t++)
			n = ibv_poll_cq(cq, 1, &wc);
		MUST(n == 1);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)i, "send %d status %d", i, wc.status);
	}
	CHECK(ibv_destroy_ah(ah) == 0, "destroy ah");
	CHECK(ibv_destroy_qp(qp) == 0, "destroy qp");
}

int main(int argc, char **argv)
{
	MUST(argc == 4);
	int count = atoi(argv[3]);
	MUST(count > 0 && count <= 64);
	union ibv_gid mgid = {0};
	mgid.raw[10] = mgid.raw[11] = 0xff; /* ::ffff:GROUP (rdma_cm's RoCE MGID) */
	MUST(inet_pton(AF_INET, argv[2], mgid.raw + 12) == 1);
	struct ibv_device **list = ibv_get_device_list(NULL);
	MUST(list && list[0]);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	MUST(ctx);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	MUST(pd);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4 * count + 4, NULL, NULL, 0);
	MUST(cq);
	size_t len = 2 * 64 * SLOT;
	void *mem = calloc(1, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, len, IBV_ACCESS_LOCAL_WRITE);
	MUST(mem && mr);
	if (strcmp(argv[1], "recv") == 0)
		receiver(ctx, pd, cq, mr, &mgid, count);
	else
		sender(pd, cq, mr, &mgid, count);
	CHECK(ibv_dereg_mr(mr) == 0, "dereg");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy cq");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc pd");
	CHECK(ibv_close_device(ctx) == 0, "close");
	ibv_free_device_list(list);
	free(mem);
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
