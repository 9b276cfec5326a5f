/* Memory through the C ABI of the drop-in libibverbs.so.1: ibv_rereg_mr with
 * each flag, its return codes and errno, and remote access through the
 * re-registered region checked like any MR (an RC pair of this device writes
 * into it); on-demand paging: the caps, explicit and implicit regions, remote
 * and local access to unmapped and read-only pages failing with the right
 * completion status instead of crashing, ibv_advise_mr and its errno; device
 * memory (ibv_alloc_dm, the copies, zero-based ibv_reg_dm_mr regions that an
 * RDMA WRITE reaches by offset) and its errno; thread and parent domains (a
 * QP of a parent domain writes through an MR of its PD; the errno of each
 * refusal); the CQ rules that come with them: ibv_resize_cq below the
 * completions queued or owed is EINVAL, and a QP moved to RESET takes its
 * completions out of its CQs.
 * Prints "ok" and exits 0 when every check passed. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "rc.h"

enum { LEN = 4096 };

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_pd *qp_pd; /* where rdma_over_new_pair creates its QPs */
static struct ibv_cq *cq;
static union ibv_gid gid;

/* `op` (RDMA WRITE or READ) of 64 bytes between `src` (lkey `lkey`) and
 * `raddr`/`rkey` over a new RC pair of QPs in `pd`; returns the requester's
 * completion status. */
