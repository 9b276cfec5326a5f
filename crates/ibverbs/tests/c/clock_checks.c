/* Completion timestamps through the C ABI: ibv_query_device_ex reports the
 * device clock (hca_core_clock 1 GHz, a 64-bit completion_timestamp_mask),
 * ibv_query_rt_values_ex reads it, and an ibv_cq_ex created with
 * IBV_WC_EX_WITH_COMPLETION_TIMESTAMP(_WALLCLOCK) stamps each completion with
 * it: a UD SEND to the QP itself gives a send and a receive completion whose
 * timestamps lie between two readings of the clock, the receive's not before
 * the send's, and whose wall-clock times are within seconds of time(2).
 * Prints "ok" and exits 0 when every check passed. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#include "check.h"

enum { QKEY = 0x1234, LEN = 64 };

static uint64_t device_clock(struct ibv_context *ctx)
{
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	MUST(ibv_query_rt_values_ex(ctx, &v) == 0);
	CHECK(v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK, "comp_mask %#x", v.comp_mask);
	CHECK(v.raw_clock.tv_nsec >= 0 && v.raw_clock.tv_nsec < 1000000000L, "tv_nsec %ld",
	      (long)v.raw_clock.tv_nsec);
	return (uint64_t)v.raw_clock.tv_sec * 1000000000ULL + (uint64_t)v.raw_clock.tv_nsec;
}

static void ud_up(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0);
	a.qp_state = IBV_QPS_RTR;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	MUST(list && list[0]);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	MUST(ctx);

	struct ibv_device_attr_ex dev;
	MUST(ibv_query_device_ex(ctx, NULL, &dev) == 0);
	CHECK(dev.hca_core_clock == 1000000, "hca_core_clock %llu kHz", (unsigned long long)dev.hca_core_clock);
	CHECK(dev.completion_timestamp_mask == UINT64_MAX, "mask %#llx",
	      (unsigned long long)dev.completion_timestamp_mask);

	/* The clock moves forward. */
	uint64_t a = device_clock(ctx), b = device_clock(ctx);
	CHECK(b >= a, "clock went back: %llu then %llu", (unsigned long long)a, (unsigned long long)b);
	struct ibv_values_ex none = {.comp_mask = 0};
	CHECK(ibv_query_rt_values_ex(ctx, &none) == 0 && none.comp_mask == 0, "nothing asked, nothing filled");

	/* What is not offered is refused. */
	struct ibv_cq_init_attr_ex ca = {.cqe = 16, .wc_flags = IBV_WC_EX_WITH_CVLAN};
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &ca) == NULL && errno == EOPNOTSUPP, "CVLAN errno %d", errno);

	ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
		      IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
	MUST(cq);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	MUST(pd);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	MUST(mr);
	struct ibv_qp_init_attr init = {.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
					.qp_type = IBV_QPT_UD, .sq_sig_all = 1,
					.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	MUST(qp);
	ud_up(qp);
	union ibv_gid gid;
	MUST(ibv_query_gid(ctx, 1, 0, &gid) == 0);
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = gid, .hop_limit = 1}};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	MUST(ah);

	struct ibv_sge rs = {.addr = (uintptr_t)buf + 1024, .length = 40 + LEN, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *bad_r;
	MUST(ibv_post_recv(qp, &rwr, &bad_r) == 0);
	uint64_t before = device_clock(ctx);
	struct ibv_sge ss = {.addr = (uintptr_t)buf, .length = LEN, .lkey = mr->lkey};
	struct ibv_send_wr swr = {.wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND};
	swr.wr.ud.ah = ah;
	swr.wr.ud.remote_qpn = qp->qp_num;
	swr.wr.ud.remote_qkey = QKEY;
	struct ibv_send_wr *bad_s;
	MUST(ibv_post_send(qp, &swr, &bad_s) == 0);

	uint64_t ts[3] = {0}, wall[3] = {0};
	int got = 0;
	struct ibv_poll_cq_attr pa = {0};
	for (long spins = 0; got < 2 && spins < 200000000L; spins++) {
		int rc = ibv_start_poll(cq, &pa);
		if (rc == ENOENT)
			continue;
		MUST(rc == 0);
		do {
			CHECK(cq->status == IBV_WC_SUCCESS, "status %d", cq->status);
			MUST(cq->wr_id == 1 || cq->wr_id == 2);
			ts[cq->wr_id] = ibv_wc_read_completion_ts(cq);
			wall[cq->wr_id] = ibv_wc_read_completion_wallclock_ns(cq);
			got++;
		} while (ibv_next_poll(cq) == 0);
		ibv_end_poll(cq);
	}
	MUST(got == 2);
	uint64_t after = device_clock(ctx);
	for (int i = 1; i <= 2; i++)
		CHECK(before <= ts[i] && ts[i] <= after, "wr %d stamped %llu, outside [%llu, %llu]", i,
		      (unsigned long long)ts[i], (unsigned long long)before, (unsigned long long)after);
	CHECK(ts[2] >= ts[1], "received (%llu) before sent (%llu)", (unsigned long long)ts[2],
	      (unsigned long long)ts[1]);
	uint64_t now_ns = (uint64_t)time(NULL) * 1000000000ULL;
	for (int i = 1; i <= 2; i++) {
		uint64_t d = wall[i] > now_ns ? wall[i] - now_ns : now_ns - wall[i];
		CHECK(d < 10ULL * 1000000000ULL, "wall clock of wr %d is %llu ns from time(2)", i,
		      (unsigned long long)d);
	}

	MUST(ibv_destroy_ah(ah) == 0);
	MUST(ibv_destroy_qp(qp) == 0);
	MUST(ibv_dereg_mr(mr) == 0);
	MUST(ibv_dealloc_pd(pd) == 0);
	MUST(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);
	MUST(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	if (failures)
		return 1;
	printf("ok\n");
	return 0;
}
