/* The ACK of a receiver that exits at once (spec/rc-reliability.md §3), one
 * side per run, over UDP (the test sets SOFTVERBS_SHM=0):
 * `exit_ack receiver` creates an RC QP, prints "QPN <qpn> GID <32 hex
 * digits>", reads the sender's line, connects, posts one receive, prints
 * "READY", polls its receive CQ until the SEND arrived, prints "GOT" and
 * calls exit(0) at once: nothing destroyed or closed.
 * `exit_ack sender` reads the receiver's line, creates its RC QP (ACK
 * timeout 14: 67 ms, 7 retries), prints its own line, reads "READY",
 * posts one signaled SEND and checks that it completes with success: the
 * receiver's ACK left although the receiver exited right after its poll.
 * Each prints "ok" last and exits 0 when every check passed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "check.h"
#include "rc.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static char buf[64];

static struct ibv_qp *rc_qp(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	MUST(list && list[0]);
	ctx = ibv_open_device(list[0]);
	MUST(ctx);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	MUST(pd && cq && mr);
	struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					     .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	MUST(qp);
	return qp;
}

static void say(struct ibv_qp *qp)
{
	union ibv_gid gid;
	MUST(ibv_query_gid(ctx, 1, 0, &gid) == 0);
	printf("QPN %u GID ", qp->qp_num);
	for (int i = 0; i < 16; i++)
		printf("%02x", gid.raw[i]);
	printf("\n");
	fflush(stdout);
}

static void hear(uint32_t *qpn, union ibv_gid *gid)
{
	char hex[33];
	MUST(scanf(" QPN %u GID %32s", qpn, hex) == 2);
	for (int i = 0; i < 16; i++)
		MUST(sscanf(hex + 2 * i, "%2hhx", &gid->raw[i]) == 1);
}

static void expect(const char *word)
{
	char got[16];
	MUST(scanf(" %15s", got) == 1 && strcmp(got, word) == 0);
}

int main(int argc, char **argv)
{
	MUST(argc == 2);
	int receiver = strcmp(argv[1], "receiver") == 0;
	uint32_t qpn;
	union ibv_gid gid;
	struct ibv_qp *qp = rc_qp();
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	if (receiver) {
		say(qp);
		hear(&qpn, &gid);
		connect_rc(qp, qpn, gid);
		struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
		MUST(ibv_post_recv(qp, &wr, &bad) == 0);
		printf("READY\n");
		fflush(stdout);
		struct ibv_wc wc = wait_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV, "status %d", wc.status);
		printf("GOT\n%s\n", failures ? "failed" : "ok");
		fflush(stdout);
		exit(failures ? 1 : 0);
	}
	hear(&qpn, &gid);
	say(qp);
	connect_rc(qp, qpn, gid);
	expect("READY");
	memcpy(buf, "last one", 8);
	struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	MUST(ibv_post_send(qp, &wr, &bad) == 0);
	struct ibv_wc wc = wait_wc(cq);
	CHECK(wc.wr_id == 2 && wc.status == IBV_WC_SUCCESS, "the SEND ended with %s",
	      ibv_wc_status_str(wc.status));
	printf("%s\n", failures ? "failed" : "ok");
	return failures ? 1 : 0;
}