static enum ibv_wc_status rdma_over_new_pair(enum ibv_wr_opcode op, void *src, uint32_t lkey, uint64_t raddr,
					     uint32_t rkey)
{
	struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_pd *in = qp_pd ? qp_pd : pd;
	struct ibv_qp *a = ibv_create_qp(in, &init), *b = ibv_create_qp(in, &init);
	MUST(a && b);
	connect_rc(a, b->qp_num, gid);
	connect_rc(b, a->qp_num, gid);
	struct ibv_sge sge = {(uintptr_t)src, 64, lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	MUST(ibv_post_send(a, &wr, &bad) == 0);
	struct ibv_wc wc = wait_wc(cq);
	CHECK(wc.qp_num == a->qp_num, "completion of the writer");
	MUST(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0);
	/* Whatever the peer's error left (nothing for a write) is gone with it. */
	struct ibv_wc rest;
	while (ibv_poll_cq(cq, 1, &rest) == 1)
		;
	return wc.status;
}

static enum ibv_wc_status write_over_new_pair(void *src, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	return rdma_over_new_pair(IBV_WR_RDMA_WRITE, src, lkey, raddr, rkey);
}

static void rereg(void)
{
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	char *src = aligned_alloc(4096, LEN), *mb = aligned_alloc(4096, LEN), *mc = aligned_alloc(4096, 2 * LEN);
	MUST(src && mb && mc);
	memset(src, 0x5a, LEN);
	memset(mb, 0, LEN);
	memset(mc, 0, 2 * LEN);
	struct ibv_mr *ms = ibv_reg_mr(pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mr = ibv_reg_mr(pd, mb, LEN, acc);
	MUST(ms && mr);
	uint32_t lkey = mr->lkey, rkey = mr->rkey;
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	MUST(pd2);

	/* Input errors (libibverbs' own checks): IBV_REREG_MR_ERR_INPUT, EINVAL. */
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 1 << 3, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "unknown flag: errno %d", errno);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, LEN, 0) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL, "translation to NULL: errno %d", errno);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, mc, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL, "translation of length 0: errno %d", errno);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, IBV_ACCESS_LOCAL_WRITE) ==
	      IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "access without CHANGE_ACCESS: errno %d", errno);
	errno = 0;
	CHECK(ibv_rereg_mr(NULL, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL, "NULL mr: errno %d", errno);
	/* Device refusals: IBV_REREG_MR_ERR_CMD with the kernel's errno. */
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL,
	      "no change: errno %d", errno);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE) ==
	      IBV_REREG_MR_ERR_CMD && errno == EINVAL, "remote write without local write: errno %d", errno);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_ZERO_BASED) ==
	      IBV_REREG_MR_ERR_CMD && errno == EOPNOTSUPP, "zero-based: errno %d", errno);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL,
	      "NULL pd: errno %d", errno);
	/* Refusals changed nothing: the region works as registered. */
	CHECK(mr->pd == pd && mr->addr == mb && mr->length == LEN && mr->lkey == lkey && mr->rkey == rkey,
	      "fields after refusals");
	CHECK(write_over_new_pair(src, ms->lkey, (uintptr_t)mb, rkey) == IBV_WC_SUCCESS, "write after refusals");
	CHECK(mb[0] == 0x5a && mb[63] == 0x5a, "bytes written");

	/* IBV_REREG_MR_CHANGE_ACCESS: without remote write, the peer is refused. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE) == 0, "to local");
	CHECK(mr->lkey == lkey && mr->rkey == rkey, "keys kept");
	CHECK(write_over_new_pair(src, ms->lkey, (uintptr_t)mb, rkey) == IBV_WC_REM_ACCESS_ERR, "access enforced");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, acc) == 0, "back to remote write");
	CHECK(write_over_new_pair(src, ms->lkey, (uintptr_t)mb, rkey) == IBV_WC_SUCCESS, "access restored");

	/* IBV_REREG_MR_CHANGE_PD: the QPs are in pd, the region now in pd2. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0 && mr->pd == pd2, "to pd2");
	CHECK(write_over_new_pair(src, ms->lkey, (uintptr_t)mb, rkey) == IBV_WC_REM_ACCESS_ERR, "PD enforced");
	CHECK(ibv_dealloc_pd(pd2) == EBUSY, "pd2 holds the region");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0) == 0 && mr->pd == pd, "back to pd");
	CHECK(write_over_new_pair(src, ms->lkey, (uintptr_t)mb, rkey) == IBV_WC_SUCCESS, "PD restored");

	/* IBV_REREG_MR_CHANGE_TRANSLATION: the old range is out of reach. */
	memset(src, 0x77, LEN);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, mc, 2 * LEN, 0) == 0, "to mc");
	CHECK(mr->addr == mc && mr->length == 2 * LEN && mr->lkey == lkey && mr->rkey == rkey, "fields after move");
	CHECK(write_over_new_pair(src, ms->lkey, (uintptr_t)mb, rkey) == IBV_WC_REM_ACCESS_ERR, "old range refused");
	CHECK(mb[0] == 0x5a, "old buffer untouched");
	CHECK(write_over_new_pair(src, ms->lkey, (uintptr_t)mc + 2 * LEN - 64, rkey) == IBV_WC_SUCCESS,
	      "new range in reach");
	CHECK(mc[2 * LEN - 64] == 0x77 && mc[2 * LEN - 1] == 0x77, "bytes in the new buffer");

	/* All three at once, all or nothing: a bad access leaves PD and range. */
	CHECK(ibv_rereg_mr(mr, 7, pd2, mb, LEN, IBV_ACCESS_REMOTE_WRITE) == IBV_REREG_MR_ERR_CMD, "bad combined");
	CHECK(mr->pd == pd && mr->addr == mc, "nothing changed");
	CHECK(ibv_rereg_mr(mr, 7, pd2, mb, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) == 0, "combined");
	CHECK(mr->pd == pd2 && mr->addr == mb && mr->length == LEN, "combined fields");
	/* Fork needs no madvise here, so the fork error codes cannot occur. */
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "fork unneeded");

	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(ms) == 0, "dereg");
	CHECK(ibv_dealloc_pd(pd2) == 0, "pd2 free again");
	free(src);
	free(mb);
	free(mc);
}

