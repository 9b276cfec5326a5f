/* Memory windows and IBA 1.5 ATOMIC WRITE through the drop-in libibverbs,
 * built against the system <infiniband/verbs.h> (spec/memory-windows.md):
 * the device caps; type 1 (ibv_bind_mw) and type 2 (IBV_WR_BIND_MW,
 * ibv_wr_bind_mw) windows with remote writes inside and outside them;
 * IBV_WR_LOCAL_INV and IBV_WR_SEND_WITH_INV (IBV_WC_WITH_INV,
 * invalidated_rkey); and the bad inputs with their errno or completion
 * status: binding over a region without IBV_ACCESS_MW_BIND
 * (IBV_WC_MW_BIND_ERR), invalidating a foreign rkey (IBV_WC_LOC_QP_OP_ERR),
 * ibv_dereg_mr under a bound window (EBUSY), ibv_dealloc_mw of a bound window
 * (allowed: the rkey dies), a window type 3 (EINVAL), ibv_bind_mw on a type 2
 * window (EINVAL). Prints "ok" when every check holds. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "rc.h"

enum { LEN = 4096 };

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *scq, *rcq;
static union ibv_gid gid;

/* A connected pair: `a` writes, `b` owns the windows. */
struct pair {
	struct ibv_qp *a, *b;
	char *src, *dst;
	struct ibv_mr *smr, *dmr;
};

static struct pair new_pair(int dst_access)
{
	struct pair p;
	struct ibv_qp_init_attr_ex init = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
					   .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						   .max_recv_sge = 1},
					   .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					   .pd = pd,
					   .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_BIND_MW |
							     IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV |
							     IBV_QP_EX_WITH_ATOMIC_WRITE};
	p.a = ibv_create_qp_ex(ctx, &init);
	p.b = ibv_create_qp_ex(ctx, &init);
	MUST(p.a && p.b);
	connect_rc(p.a, p.b->qp_num, gid);
	connect_rc(p.b, p.a->qp_num, gid);
	p.src = calloc(1, LEN);
	p.dst = calloc(1, LEN);
	MUST(p.src && p.dst);
	p.smr = ibv_reg_mr(pd, p.src, LEN, IBV_ACCESS_LOCAL_WRITE);
	p.dmr = ibv_reg_mr(pd, p.dst, LEN, dst_access);
	MUST(p.smr && p.dmr);
	return p;
}

static void drain(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	while (ibv_poll_cq(cq, 1, &wc) == 1)
		;
}

static void free_pair(struct pair *p)
{
	MUST(ibv_destroy_qp(p->a) == 0 && ibv_destroy_qp(p->b) == 0);
	MUST(ibv_dereg_mr(p->smr) == 0 && ibv_dereg_mr(p->dmr) == 0);
	free(p->src);
	free(p->dst);
	drain(scq);
	drain(rcq);
}

