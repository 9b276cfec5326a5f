/* What NCCL's IB transport does with libibverbs at start-up, done the way it
 * does it (spec/nccl.md): no link-time dependency, dlopen("libibverbs.so")
 * before "libibverbs.so.1", every verb by dlvsym(handle, name, "IBVERBS_1.1"),
 * a few newer ones by their own version; then the calls of its device scan
 * and QP set-up through those pointers, and the verbs_context query_port op
 * with NCCL's larger ibv_port_attr (it has active_speed_ex). */
#define _GNU_SOURCE /* dlvsym */
#include <infiniband/verbs.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

/* The symbols NCCL's buildIbvSymbols loads with LOAD_SYM: all must resolve
 * at IBVERBS_1.1, or NCCL disables its IB transport. */
static const char *const required[] = {
	"ibv_get_device_list", "ibv_free_device_list", "ibv_get_device_name", "ibv_open_device",
	"ibv_close_device",    "ibv_get_async_event",  "ibv_ack_async_event", "ibv_query_device",
	"ibv_query_port",      "ibv_query_gid",        "ibv_query_qp",        "ibv_alloc_pd",
	"ibv_dealloc_pd",      "ibv_reg_mr",           "ibv_dereg_mr",        "ibv_create_cq",
	"ibv_destroy_cq",      "ibv_create_qp",        "ibv_modify_qp",       "ibv_destroy_qp",
	"ibv_fork_init",       "ibv_event_type_str",
};

/* LOAD_SYM_VERSION: optional, each at the version that introduced it. */
static const struct {
	const char *name, *version;
	int expected; /* 1: softverbs exports it (rdma-core 44's ABI) */
} optional[] = {
	{ "ibv_reg_mr_iova2", "IBVERBS_1.8", 1 },
	{ "ibv_reg_dmabuf_mr", "IBVERBS_1.12", 1 },
	{ "ibv_query_ece", "IBVERBS_1.10", 1 },
	{ "ibv_set_ece", "IBVERBS_1.10", 1 },
	{ "ibv_query_port_speed", "IBVERBS_1.16", 0 }, /* rdma-core 59+; NCCL falls back */
};

static void *sym(void *h, const char *name)
{
	void *p = dlvsym(h, name, "IBVERBS_1.1");
	MUST(p != NULL);
	return p;
}

/* NCCL's ibv_port_attr: rdma-core's newer one, with active_speed_ex. */
struct nccl_port_attr {
	struct ibv_port_attr a;
	uint32_t active_speed_ex;
};