static void odp(void)
{
	struct ibv_device_attr_ex dex;
	MUST(ibv_query_device_ex(ctx, NULL, &dex) == 0);
	CHECK(dex.odp_caps.general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT), "general odp caps %#lx",
	      (unsigned long)dex.odp_caps.general_caps);
	uint32_t all = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
		       IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	CHECK(dex.odp_caps.per_transport_caps.rc_odp_caps == all, "rc odp caps");
	CHECK(dex.odp_caps.per_transport_caps.ud_odp_caps ==
	      (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV), "ud odp caps");
	CHECK(dex.xrc_odp_caps == all, "XRC as RC (spec/xrc.md)");

	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND;
	/* An implicit region needs ON_DEMAND; NULL with another length is refused. */
	errno = 0;
	CHECK(ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
	      "implicit without ON_DEMAND: errno %d", errno);
	errno = 0;
	CHECK(ibv_reg_mr(pd, NULL, 4096, acc) == NULL && errno == EINVAL, "NULL with a length: errno %d", errno);
	struct ibv_mr *imr = ibv_reg_mr(pd, NULL, SIZE_MAX, acc);
	MUST(imr);
	CHECK(imr->addr == NULL && imr->length == SIZE_MAX, "implicit fields");

	long pg = 4096;
	char *src = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *two = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *ro = mmap(NULL, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	MUST(src != MAP_FAILED && two != MAP_FAILED && ro != MAP_FAILED);
	memset(src, 0x3c, pg);
	MUST(munmap(two + pg, pg) == 0);
	char *gone = two + pg;

	/* Remote writes through the implicit rkey reach any mapped address... */
	CHECK(rdma_over_new_pair(IBV_WR_RDMA_WRITE, src, imr->lkey, (uintptr_t)two, imr->rkey) == IBV_WC_SUCCESS,
	      "implicit write");
	CHECK(two[0] == 0x3c && two[63] == 0x3c, "bytes through the implicit region");
	/* ...and fail, without a crash, where nothing (writable) is mapped. */
	CHECK(rdma_over_new_pair(IBV_WR_RDMA_WRITE, src, imr->lkey, (uintptr_t)gone, imr->rkey) ==
	      IBV_WC_REM_ACCESS_ERR, "write to an unmapped page");
	CHECK(rdma_over_new_pair(IBV_WR_RDMA_WRITE, src, imr->lkey, (uintptr_t)ro, imr->rkey) ==
	      IBV_WC_REM_ACCESS_ERR, "write to a read-only page");
	CHECK(rdma_over_new_pair(IBV_WR_RDMA_READ, two, imr->lkey, (uintptr_t)ro, imr->rkey) == IBV_WC_SUCCESS,
	      "read from a read-only page");
	CHECK(two[0] == 0 && two[63] == 0, "zeros read from the read-only page");
	CHECK(rdma_over_new_pair(IBV_WR_RDMA_READ, src, imr->lkey, (uintptr_t)gone, imr->rkey) ==
	      IBV_WC_REM_ACCESS_ERR, "read from an unmapped page");
	/* Local: gathering from an unmapped page is a local protection error. */
	CHECK(rdma_over_new_pair(IBV_WR_RDMA_WRITE, gone, imr->lkey, (uintptr_t)two, imr->rkey) ==
	      IBV_WC_LOC_PROT_ERR, "send from an unmapped page");

	/* An explicit on-demand region over part of `two`. */
	struct ibv_mr *omr = ibv_reg_mr(pd, two, 2 * pg, acc);
	struct ibv_mr *pinned = ibv_reg_mr(pd, src, pg, IBV_ACCESS_LOCAL_WRITE);
	MUST(omr && pinned);
	struct ibv_sge ok = {(uintptr_t)two, 64, omr->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &ok, 1) == 0,
	      "prefetch");
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &ok, 1) == 0, "async prefetch");
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &ok, 1) == 0, "no-fault prefetch");
	struct ibv_sge unmapped = {(uintptr_t)gone, 64, omr->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &unmapped, 1) == EFAULT, "prefetch unmapped");
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &unmapped, 1) == 0,
	      "no-fault faults nothing in");
	struct ibv_sge rosge = {(uintptr_t)ro, 64, imr->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &rosge, 1) == 0, "prefetch read-only for reading");
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &rosge, 1) == EFAULT,
	      "prefetch read-only for writing");
	struct ibv_sge outside = {(uintptr_t)two + 2 * pg - 8, 64, omr->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &outside, 1) == EFAULT, "outside the region");
	struct ibv_sge notodp = {(uintptr_t)src, 64, pinned->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &notodp, 1) == ENOENT, "not on demand");
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 2, &ok, 1) == EINVAL, "bad flags");
	CHECK(ibv_advise_mr(pd, 7, 0, &ok, 1) == EOPNOTSUPP, "bad advice");
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	MUST(pd2);
	CHECK(ibv_advise_mr(pd2, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &ok, 1) == EPERM, "another PD");
	struct ibv_mr *ro_odp = ibv_reg_mr(pd, two, pg, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND);
	MUST(ro_odp);
	struct ibv_sge rw = {(uintptr_t)two, 64, ro_odp->lkey};
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &rw, 1) == EPERM, "write prefetch, no write");

	CHECK(ibv_dereg_mr(ro_odp) == 0 && ibv_dereg_mr(omr) == 0 && ibv_dereg_mr(pinned) == 0 &&
	      ibv_dereg_mr(imr) == 0, "dereg");
	CHECK(ibv_dealloc_pd(pd2) == 0, "pd2");
	munmap(src, pg);
	munmap(two, pg);
	munmap(ro, pg);
}