/* `a` writes 8 bytes of 'w' to `raddr` through `rkey`; its completion status. */
static enum ibv_wc_status write8(struct pair *p, uint64_t raddr, uint32_t rkey)
{
	memset(p->src, 'w', 8);
	struct ibv_sge sge = {(uintptr_t)p->src, 8, p->smr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	MUST(ibv_post_send(p->a, &wr, &bad) == 0);
	struct ibv_wc wc = wait_wc(scq);
	CHECK(wc.qp_num == p->a->qp_num, "the writer's completion");
	return wc.status;
}

/* `b` posts one WR and returns its completion. */
static struct ibv_wc post_b(struct pair *p, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	MUST(ibv_post_send(p->b, wr, &bad) == 0);
	struct ibv_wc wc = wait_wc(scq);
	CHECK(wc.qp_num == p->b->qp_num, "the binder's completion");
	return wc;
}

static void caps(void)
{
	struct ibv_device_attr_ex a;
	MUST(ibv_query_device_ex(ctx, NULL, &a) == 0);
	CHECK(a.orig_attr.max_mw > 0, "max_mw %d", a.orig_attr.max_mw);
	CHECK(a.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW, "MEM_WINDOW");
	CHECK(a.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, "MEM_WINDOW_TYPE_2B");
	CHECK(a.device_cap_flags_ex & (1ULL << 40), "IB_UVERBS_DEVICE_ATOMIC_WRITE in device_cap_flags_ex");
}

/* Unbinds a type 1 window: a bind to no region, length 0. */
static void unbind1(struct pair *p, struct ibv_mw *mw)
{
	struct ibv_mw_bind none = {.wr_id = 8, .send_flags = IBV_SEND_SIGNALED};
	CHECK(ibv_bind_mw(p->b, mw, &none) == 0, "zero-length bind");
	CHECK(wait_wc(scq).status == IBV_WC_SUCCESS, "unbind");
}

static void type1(void)
{
	struct pair p = new_pair(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	MUST(mw);
	uint32_t before = mw->rkey;
	struct ibv_mw_bind bind = {.wr_id = 7, .send_flags = IBV_SEND_SIGNALED,
				   .bind_info = {.mr = p.dmr, .addr = (uintptr_t)p.dst + 64, .length = 128,
						 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};
	CHECK(ibv_bind_mw(p.b, mw, &bind) == 0, "ibv_bind_mw");
	struct ibv_wc wc = wait_wc(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 7, "bind %d", wc.status);
	CHECK(mw->rkey != before && (mw->rkey >> 8) == (before >> 8), "ibv_inc_rkey: %#x -> %#x", before, mw->rkey);
	CHECK(write8(&p, (uintptr_t)p.dst + 64, mw->rkey) == IBV_WC_SUCCESS, "inside the window");
	CHECK(memcmp(p.dst + 64, "wwwwwwww", 8) == 0, "placed through the window");
	CHECK(write8(&p, (uintptr_t)p.dst + 64, before) == IBV_WC_REM_ACCESS_ERR, "the old key is dead");
	/* The pair is in ERR now; a fresh QP unbinds the window so the region can go. */
	struct pair q = new_pair(IBV_ACCESS_LOCAL_WRITE);
	unbind1(&q, mw);
	free_pair(&p);
	free_pair(&q);

	/* Outside the window; through a region rkey the region does not allow. */
	p = new_pair(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	bind.bind_info.mr = p.dmr;
	bind.bind_info.addr = (uintptr_t)p.dst;
	CHECK(ibv_bind_mw(p.b, mw, &bind) == 0, "rebind a type 1 window");
	CHECK(wait_wc(scq).status == IBV_WC_SUCCESS, "rebind");
	CHECK(write8(&p, (uintptr_t)p.dst + 124, mw->rkey) == IBV_WC_REM_ACCESS_ERR, "past the window's end");
	q = new_pair(IBV_ACCESS_LOCAL_WRITE);
	unbind1(&q, mw);
	free_pair(&p);
	free_pair(&q);

	/* A type 2 window is not bound with ibv_bind_mw. */
	struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	MUST(mw2);
	p = new_pair(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	bind.bind_info.mr = p.dmr;
	CHECK(ibv_bind_mw(p.b, mw2, &bind) == EINVAL, "ibv_bind_mw on a type 2 window");
	free_pair(&p);
	MUST(ibv_dealloc_mw(mw2) == 0);
	MUST(ibv_dealloc_mw(mw) == 0);

	errno = 0;
	CHECK(ibv_alloc_mw(pd, 3) == NULL && errno == EINVAL, "type 3: errno %d", errno);
}

static void type2(void)
{
	struct pair p = new_pair(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	MUST(mw);
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr wr = {.wr_id = 9, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = p.dmr, .addr = (uintptr_t)p.dst, .length = LEN,
							 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	struct ibv_wc wc = post_b(&p, &wr);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "IBV_WR_BIND_MW %d", wc.status);
	CHECK(write8(&p, (uintptr_t)p.dst, rkey) == IBV_WC_SUCCESS, "write through a type 2 window");
	/* ibv_dereg_mr under a bound window: EBUSY, nothing changes. */
	errno = 0;
	CHECK(ibv_dereg_mr(p.dmr) == EBUSY, "dereg under a bound window");
	CHECK(write8(&p, (uintptr_t)p.dst + 8, rkey) == IBV_WC_SUCCESS, "the window still works");
	/* Local invalidation. */
	struct ibv_send_wr inv = {.wr_id = 10, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
				  .invalidate_rkey = rkey};
	wc = post_b(&p, &inv);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV, "LOCAL_INV %d", wc.status);
	CHECK(write8(&p, (uintptr_t)p.dst, rkey) == IBV_WC_REM_ACCESS_ERR, "invalidated");
	free_pair(&p);

	/* Remote invalidation, bound with the extended API this time. */
	p = new_pair(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_qp_ex *bx = ibv_qp_to_qp_ex(p.b);
	MUST(bx);
	rkey = ibv_inc_rkey(mw->rkey);
	struct ibv_mw_bind_info info = {.mr = p.dmr, .addr = (uintptr_t)p.dst, .length = 256,
					.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED};
	ibv_wr_start(bx);
	bx->wr_id = 11;
	bx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(bx, mw, rkey, &info);
	CHECK(ibv_wr_complete(bx) == 0, "ibv_wr_bind_mw");
	wc = wait_wc(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 11, "ibv_wr_bind_mw %d", wc.status);
	CHECK(write8(&p, 16, rkey) == IBV_WC_SUCCESS, "zero-based: address 16 of the window");
	CHECK(memcmp(p.dst + 16, "wwwwwwww", 8) == 0, "placed at the window's byte 16");
	struct ibv_sge rsge = {(uintptr_t)p.dst + 1024, 64, p.dmr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 12, .sg_list = &rsge, .num_sge = 1}, *rbad;
	MUST(ibv_post_recv(p.b, &rwr, &rbad) == 0);
	struct ibv_sge ssge = {(uintptr_t)p.src, 8, p.smr->lkey};
	struct ibv_send_wr swi = {.wr_id = 13, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
				  .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = rkey}, *sbad;
	MUST(ibv_post_send(p.a, &swi, &sbad) == 0);
	CHECK(wait_wc(scq).status == IBV_WC_SUCCESS, "SEND_WITH_INV");
	wc = wait_wc(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && (wc.wc_flags & IBV_WC_WITH_INV) && wc.invalidated_rkey == rkey,
	      "receive: status %d flags %#x rkey %#x", wc.status, wc.wc_flags, wc.invalidated_rkey);
	CHECK(write8(&p, 16, rkey) == IBV_WC_REM_ACCESS_ERR, "invalidated by the peer");
	free_pair(&p);

	/* Deallocating a bound window: allowed, its rkey dies. */
	p = new_pair(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = p.dmr;
	wr.bind_mw.bind_info.addr = (uintptr_t)p.dst;
	CHECK(post_b(&p, &wr).status == IBV_WC_SUCCESS, "bind again");
	CHECK(ibv_dealloc_mw(mw) == 0, "dealloc of a bound window");
	CHECK(write8(&p, (uintptr_t)p.dst, rkey) == IBV_WC_REM_ACCESS_ERR, "a deallocated window's rkey");
	free_pair(&p);
}

static void bad_binds(void)
{
	/* The region lacks IBV_ACCESS_MW_BIND (IBA C10-73). */
	struct pair p = new_pair(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	MUST(mw);
	struct ibv_send_wr wr = {.wr_id = 20, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = p.dmr, .addr = (uintptr_t)p.dst, .length = 64,
							 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	struct ibv_wc wc = post_b(&p, &wr);
	CHECK(wc.status == IBV_WC_MW_BIND_ERR && wc.wr_id == 20, "bind without MW_BIND: %d", wc.status);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	MUST(ibv_query_qp(p.b, &qa, IBV_QP_STATE, &qi) == 0);
	CHECK(qa.qp_state == IBV_QPS_ERR, "a failed bind puts the QP in ERR");
	free_pair(&p);

	/* Invalidating a foreign rkey: a window of another PD, a region's rkey. */
	struct ibv_pd *other = ibv_alloc_pd(ctx);
	MUST(other);
	struct ibv_mw *foreign = ibv_alloc_mw(other, IBV_MW_TYPE_2);
	MUST(foreign);
	p = new_pair(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_send_wr inv = {.wr_id = 21, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
				  .invalidate_rkey = foreign->rkey};
	wc = post_b(&p, &inv);
	CHECK(wc.status == IBV_WC_LOC_QP_OP_ERR, "LOCAL_INV of another PD's window: %d", wc.status);
	free_pair(&p);
	p = new_pair(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_WRITE);
	inv.invalidate_rkey = p.dmr->rkey;
	CHECK(post_b(&p, &inv).status == IBV_WC_LOC_QP_OP_ERR, "LOCAL_INV of a region's rkey");
	free_pair(&p);
	/* The PD with a window refuses to go. */
	CHECK(ibv_dealloc_pd(other) == EBUSY, "dealloc_pd with a window");
	MUST(ibv_dealloc_mw(foreign) == 0 && ibv_dealloc_pd(other) == 0);
	MUST(ibv_dealloc_mw(mw) == 0);
}

static void atomic_write(void)
{
	struct pair p = new_pair(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(p.a);
	MUST(ax);
	uint64_t v = 0x0123456789abcdefULL;
	ibv_wr_start(ax);
	ax->wr_id = 30;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(ax, p.dmr->rkey, (uintptr_t)p.dst + 8, &v);
	CHECK(ibv_wr_complete(ax) == 0, "ibv_wr_atomic_write");
	struct ibv_wc wc = wait_wc(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_ATOMIC_WRITE, "atomic write %d", wc.status);
	CHECK(memcmp(p.dst + 8, &v, 8) == 0, "8 bytes placed as sent");
	/* Through ibv_post_send with an SGE, and the bad inputs. */
	memcpy(p.src, "ABCDEFGH", 8);
	struct ibv_sge sge = {(uintptr_t)p.src, 8, p.smr->lkey};
	struct ibv_send_wr wr = {.wr_id = 31, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_WRITE,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)p.dst + 16;
	wr.wr.rdma.rkey = p.dmr->rkey;
	MUST(ibv_post_send(p.a, &wr, &bad) == 0);
	CHECK(wait_wc(scq).status == IBV_WC_SUCCESS, "atomic write by ibv_post_send");
	CHECK(memcmp(p.dst + 16, "ABCDEFGH", 8) == 0, "placed");
	wr.wr.rdma.remote_addr = (uintptr_t)p.dst + 20;
	CHECK(ibv_post_send(p.a, &wr, &bad) == EINVAL, "misaligned atomic write");
	sge.length = 4;
	wr.wr.rdma.remote_addr = (uintptr_t)p.dst + 16;
	CHECK(ibv_post_send(p.a, &wr, &bad) == EINVAL, "atomic write of 4 bytes");
	free_pair(&p);

	/* ibv_wr_flush lies past rdma-core 44's ibv_qp_ex: a QP asking for it
	 * (IBV_QP_EX_WITH_FLUSH, 1 << 11) is refused. */
	struct ibv_qp_init_attr_ex init = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
					   .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
						   .max_recv_sge = 1},
					   .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					   .pd = pd, .send_ops_flags = 1 << 11};
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &init) == NULL && errno == EOPNOTSUPP, "WITH_FLUSH: errno %d", errno);
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
	scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	MUST(pd && scq && rcq);

	caps();
	type1();
	type2();
	bad_binds();
	atomic_write();

	MUST(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0);
	MUST(ibv_dealloc_pd(pd) == 0);
	MUST(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);
	if (failures)
		return 1;
	printf("ok\n");
	return 0;
}