int main(void)
{
	void *h = dlopen("libibverbs.so", RTLD_NOW);
	if (!h)
		h = dlopen("libibverbs.so.1", RTLD_NOW);
	MUST(h != NULL);
	CHECK(dlsym(h, "softverbs_private_version") != NULL,
	      "dlopen(\"libibverbs.so\") found another libibverbs (the library directory needs a libibverbs.so link)");
	for (size_t i = 0; i < sizeof required / sizeof *required; i++)
		CHECK(dlvsym(h, required[i], "IBVERBS_1.1") != NULL, "%s@IBVERBS_1.1: %s", required[i], dlerror());
	for (size_t i = 0; i < sizeof optional / sizeof *optional; i++) {
		void *p = dlvsym(h, optional[i].name, optional[i].version);
		if (optional[i].expected)
			CHECK(p != NULL, "%s@%s", optional[i].name, optional[i].version);
		printf("%s@%s: %s\n", optional[i].name, optional[i].version, p ? "yes" : "no");
	}

	int (*fork_init)(void) = sym(h, "ibv_fork_init");
	struct ibv_device **(*get_list)(int *) = sym(h, "ibv_get_device_list");
	void (*free_list)(struct ibv_device **) = sym(h, "ibv_free_device_list");
	const char *(*dev_name)(struct ibv_device *) = sym(h, "ibv_get_device_name");
	struct ibv_context *(*open_dev)(struct ibv_device *) = sym(h, "ibv_open_device");
	int (*close_dev)(struct ibv_context *) = sym(h, "ibv_close_device");
	int (*query_device)(struct ibv_context *, struct ibv_device_attr *) = sym(h, "ibv_query_device");
	int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *) = sym(h, "ibv_query_port");
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *) = sym(h, "ibv_query_gid");
	struct ibv_pd *(*alloc_pd)(struct ibv_context *) = sym(h, "ibv_alloc_pd");
	int (*dealloc_pd)(struct ibv_pd *) = sym(h, "ibv_dealloc_pd");
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int) = sym(h, "ibv_reg_mr");
	int (*dereg_mr)(struct ibv_mr *) = sym(h, "ibv_dereg_mr");
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int) =
		sym(h, "ibv_create_cq");
	int (*destroy_cq)(struct ibv_cq *) = sym(h, "ibv_destroy_cq");
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *) = sym(h, "ibv_create_qp");
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int) = sym(h, "ibv_modify_qp");
	int (*query_qp)(struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *) = sym(h, "ibv_query_qp");
	int (*destroy_qp)(struct ibv_qp *) = sym(h, "ibv_destroy_qp");
	const char *(*event_str)(enum ibv_event_type) = sym(h, "ibv_event_type_str");
	int (*query_ece)(struct ibv_qp *, struct ibv_ece *) = dlvsym(h, "ibv_query_ece", "IBVERBS_1.10");

	CHECK(fork_init() == 0, "ibv_fork_init");
	CHECK(strcmp(event_str(IBV_EVENT_PORT_ACTIVE), "port active") == 0, "ibv_event_type_str");
	int n = 0;
	struct ibv_device **list = get_list(&n);
	MUST(list != NULL && n >= 1);
	CHECK(strncmp(dev_name(list[0]), "softverbs", 9) == 0, "device name %s", dev_name(list[0]));
	struct ibv_context *ctx = open_dev(list[0]);
	MUST(ctx != NULL);
	struct ibv_device_attr da;
	MUST(query_device(ctx, &da) == 0);
	CHECK(da.phys_port_cnt == 1, "one port");

	/* The exported ibv_query_port, and the op NCCL calls first (its own
	 * inline ibv_query_port_ex) with its larger struct: same answer, and the
	 * fields past ours zeroed (rdma-core __lib_query_port). */
	struct ibv_port_attr pa;
	MUST(query_port(ctx, 1, &pa) == 0);
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET, "an active Ethernet port");
	CHECK(pa.gid_tbl_len >= 1, "a GID table");
	struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
	MUST(vctx != NULL);
	struct nccl_port_attr big;
	memset(&big, 0xa5, sizeof big);
	CHECK(vctx->query_port(ctx, 1, &big.a, sizeof big) == 0, "query_port op, NCCL's size");
	CHECK(big.active_speed_ex == 0, "active_speed_ex of a newer struct reads 0 (was 0x%x)", big.active_speed_ex);
	CHECK(big.a.active_speed == pa.active_speed && big.a.active_width == pa.active_width &&
	      big.a.active_mtu == pa.active_mtu && big.a.gid_tbl_len == pa.gid_tbl_len,
	      "the op agrees with ibv_query_port");

	/* NCCL picks a GID index among the table (types from sysfs). */
	union ibv_gid gid;
	for (int i = 0; i < pa.gid_tbl_len; i++)
		CHECK(query_gid(ctx, 1, i, &gid) == 0, "ibv_query_gid %d", i);
	MUST(query_gid(ctx, 1, 0, &gid) == 0);
	CHECK(gid.raw[10] == 0xff && gid.raw[11] == 0xff, "GID 0 is IPv4-mapped");

	/* An RC QP as NCCL makes it, to INIT with its mask, then queried. */
	struct ibv_pd *pd = alloc_pd(ctx);
	MUST(pd != NULL);
	static char buf[4096];
	struct ibv_mr *mr = reg_mr(pd, buf, sizeof buf,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					   IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(mr != NULL, "ibv_reg_mr");
	struct ibv_cq *cq = create_cq(ctx, 64, NULL, NULL, 0);
	MUST(cq != NULL);
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1,
						.max_recv_sge = 1, .max_inline_data = 64 } };
	struct ibv_qp *qp = create_qp(pd, &ia);
	MUST(qp != NULL);
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				  .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	CHECK(modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "to INIT with NCCL's mask");
	struct ibv_qp_init_attr qia;
	CHECK(query_qp(qp, &qa, IBV_QP_STATE, &qia) == 0 && qa.qp_state == IBV_QPS_INIT, "ibv_query_qp");
	CHECK(qia.cap.max_inline_data >= 64, "max_inline_data %u", qia.cap.max_inline_data);
	if (query_ece) {
		struct ibv_ece ece;
		int r = query_ece(qp, &ece);
		/* NCCL treats EOPNOTSUPP as "no ECE" and goes on. */
		CHECK(r == 0 || r == EOPNOTSUPP, "ibv_query_ece: %d", r);
	}
	CHECK(destroy_qp(qp) == 0 && destroy_cq(cq) == 0 && (!mr || dereg_mr(mr) == 0) && dealloc_pd(pd) == 0,
	      "teardown");
	CHECK(close_dev(ctx) == 0, "ibv_close_device");
	free_list(list);
	if (failures)
		return 1;
	printf("ok\n");
	return 0;
}