static void device_memory(void)
{
	struct ibv_device_attr_ex dex;
	MUST(ibv_query_device_ex(ctx, NULL, &dex) == 0);
	CHECK(dex.max_dm_size == 256 * 1024, "max_dm_size %lu", (unsigned long)dex.max_dm_size);
	struct ibv_alloc_dm_attr bad = {.length = dex.max_dm_size + 1};
	errno = 0;
	CHECK(ibv_alloc_dm(ctx, &bad) == NULL && errno == EINVAL, "above max_dm_size: errno %d", errno);
	bad = (struct ibv_alloc_dm_attr){.length = 64, .comp_mask = 1};
	errno = 0;
	CHECK(ibv_alloc_dm(ctx, &bad) == NULL && errno == EINVAL, "comp_mask: errno %d", errno);
	struct ibv_alloc_dm_attr da = {.length = 1024, .log_align_req = 6};
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
	MUST(dm);
	CHECK(dm->context == ctx, "dm->context");
	uint32_t words[4] = {1, 2, 3, 4}, out[4] = {0};
	CHECK(ibv_memcpy_to_dm(dm, 16, words, sizeof words) == 0, "memcpy_to_dm");
	CHECK(ibv_memcpy_from_dm(out, dm, 16, sizeof out) == 0 && memcmp(out, words, sizeof out) == 0, "round trip");
	CHECK(ibv_memcpy_to_dm(dm, 17, words, 4) == EINVAL, "unaligned offset");
	CHECK(ibv_memcpy_from_dm(out, dm, 16, 3) == EINVAL, "unaligned length");
	CHECK(ibv_memcpy_to_dm(dm, 1024, words, 4) == EFAULT, "beyond");
	CHECK(ibv_memcpy_from_dm(out, dm, 1020, 8) == EFAULT, "straddling the end");

	int acc = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, dm, 0, 64, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
	      "not zero-based: errno %d", errno);
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, dm, 512, 1024, acc) == NULL && errno == EINVAL, "outside: errno %d", errno);
	struct ibv_mr *mr = ibv_reg_dm_mr(pd, dm, 512, 512, acc);
	MUST(mr);
	CHECK(mr->addr == NULL && mr->length == 512 && mr->pd == pd, "dm mr fields");
	CHECK(ibv_free_dm(dm) == EBUSY, "free while a region uses it");
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, acc) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL, "rereg of a DM region: errno %d", errno);

	char *src = aligned_alloc(4096, 4096);
	MUST(src);
	memset(src, 0x6b, 4096);
	struct ibv_mr *ms = ibv_reg_mr(pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	MUST(ms);
	/* Region address 64 is device memory byte 576. */
	CHECK(write_over_new_pair(src, ms->lkey, 64, mr->rkey) == IBV_WC_SUCCESS, "write by offset");
	unsigned char got[64];
	CHECK(ibv_memcpy_from_dm(got, dm, 576, 64) == 0 && got[0] == 0x6b && got[63] == 0x6b, "bytes in dm");
	CHECK(write_over_new_pair(src, ms->lkey, 480, mr->rkey) == IBV_WC_REM_ACCESS_ERR, "past the region");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(ms) == 0, "dereg");
	CHECK(ibv_free_dm(dm) == 0, "free_dm");
	free(src);
}

static void cq_rules(void)
{
	struct ibv_cq *small = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	MUST(small);
	struct ibv_qp_init_attr init = {.send_cq = small, .recv_cq = small, .qp_type = IBV_QPT_RC,
					.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *a = ibv_create_qp(pd, &init), *b = ibv_create_qp(pd, &init);
	MUST(a && b);
	connect_rc(a, b->qp_num, gid);
	connect_rc(b, a->qp_num, gid);
	char buf[64] = {0};
	struct ibv_mr *m = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	MUST(m);
	/* b posts no receive and RNR retry is infinite: five SENDs stay owed. */
	struct ibv_sge sge = {(uintptr_t)buf, 8, m->lkey};
	for (int i = 0; i < 5; i++) {
		struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;
		MUST(ibv_post_send(a, &wr, &bad) == 0);
	}
	CHECK(ibv_resize_cq(small, 4) == EINVAL, "resize below the owed completions");
	CHECK(ibv_resize_cq(small, 5) == 0 && small->cqe == 5, "resize to exactly what is owed");
	/* a to ERR: its five SENDs flush into the CQ; RESET takes them out. */
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
	MUST(ibv_modify_qp(a, &at, IBV_QP_STATE) == 0);
	struct ibv_wc wc;
	int seen = 0;
	for (long i = 0; i < 100000000L && seen == 0; i++)
		seen = ibv_poll_cq(small, 1, &wc);
	CHECK(seen == 1 && wc.status == IBV_WC_WR_FLUSH_ERR && wc.qp_num == a->qp_num, "a flush completion");
	at.qp_state = IBV_QPS_RESET;
	MUST(ibv_modify_qp(a, &at, IBV_QP_STATE) == 0);
	CHECK(ibv_poll_cq(small, 1, &wc) == 0, "RESET purged the rest of a's completions");
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_dereg_mr(m) == 0, "teardown");
	CHECK(ibv_destroy_cq(small) == 0, "destroy cq");
}

static void *never_alloc(struct ibv_pd *p, void *c, size_t size, size_t align, uint64_t type)
{
	(void)p, (void)c, (void)size, (void)align, (void)type;
	return IBV_ALLOCATOR_USE_DEFAULT;
}

static void never_free(struct ibv_pd *p, void *c, void *ptr, uint64_t type)
{
	(void)p, (void)c, (void)ptr, (void)type;
}

static void domains(void)
{
	struct ibv_td_init_attr tda = {.comp_mask = 1};
	errno = 0;
	CHECK(ibv_alloc_td(ctx, &tda) == NULL && errno == EINVAL, "td comp_mask: errno %d", errno);
	tda.comp_mask = 0;
	struct ibv_td *td = ibv_alloc_td(ctx, &tda);
	MUST(td);
	CHECK(td->context == ctx, "td->context");

	struct ibv_parent_domain_init_attr pa = {.pd = NULL};
	errno = 0;
	CHECK(ibv_alloc_parent_domain(ctx, &pa) == NULL && errno == EINVAL, "NULL pd: errno %d", errno);
	pa = (struct ibv_parent_domain_init_attr){.pd = pd, .comp_mask = 4};
	errno = 0;
	CHECK(ibv_alloc_parent_domain(ctx, &pa) == NULL && errno == EINVAL, "comp_mask: errno %d", errno);
	pa = (struct ibv_parent_domain_init_attr){.pd = pd, .comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS,
						  .alloc = never_alloc};
	errno = 0;
	CHECK(ibv_alloc_parent_domain(ctx, &pa) == NULL && errno == EINVAL, "alloc without free: errno %d", errno);
	int token;
	pa = (struct ibv_parent_domain_init_attr){
		.pd = pd, .td = td, .alloc = never_alloc, .free = never_free, .pd_context = &token,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT};
	struct ibv_pd *parent = ibv_alloc_parent_domain(ctx, &pa);
	MUST(parent);
	CHECK(parent != pd && parent->context == ctx, "a new pd object");
	struct ibv_parent_domain_init_attr pp = {.pd = parent};
	errno = 0;
	CHECK(ibv_alloc_parent_domain(ctx, &pp) == NULL && errno == EINVAL, "parent of a parent: errno %d", errno);
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "the PD holds a parent domain");
	CHECK(ibv_dealloc_td(td) == EBUSY, "the TD holds a parent domain");

	/* QPs of the parent domain reach an MR of its PD: one protection domain. */
	char *src = aligned_alloc(4096, 4096), *dst = aligned_alloc(4096, 4096);
	MUST(src && dst);
	memset(src, 0x21, 4096);
	memset(dst, 0, 4096);
	struct ibv_mr *ms = ibv_reg_mr(parent, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *md = ibv_reg_mr(pd, dst, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	MUST(ms && md);
	qp_pd = parent;
	CHECK(write_over_new_pair(src, ms->lkey, (uintptr_t)dst, md->rkey) == IBV_WC_SUCCESS, "parent-domain QP");
	qp_pd = NULL;
	CHECK(dst[0] == 0x21 && dst[63] == 0x21, "bytes through the parent domain");
	struct ibv_pd *other = ibv_alloc_pd(ctx);
	MUST(other);
	struct ibv_mr *mo = ibv_reg_mr(other, dst, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	MUST(mo);
	qp_pd = parent;
	CHECK(write_over_new_pair(src, ms->lkey, (uintptr_t)dst, mo->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "another PD's MR stays out of reach");
	qp_pd = NULL;

	/* A CQ of a parent domain; a plain PD is not one. */
	struct ibv_cq_init_attr_ex ca = {.cqe = 8, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = parent};
	struct ibv_cq_ex *pcq = ibv_create_cq_ex(ctx, &ca);
	CHECK(pcq != NULL, "cq of a parent domain: errno %d", errno);
	ca.parent_domain = pd;
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &ca) == NULL && errno == EINVAL, "cq with a plain pd: errno %d", errno);
	if (pcq)
		CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(pcq)) == 0, "destroy pcq");

	CHECK(ibv_dereg_mr(ms) == 0 && ibv_dereg_mr(md) == 0 && ibv_dereg_mr(mo) == 0, "dereg");
	CHECK(ibv_dealloc_pd(other) == 0, "other");
	CHECK(ibv_dealloc_pd(parent) == 0, "dealloc the parent domain");
	CHECK(ibv_dealloc_td(td) == 0, "dealloc the td");
	free(src);
	free(dst);
}

/* A parent domain cannot go while objects made through it live
 * (mlx5_dealloc_parent_domain: EBUSY while its refcount counts QPs and CQs;
 * softverbs counts every object whose struct names it, spec/parent-domain.md).
 * Objects of its PD made without it do not hold it. */
static void parent_domain_busy(void)
{
	struct ibv_parent_domain_init_attr pa = {.pd = pd};
	struct ibv_pd *parent = ibv_alloc_parent_domain(ctx, &pa);
	MUST(parent);
	char *buf = aligned_alloc(4096, 4096);
	MUST(buf);
	struct ibv_mr *plain = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	MUST(plain);

	struct ibv_cq_init_attr_ex ca = {.cqe = 8, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = parent};
	struct ibv_cq_ex *pcq = ibv_create_cq_ex(ctx, &ca);
	MUST(pcq);
	CHECK(ibv_dealloc_pd(parent) == EBUSY, "a CQ of the parent domain holds it");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(pcq)) == 0, "destroy the parent-domain CQ");

	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(parent, &qa);
	MUST(qp);
	CHECK(qp->pd == parent, "qp->pd names the parent domain");
	CHECK(ibv_dealloc_pd(parent) == EBUSY, "a QP of the parent domain holds it");
	CHECK(ibv_destroy_qp(qp) == 0, "destroy the parent-domain QP");

	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(parent, &sa);
	MUST(srq);
	CHECK(ibv_dealloc_pd(parent) == EBUSY, "an SRQ of the parent domain holds it");
	CHECK(ibv_destroy_srq(srq) == 0, "destroy the parent-domain SRQ");

	struct ibv_mr *mr = ibv_reg_mr(parent, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	MUST(mr);
	CHECK(ibv_dealloc_pd(parent) == EBUSY, "an MR of the parent domain holds it");
	/* Moved to the plain PD, the region no longer holds the parent domain;
	 * moved back, it does again. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0) == 0, "rereg to the PD");
	struct ibv_mr *mr2 = ibv_reg_mr(parent, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	MUST(mr2);
	CHECK(ibv_rereg_mr(mr2, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0) == 0, "rereg the second to the PD");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, parent, NULL, 0, 0) == 0, "rereg back to the parent");
	CHECK(ibv_dealloc_pd(parent) == EBUSY, "the region moved back holds it again");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(mr2) == 0, "dereg the regions");

	/* Every object made through it gone: it goes, though the PD's own MR stays. */
	CHECK(ibv_dealloc_pd(parent) == 0, "dealloc the parent domain once unused");
	CHECK(ibv_dereg_mr(plain) == 0, "dereg the PD's region");
	free(buf);
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	MUST(list && n >= 1);
	ctx = ibv_open_device(list[0]);
	MUST(ctx);
	MUST(ibv_query_gid(ctx, 1, 0, &gid) == 0);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	MUST(pd && cq);

	rereg();
	odp();
	device_memory();
	domains();
	parent_domain_busy();
	cq_rules();

	MUST(ibv_destroy_cq(cq) == 0);
	MUST(ibv_dealloc_pd(pd) == 0);
	MUST(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	if (failures)
		return 1;
	printf("ok\n");
	return 0;
}
