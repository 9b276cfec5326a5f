/* Drives the drop-in librdmacm.so.1 (and libibverbs.so.1) as C programs do:
 * event channels, ids in every port space, binding and ports, address and
 * route resolution on loopback, an unreachable address, QPs on ids,
 * synchronous ids, ack accounting, getaddrinfo, options, migrate, create_ep,
 * event names, destroyed ids, and the calls that are not offered yet.
 * Prints "ok" and exits 0, or names the first failed check. */
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "FAIL line %d: %s: ", __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                           \
			fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
			exit(1);                                                \
		}                                                               \
	} while (0)
#define FAILS_WITH(call, err) \
	do { errno = 0; int r_ = (call); CHECK(r_ == -1 && errno == (err), "%s gave %d, wanted -1/%s", #call, r_, #err); } while (0)

static struct sockaddr_in sin_of(const char *ip, int port)
{
	struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, ip, &s.sin_addr);
	return s;
}

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* The next event of `ch`: for `id`, of type `want`, with `status`. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, struct rdma_cm_id *id, int want, int status)
{
	struct rdma_cm_event *ev = NULL;
	CHECK(readable(ch->fd, 5000), "the channel fd is readable when an event is queued");
	CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
	CHECK(ev->id == id, "event for the right id");
	CHECK(ev->event == (enum rdma_cm_event_type)want, "event %s, wanted %s", rdma_event_str(ev->event), rdma_event_str(want));
	CHECK(ev->status == status, "status %d, wanted %d", ev->status, status);
	return ev;
}

static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, enum rdma_port_space ps, const char *dst, int port)
{
	struct rdma_cm_id *id;
	struct sockaddr_in d = sin_of(dst, port);
	CHECK(rdma_create_id(ch, &id, NULL, ps) == 0, "create id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 2000) == 0, "resolve_addr %s", dst);
	rdma_ack_cm_event(expect(ch, id, RDMA_CM_EVENT_ADDR_RESOLVED, 0));
	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(expect(ch, id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
	return id;
}

struct destroyer { struct rdma_cm_id *id; volatile int done; };
static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;
	rdma_destroy_id(d->id);
	d->done = 1;
	return NULL;
}

static void event_names(void)
{
	static const char *names[] = { "ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR",
		"CONNECT_REQUEST", "CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED",
		"ESTABLISHED", "DISCONNECTED", "DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR",
		"ADDR_CHANGE", "TIMEWAIT_EXIT" };
	char want[64];
	for (int i = 0; i < 16; i++) {
		snprintf(want, sizeof want, "RDMA_CM_EVENT_%s", names[i]);
		CHECK(strcmp(rdma_event_str(i), want) == 0, "rdma_event_str(%d) = %s", i, rdma_event_str(i));
	}
	CHECK(strcmp(rdma_event_str(99), "UNKNOWN EVENT") == 0, "unknown event name");
}

static void port_spaces(struct rdma_event_channel *ch)
{
	struct { enum rdma_port_space ps; enum ibv_qp_type qpt; } t[] = {
		{ RDMA_PS_TCP, IBV_QPT_RC }, { RDMA_PS_UDP, IBV_QPT_UD },
		{ RDMA_PS_IPOIB, IBV_QPT_UD }, { RDMA_PS_IB, IBV_QPT_RC } };
	struct rdma_cm_id *id;
	for (unsigned i = 0; i < 4; i++) {
		int ctx;
		CHECK(rdma_create_id(ch, &id, &ctx, t[i].ps) == 0, "create id in ps %#x", t[i].ps);
		CHECK(id->ps == t[i].ps && id->qp_type == t[i].qpt && id->channel == ch && id->context == &ctx,
		      "id fields for ps %#x", t[i].ps);
		CHECK(id->verbs == NULL && id->qp == NULL, "a new id has no device");
		CHECK(rdma_destroy_id(id) == 0, "destroy id");
	}
	FAILS_WITH(rdma_create_id(ch, &id, NULL, (enum rdma_port_space)0x999), EINVAL);
}

/* The device's address: its GID 0 is IPv4-mapped. */
static struct sockaddr_in device_addr(struct ibv_context *ctx, char *ip)
{
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query gid 0");
	CHECK(gid.raw[10] == 0xff && gid.raw[11] == 0xff, "GID 0 is IPv4-mapped");
	inet_ntop(AF_INET, &gid.raw[12], ip, INET_ADDRSTRLEN);
	return sin_of(ip, 0);
}

static void binding(struct rdma_event_channel *ch, struct ibv_context *dev, const char *dev_ip)
{
	struct rdma_cm_id *a, *b;
	struct sockaddr_in s = sin_of(dev_ip, 0);
	CHECK(rdma_create_id(ch, &a, NULL, RDMA_PS_TCP) == 0 && rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0, "ids");
	CHECK(rdma_bind_addr(a, (struct sockaddr *)&s) == 0, "bind to the device address");
	CHECK(a->verbs == dev && a->port_num == 1 && a->pd != NULL, "bound to the device that owns the address");
	int port = ntohs(rdma_get_src_port(a));
	CHECK(port >= 1024, "an ephemeral port was given: %d", port);
	FAILS_WITH(rdma_bind_addr(a, (struct sockaddr *)&s), EINVAL); /* bound already */
	s.sin_port = htons(port);
	FAILS_WITH(rdma_bind_addr(b, (struct sockaddr *)&s), EADDRINUSE);
	struct sockaddr_in any = sin_of("0.0.0.0", port);
	FAILS_WITH(rdma_bind_addr(b, (struct sockaddr *)&any), EADDRNOTAVAIL);
	struct sockaddr_in far = sin_of("198.51.100.7", 0);
	FAILS_WITH(rdma_bind_addr(b, (struct sockaddr *)&far), EADDRNOTAVAIL);
	if (strcmp(dev_ip, "127.0.0.1") != 0) {
		struct sockaddr_in lo = sin_of("127.0.0.1", 0);
		FAILS_WITH(rdma_bind_addr(b, (struct sockaddr *)&lo), ENODEV);
	}
	struct sockaddr un = { .sa_family = AF_UNIX };
	FAILS_WITH(rdma_bind_addr(b, &un), EAFNOSUPPORT);
	/* A port in another port space is free; the wildcard binds no device. */
	struct rdma_cm_id *u;
	CHECK(rdma_create_id(ch, &u, NULL, RDMA_PS_UDP) == 0, "udp id");
	CHECK(rdma_bind_addr(u, (struct sockaddr *)&s) == 0, "same port, other port space");
	CHECK(rdma_destroy_id(a) == 0 && rdma_destroy_id(u) == 0, "destroy");
	CHECK(rdma_bind_addr(b, (struct sockaddr *)&any) == 0 && b->verbs == NULL, "wildcard bind binds no device");
	CHECK(ntohs(rdma_get_src_port(b)) == port, "the port given back is free again");
	struct rdma_cm_id *c;
	CHECK(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0, "id");
	FAILS_WITH(rdma_bind_addr(c, (struct sockaddr *)&s), EADDRNOTAVAIL); /* the wildcard holds it */
	CHECK(rdma_destroy_id(b) == 0 && rdma_destroy_id(c) == 0, "destroy");
}

static void channel_basics(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev;
	CHECK(ch->fd >= 0, "a real fd");
	CHECK(!readable(ch->fd, 0), "no event yet");
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK");
	FAILS_WITH(rdma_get_cm_event(ch, &ev), EAGAIN);
	CHECK(fcntl(ch->fd, F_SETFL, fl) == 0, "back to blocking");
	FAILS_WITH(rdma_get_cm_event(ch, NULL), EINVAL);
	FAILS_WITH(rdma_ack_cm_event(NULL), EINVAL);
}

static void resolution(struct rdma_event_channel *ch, struct ibv_context *dev, const char *dev_ip)
{
	struct rdma_cm_id *id;
	struct sockaddr_in d = sin_of("127.0.0.1", 7471);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "id");
	FAILS_WITH(rdma_resolve_route(id, 2000), EINVAL); /* address first */
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 2000) == 0, "resolve_addr on loopback");
	CHECK(rpoll(&(struct pollfd){ .fd = ch->fd, .events = POLLIN }, 1, 5000) == 1, "rpoll serves the channel fd");
	struct rdma_cm_event *ev = expect(ch, id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	CHECK(!readable(ch->fd, 0), "the fd is quiet once the queue is empty");
	CHECK(id->verbs == dev && id->port_num == 1, "id->verbs is the device's context");
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	CHECK(pd != NULL && ibv_dealloc_pd(pd) == 0, "id->verbs works with ibv_alloc_pd");
	struct sockaddr_in *src = (struct sockaddr_in *)rdma_get_local_addr(id);
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &src->sin_addr, ip, sizeof ip);
	CHECK(src->sin_family == AF_INET && strcmp(ip, dev_ip) == 0, "source is the device address, not %s", ip);
	CHECK(rdma_get_src_port(id) != 0 && rdma_get_dst_port(id) == htons(7471), "ports");
	union ibv_gid gid0;
	ibv_query_gid(dev, 1, 0, &gid0);
	CHECK(memcmp(&id->route.addr.addr.ibaddr.sgid, &gid0, 16) == 0, "sgid is GID 0");
	CHECK(id->route.addr.addr.ibaddr.pkey == htons(0xffff), "pkey");
	CHECK(rdma_ack_cm_event(ev) == 0, "ack");
	FAILS_WITH(rdma_ack_cm_event(ev), EINVAL); /* acked already */
	FAILS_WITH(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 2000), EINVAL); /* resolved already */

	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(expect(ch, id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(dev, 1, &pa) == 0, "query port");
	struct ibv_sa_path_rec *p = id->route.path_rec;
	CHECK(id->route.num_paths == 1 && p != NULL, "one path");
	CHECK(memcmp(&p->sgid, &gid0, 16) == 0, "path sgid");
	CHECK(p->dgid.raw[10] == 0xff && p->dgid.raw[12] == 127 && p->dgid.raw[15] == 1, "path dgid ::ffff:127.0.0.1");
	CHECK(p->pkey == htons(0xffff) && p->reversible == 1 && p->hop_limit == 64, "pkey, reversible, hop limit");
	CHECK(p->mtu == pa.active_mtu && p->mtu_selector == 1, "path MTU is the port's (%d vs %d)", p->mtu, pa.active_mtu);
	CHECK(pa.active_width == 2 && pa.active_speed == 32   ? p->rate == IBV_RATE_100_GBPS
	      : pa.active_width == 1 && pa.active_speed == 1 ? p->rate == IBV_RATE_2_5_GBPS
							     : p->rate != 0,
	      "the rate of the port (width %d, speed %d): %d", pa.active_width, pa.active_speed, p->rate);
	CHECK(p->packet_life_time == 18 && p->traffic_class == 0 && p->slid == 0 && p->dlid == 0, "RoCE defaults");
	uint32_t fl = (ntohs(rdma_get_src_port(id)) * 31 + 7471) & 0xfffff;
	CHECK(ntohl(p->flow_label) == fl, "flow label %u, wanted %u", ntohl(p->flow_label), fl);

	/* Options reach the path: TOS → traffic class, ACK timeout → lifetime. */
	struct rdma_cm_id *o;
	uint8_t tos = 32, ack = 14;
	int one = 1;
	CHECK(rdma_create_id(ch, &o, NULL, RDMA_PS_TCP) == 0, "id");
	CHECK(rdma_set_option(o, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1) == 0, "TOS");
	CHECK(rdma_set_option(o, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack, 1) == 0, "ACK_TIMEOUT");
	CHECK(rdma_set_option(o, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one) == 0, "REUSEADDR");
	CHECK(rdma_set_option(o, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof one) == 0, "AFONLY");
	FAILS_WITH(rdma_set_option(o, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &one, sizeof one), EINVAL);
	FAILS_WITH(rdma_set_option(o, RDMA_OPTION_ID, 77, &one, sizeof one), ENOSYS);
	CHECK(rdma_resolve_addr(o, NULL, (struct sockaddr *)&d, 2000) == 0, "resolve");
	rdma_ack_cm_event(expect(ch, o, RDMA_CM_EVENT_ADDR_RESOLVED, 0));
	FAILS_WITH(rdma_set_option(o, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof one), EINVAL);
	CHECK(rdma_resolve_route(o, 2000) == 0, "route");
	rdma_ack_cm_event(expect(ch, o, RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
	CHECK(o->route.path_rec->traffic_class == 32 && o->route.path_rec->packet_life_time == 13, "options in the path");
	CHECK(rdma_destroy_id(o) == 0 && rdma_destroy_id(id) == 0, "destroy");
}

/* 198.51.100.7 (TEST-NET-2): routed somewhere no softverbs device is
 * (ADDR_ERROR, -ENODEV), or not routed at all (the call fails, ENETUNREACH),
 * as the kernel does; which one depends on this host's routes. */
static void unreachable(struct rdma_event_channel *ch)
{
	struct sockaddr_in d = sin_of("198.51.100.7", 7471);
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	int routed = connect(s, (struct sockaddr *)&d, sizeof d) == 0;
	close(s);
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "id");
	if (!routed) {
		FAILS_WITH(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 500), ENETUNREACH);
	} else {
		CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 500) == 0, "resolve_addr starts");
		rdma_ack_cm_event(expect(ch, id, RDMA_CM_EVENT_ADDR_ERROR, -ENODEV));
		CHECK(id->verbs == NULL, "no device");
	}
	CHECK(rdma_destroy_id(id) == 0, "destroy");
}

static void qps(struct rdma_event_channel *ch)
{
	struct ibv_qp_init_attr a = { .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
				      .qp_type = IBV_QPT_RC };
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	struct rdma_cm_id *idle;
	CHECK(rdma_create_id(ch, &idle, NULL, RDMA_PS_TCP) == 0, "id");
	FAILS_WITH(rdma_create_qp(idle, NULL, &a), EINVAL); /* no device yet */
	rdma_destroy_id(idle);

	struct rdma_cm_id *rc = resolved(ch, RDMA_PS_TCP, "127.0.0.1", 7471);
	CHECK(rdma_create_qp(rc, NULL, &a) == 0, "rdma_create_qp (RC)");
	CHECK(rc->qp && rc->send_cq && rc->recv_cq && rc->send_cq_channel && rc->recv_cq_channel, "QP and its CQs");
	CHECK(rc->qp->pd == rc->pd && rc->qp->context == rc->verbs, "the id's PD and device");
	CHECK(ibv_query_qp(rc->qp, &qa, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS, &qia) == 0, "query");
	CHECK(qa.qp_state == IBV_QPS_INIT && qa.port_num == 1 && qa.pkey_index == 0 && qa.qp_access_flags == 0,
	      "RC QP left in INIT (state %d, port %d, access %#x)", qa.qp_state, qa.port_num, qa.qp_access_flags);
	FAILS_WITH(rdma_create_qp(rc, NULL, &a), EINVAL); /* one QP per id */
	int mask = 0;
	memset(&qa, 0, sizeof qa);
	qa.qp_state = IBV_QPS_INIT;
	CHECK(rdma_init_qp_attr(rc, &qa, &mask) == 0, "init_qp_attr INIT");
	CHECK(mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), "INIT mask %#x", mask);
	rdma_destroy_qp(rc);
	CHECK(rc->qp == NULL && rc->send_cq == NULL && rc->recv_cq == NULL, "QP and CQs gone");
	rdma_destroy_id(rc);

	struct rdma_cm_id *ud = resolved(ch, RDMA_PS_UDP, "127.0.0.1", 7472);
	a.qp_type = IBV_QPT_UD;
	a.send_cq = a.recv_cq = NULL; /* rdma_create_qp wrote the id's CQs back into `a` */
	CHECK(rdma_create_qp(ud, NULL, &a) == 0, "rdma_create_qp (UD)");
	CHECK(ibv_query_qp(ud->qp, &qa, IBV_QP_STATE | IBV_QP_QKEY | IBV_QP_SQ_PSN, &qia) == 0, "query");
	CHECK(qa.qp_state == IBV_QPS_RTS && qa.qkey == RDMA_UDP_QKEY && qa.sq_psn == 0, "UD QP in RTS with the UDP Q_Key");
	memset(&qa, 0, sizeof qa);
	qa.qp_state = IBV_QPS_INIT;
	CHECK(rdma_init_qp_attr(ud, &qa, &mask) == 0 && (mask & IBV_QP_QKEY) && qa.qkey == RDMA_UDP_QKEY, "UD INIT attrs");
	rdma_destroy_qp(ud);
	rdma_destroy_id(ud);

	struct rdma_cm_id *ib = resolved(ch, RDMA_PS_IPOIB, "127.0.0.1", 7473);
	a.send_cq = a.recv_cq = NULL;
	FAILS_WITH(rdma_create_qp(ib, NULL, &a), ENOENT); /* no SA for the IPoIB Q_Key */
	rdma_destroy_id(ib);

	/* An SRQ on an id is used by its QP. */
	struct rdma_cm_id *s = resolved(ch, RDMA_PS_TCP, "127.0.0.1", 7474);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	CHECK(rdma_create_srq(s, NULL, &sa) == 0 && s->srq != NULL, "rdma_create_srq");
	a.qp_type = IBV_QPT_RC;
	a.srq = NULL;
	a.send_cq = a.recv_cq = NULL;
	CHECK(rdma_create_qp(s, NULL, &a) == 0 && s->qp->srq == s->srq, "the QP takes the id's SRQ");
	rdma_destroy_qp(s);
	rdma_destroy_srq(s);
	CHECK(s->srq == NULL, "SRQ gone");
	rdma_destroy_id(s);
}

static void synchronous(void)
{
	struct rdma_cm_id *id;
	struct sockaddr_in d = sin_of("127.0.0.1", 7471);
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0 && id->channel != NULL, "a sync id has its own channel");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 2000) == 0, "sync resolve_addr returns after its event");
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED && id->verbs, "the event is in id->event");
	CHECK(rdma_resolve_route(id, 2000) == 0, "sync resolve_route");
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED && id->route.num_paths == 1, "route event");
	FAILS_WITH(rdma_migrate_id(id, NULL), EINVAL); /* synchronous already */
	CHECK(rdma_destroy_id(id) == 0, "destroying acks the id's last event");

	struct sockaddr_in far = sin_of("198.51.100.7", 7471);
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	int routed = connect(s, (struct sockaddr *)&far, sizeof far) == 0;
	close(s);
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "sync id");
	FAILS_WITH(rdma_resolve_addr(id, NULL, (struct sockaddr *)&far, 500), routed ? ENODEV : ENETUNREACH);
	CHECK(rdma_destroy_id(id) == 0, "destroy");
}

static void acks_and_destroy(struct rdma_event_channel *ch)
{
	struct sockaddr_in d = sin_of("127.0.0.1", 7471);
	struct rdma_cm_id *id;
	/* A queued event not yet retrieved is discarded with its id. */
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 2000) == 0 && readable(ch->fd, 1000), "event queued");
	CHECK(rdma_destroy_id(id) == 0, "destroy with a queued event");
	CHECK(!readable(ch->fd, 0), "the event went with the id");
	/* A retrieved event holds the destroy until it is acked. */
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 2000) == 0, "resolve");
	struct rdma_cm_event *ev = expect(ch, id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	struct destroyer dt = { .id = id, .done = 0 };
	pthread_t t;
	pthread_create(&t, NULL, destroy_thread, &dt);
	usleep(200 * 1000);
	CHECK(!dt.done, "rdma_destroy_id waits for the ack");
	CHECK(rdma_ack_cm_event(ev) == 0, "ack");
	pthread_join(t, NULL);
	CHECK(dt.done, "then it returns");
	/* Calls on the destroyed id are refused. */
	FAILS_WITH(rdma_bind_addr(id, (struct sockaddr *)&d), EINVAL);
	FAILS_WITH(rdma_resolve_route(id, 100), EINVAL);
	FAILS_WITH(rdma_destroy_id(id), EINVAL);
	CHECK(rdma_get_src_port(id) == 0, "no port for a destroyed id");
}

static void migrate(struct rdma_event_channel *ch)
{
	struct rdma_event_channel *ch2 = rdma_create_event_channel();
	struct sockaddr_in d = sin_of("127.0.0.1", 7471);
	struct rdma_cm_id *id;
	CHECK(ch2 != NULL && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "channel and id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 2000) == 0 && readable(ch->fd, 1000), "event on ch");
	CHECK(rdma_migrate_id(id, ch2) == 0 && id->channel == ch2, "migrate");
	CHECK(!readable(ch->fd, 0) && readable(ch2->fd, 0), "the queued event moved with the id");
	rdma_ack_cm_event(expect(ch2, id, RDMA_CM_EVENT_ADDR_RESOLVED, 0));
	CHECK(rdma_migrate_id(id, NULL) == 0 && id->channel != ch2, "migrate to synchronous");
	CHECK(rdma_resolve_route(id, 2000) == 0 && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED, "then sync");
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch2);
}

static void addrinfo(void)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *res;
	CHECK(rdma_getaddrinfo(NULL, "7471", &hints, &res) == 0, "passive getaddrinfo");
	CHECK(res->ai_flags == RAI_PASSIVE && res->ai_src_addr && res->ai_src_addr->sa_family == AF_INET &&
	      ((struct sockaddr_in *)res->ai_src_addr)->sin_port == htons(7471) && res->ai_dst_addr == NULL,
	      "passive: the source address");
	CHECK(res->ai_qp_type == IBV_QPT_RC && res->ai_port_space == RDMA_PS_TCP, "RC, PS_TCP");
	rdma_freeaddrinfo(res);

	struct rdma_addrinfo h2 = { .ai_flags = RAI_NUMERICHOST, .ai_qp_type = IBV_QPT_UD };
	CHECK(rdma_getaddrinfo("127.0.0.1", "7472", &h2, &res) == 0, "active getaddrinfo");
	struct sockaddr_in *dst = (struct sockaddr_in *)res->ai_dst_addr;
	CHECK(dst && dst->sin_port == htons(7472) && dst->sin_addr.s_addr == htonl(0x7f000001) && res->ai_src_addr == NULL,
	      "active: the destination address");
	CHECK(res->ai_qp_type == IBV_QPT_UD && res->ai_port_space == RDMA_PS_UDP && res->ai_flags == 0, "UD, PS_UDP");
	rdma_freeaddrinfo(res);
	CHECK(rdma_getaddrinfo("not-a-number", "1", &h2, &res) == EAI_NONAME, "NUMERICHOST refuses a name");

	/* No node nor service: the hints' own addresses (libfabric's ofi_rxm asks so). */
	struct sockaddr_in src = sin_of("127.0.0.1", 7473);
	struct rdma_addrinfo h3 = { .ai_flags = RAI_PASSIVE, .ai_family = AF_INET, .ai_qp_type = IBV_QPT_RC,
				    .ai_port_space = RDMA_PS_TCP, .ai_src_len = sizeof src,
				    .ai_src_addr = (struct sockaddr *)&src };
	CHECK(rdma_getaddrinfo(NULL, NULL, &h3, &res) == 0, "getaddrinfo from the hints alone");
	CHECK(res->ai_flags == RAI_PASSIVE && res->ai_src_len == sizeof src &&
	      memcmp(res->ai_src_addr, &src, sizeof src) == 0 && res->ai_src_addr != h3.ai_src_addr &&
	      res->ai_qp_type == IBV_QPT_RC && res->ai_port_space == RDMA_PS_TCP && res->ai_family == AF_INET,
	      "the hints' source address, copied");
	rdma_freeaddrinfo(res);
	FAILS_WITH(rdma_getaddrinfo(NULL, NULL, NULL, &res), EINVAL);
}

static void endpoints(void)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *res;
	struct rdma_cm_id *ep;
	struct ibv_qp_init_attr a = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK(rdma_getaddrinfo(NULL, "7475", &hints, &res) == 0, "passive addrinfo");
	CHECK(rdma_create_ep(&ep, res, NULL, &a) == 0, "passive create_ep");
	CHECK(rdma_get_src_port(ep) == htons(7475) && ep->qp == NULL, "bound, no QP yet");
	CHECK(rdma_listen(ep, 1) == 0, "the passive endpoint listens");
	rdma_destroy_ep(ep);
	rdma_freeaddrinfo(res);

	struct rdma_addrinfo h2 = { .ai_port_space = RDMA_PS_TCP };
	CHECK(rdma_getaddrinfo("127.0.0.1", "7475", &h2, &res) == 0, "active addrinfo");
	CHECK(rdma_create_ep(&ep, res, NULL, &a) == 0, "active create_ep");
	CHECK(ep->qp && ep->route.num_paths == 1 && ep->channel != NULL, "resolved, with a QP");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	CHECK(ibv_query_qp(ep->qp, &qa, IBV_QP_STATE, &qia) == 0 && qa.qp_state == IBV_QPS_INIT, "QP in INIT");
	rdma_destroy_ep(ep);
	rdma_freeaddrinfo(res);
}

static void connection_calls(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id = resolved(ch, RDMA_PS_TCP, "127.0.0.1", 7471);
	FAILS_WITH(rdma_connect(id, NULL), EINVAL); /* PS_TCP without a QP needs conn_param */
	FAILS_WITH(rdma_disconnect(id), EINVAL);     /* never connected */
	FAILS_WITH(rdma_accept(id, NULL), EINVAL);   /* not a connection request */
	FAILS_WITH(rdma_reject(id, NULL, 0), EINVAL);
	rdma_destroy_id(id);
	struct rdma_cm_id *l;
	CHECK(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0, "id");
	CHECK(rdma_listen(l, 4) == 0, "listen");
	CHECK(l->route.addr.src_addr.sa_family == AF_INET, "listen bound the idle id to the IPv4 wildcard");
	/* REUSEADDR does not share the port of a listening id. */
	struct rdma_cm_id *r1, *r2;
	int one = 1;
	struct sockaddr_in any = sin_of("0.0.0.0", 7476);
	CHECK(rdma_create_id(ch, &r1, NULL, RDMA_PS_TCP) == 0 && rdma_create_id(ch, &r2, NULL, RDMA_PS_TCP) == 0, "ids");
	CHECK(rdma_set_option(r1, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one) == 0 &&
	      rdma_set_option(r2, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one) == 0, "REUSEADDR");
	CHECK(rdma_bind_addr(r1, (struct sockaddr *)&any) == 0, "bind");
	CHECK(rdma_listen(r1, 4) == 0, "listen");
	CHECK(rdma_bind_addr(r2, (struct sockaddr *)&any) == -1, "REUSEADDR does not share a listening id's port");
	rdma_destroy_id(r1);
	rdma_destroy_id(r2);
	rdma_destroy_id(l);
	FAILS_WITH(rsocket(AF_INET, SOCK_STREAM, 0), ENOSYS);
	FAILS_WITH(rclose(0), EBADF);
}

/* The next event on `ch` (within 5 s), which must be `type`. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, enum rdma_cm_event_type type)
{
	struct rdma_cm_event *e;
	CHECK(readable(ch->fd, 5000), "an event (%s) within 5 s", rdma_event_str(type));
	CHECK(rdma_get_cm_event(ch, &e) == 0, "rdma_get_cm_event");
	CHECK(e->event == type, "event %s (status %d), wanted %s", rdma_event_str(e->event), e->status,
	      rdma_event_str(type));
	return e;
}

static struct rdma_cm_id *client(struct rdma_event_channel *cch, const char *ip, int port, const char *data)
{
	struct rdma_cm_id *c = resolved(cch, RDMA_PS_TCP, ip, port);
	struct ibv_qp_init_attr a = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
				      .qp_type = IBV_QPT_RC };
	CHECK(rdma_create_qp(c, NULL, &a) == 0, "client QP");
	struct rdma_conn_param p = { .private_data = data, .private_data_len = strlen(data) + 1,
				     .responder_resources = 2, .initiator_depth = 1, .retry_count = 5, .rnr_retry_count = 6 };
	CHECK(rdma_connect(c, &p) == 0, "rdma_connect");
	return c;
}

/* A request, as the passive side sees it: the peer's private data after the
 * rdma_cm header (56 bytes), its QP, its parameters from our side. */
static struct rdma_cm_id *request(struct rdma_event_channel *sch, struct rdma_cm_id *l, struct rdma_cm_id *c,
				  const char *data)
{
	struct rdma_cm_event *e = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *n = e->id;
	CHECK(e->listen_id == l && n != l && n->verbs == l->verbs && n->channel == sch, "a new id on the listener's channel");
	CHECK(e->param.conn.private_data_len == 56 && strcmp(e->param.conn.private_data, data) == 0,
	      "REQ private data (%u bytes)", e->param.conn.private_data_len);
	CHECK(e->param.conn.qp_num == c->qp->qp_num, "the peer's QP number");
	CHECK(e->param.conn.responder_resources == 1 && e->param.conn.initiator_depth == 2,
	      "responder resources / initiator depth seen from this side (%u/%u)", e->param.conn.responder_resources,
	      e->param.conn.initiator_depth);
	CHECK(e->param.conn.retry_count == 5 && e->param.conn.rnr_retry_count == 6, "retry counts");
	CHECK(rdma_get_src_port(n) == rdma_get_src_port(l) && rdma_get_dst_port(n) == rdma_get_src_port(c),
	      "the new id's ports");
	rdma_ack_cm_event(e);
	return n;
}

static void private_data_both_ways(const char *ip)
{
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	CHECK(sch && cch, "channels");
	struct rdma_cm_id *l;
	struct sockaddr_in a = sin_of(ip, 7480);
	CHECK(rdma_create_id(sch, &l, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(l, (struct sockaddr *)&a) == 0 &&
	      rdma_listen(l, 2) == 0, "listener");

	/* Rejected, with private data back. */
	struct rdma_cm_id *c = client(cch, ip, 7480, "hello-req");
	struct rdma_cm_id *n = request(sch, l, c, "hello-req");
	CHECK(rdma_reject(n, "no-thanks", 10) == 0, "rdma_reject");
	struct rdma_cm_event *e = next_event(cch, RDMA_CM_EVENT_REJECTED);
	CHECK(e->status == 28, "consumer reject: status %d", e->status);
	CHECK(e->param.conn.private_data_len == 148 && strcmp(e->param.conn.private_data, "no-thanks") == 0,
	      "REJ private data (%u bytes)", e->param.conn.private_data_len);
	rdma_ack_cm_event(e);
	rdma_destroy_id(n);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);

	/* Rejected and destroyed before its CONNECT_REQUEST is acked: the event
	 * counts on the listener (as in rdma-core), so the destroy returns. */
	c = client(cch, ip, 7480, "bye");
	e = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	n = e->id;
	CHECK(rdma_reject(n, NULL, 0) == 0, "rdma_reject");
	CHECK(rdma_destroy_id(n) == 0, "destroying the new id before its event is acked");
	rdma_ack_cm_event(e);
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_REJECTED));
	rdma_destroy_qp(c);
	rdma_destroy_id(c);

	/* Accepted, with private data back; then disconnected from the active side. */
	c = client(cch, ip, 7480, "again");
	n = request(sch, l, c, "again");
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	CHECK(rdma_create_qp(n, NULL, &qa) == 0, "server QP");
	struct rdma_conn_param p = { .private_data = "welcome", .private_data_len = 8, .responder_resources = 1,
				     .initiator_depth = 2, .rnr_retry_count = 7 };
	CHECK(rdma_accept(n, &p) == 0, "rdma_accept");
	e = next_event(cch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(e->id == c && e->param.conn.private_data_len == 196 && strcmp(e->param.conn.private_data, "welcome") == 0,
	      "REP private data (%u bytes)", e->param.conn.private_data_len);
	CHECK(e->param.conn.qp_num == n->qp->qp_num, "the acceptor's QP number");
	rdma_ack_cm_event(e);
	e = next_event(sch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(e->id == n, "the passive side is established (RTU)");
	rdma_ack_cm_event(e);
	struct ibv_qp_attr qat;
	struct ibv_qp_init_attr qia;
	CHECK(ibv_query_qp(c->qp, &qat, IBV_QP_STATE | IBV_QP_DEST_QPN, &qia) == 0 && qat.qp_state == IBV_QPS_RTS &&
	      qat.dest_qp_num == n->qp->qp_num, "the client's QP is in RTS, connected to the server's");
	CHECK(ibv_query_qp(n->qp, &qat, IBV_QP_STATE | IBV_QP_DEST_QPN, &qia) == 0 && qat.qp_state == IBV_QPS_RTS &&
	      qat.dest_qp_num == c->qp->qp_num, "the server's QP is in RTS, connected to the client's");
	CHECK(rdma_disconnect(c) == 0, "rdma_disconnect");
	rdma_ack_cm_event(next_event(sch, RDMA_CM_EVENT_DISCONNECTED));
	CHECK(rdma_disconnect(n) == 0, "rdma_disconnect (DREP)");
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_DISCONNECTED));
	CHECK(ibv_query_qp(c->qp, &qat, IBV_QP_STATE, &qia) == 0 && qat.qp_state == IBV_QPS_ERR, "the QP went to ERR");

	/* An active id without a QP: CONNECT_RESPONSE, then rdma_establish sends the RTU. */
	struct rdma_cm_id *q = resolved(cch, RDMA_PS_TCP, ip, 7480);
	struct rdma_conn_param qp_less = { .qp_num = 0x4242, .responder_resources = 1, .initiator_depth = 1,
					   .private_data = "bare", .private_data_len = 5 };
	CHECK(rdma_connect(q, &qp_less) == 0, "rdma_connect without a QP");
	struct rdma_cm_event *r = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *m = r->id;
	CHECK(r->param.conn.qp_num == 0x4242 && strcmp(r->param.conn.private_data, "bare") == 0, "the QP number given");
	rdma_ack_cm_event(r);
	CHECK(rdma_create_qp(m, NULL, &qa) == 0, "server QP");
	CHECK(rdma_accept(m, NULL) == 0, "rdma_accept without conn_param");
	e = next_event(cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(e->id == q && e->param.conn.qp_num == m->qp->qp_num, "CONNECT_RESPONSE with the acceptor's QP");
	rdma_ack_cm_event(e);
	CHECK(rdma_establish(q) == 0, "rdma_establish");
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(next_event(sch, RDMA_CM_EVENT_ESTABLISHED));
	CHECK(rdma_disconnect(m) == 0, "rdma_disconnect from the passive side");
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_DISCONNECTED));
	CHECK(rdma_disconnect(q) == 0, "rdma_disconnect (DREP)");
	rdma_ack_cm_event(next_event(sch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_destroy_qp(m);
	rdma_destroy_id(m);
	rdma_destroy_id(q);

	/* Nobody listens on 7481: the REQ is rejected (invalid service ID, 8). */
	struct rdma_cm_id *x = client(cch, ip, 7481, "anyone?");
	e = next_event(cch, RDMA_CM_EVENT_REJECTED);
	CHECK(e->id == x && e->status == 8, "invalid service ID: status %d", e->status);
	rdma_ack_cm_event(e);
	rdma_destroy_qp(x);
	rdma_destroy_id(x);

	rdma_destroy_qp(n);
	rdma_destroy_id(n);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
	CHECK(!readable(sch->fd, 0) && !readable(cch->fd, 0), "no stray events");
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

/* Multicast on RoCE: the group address becomes its IPv4-mapped MGID, the
 * join reports MULTICAST_JOIN with the address vector to the group, QPN
 * 0xFFFFFF, RDMA_UDP_QKEY and the join's context, and attaches the id's QP:
 * a datagram the QP sends to the group comes back to it (it is a member). A
 * leave detaches it (ibv_destroy_qp is no longer EBUSY). Errors: a non-UD id,
 * a unicast group, a leave of a group not joined. */
static void multicast(const char *dev_ip)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in src = sin_of(dev_ip, 0), grp = sin_of("239.1.43.1", 0), uni = sin_of(dev_ip, 0);
	int ctx;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0, "udp id");
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&grp, 2000) == 0, "resolve a group");
	rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .sq_sig_all = 1,
				       .cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 } };
	CHECK(rdma_create_qp(id, NULL, &qa) == 0, "UD QP");
	char buf[40 + 16] = { 0 };
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge rs = { .addr = (uintptr_t)buf, .length = sizeof buf, .lkey = mr->lkey };
	struct ibv_recv_wr rw = { .sg_list = &rs, .num_sge = 1 }, *brw;
	CHECK(ibv_post_recv(id->qp, &rw, &brw) == 0, "post recv");

	FAILS_WITH(rdma_join_multicast(id, (struct sockaddr *)&uni, NULL), EINVAL);
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&grp, &ctx) == 0, "join");
	struct rdma_cm_event *e = next_event(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
	struct rdma_ud_param *ud = &e->param.ud;
	unsigned char mgid[16] = { [10] = 0xff, [11] = 0xff, [12] = 239, [13] = 1, [14] = 43, [15] = 1 };
	CHECK(e->id == id && e->status == 0 && ud->private_data == &ctx, "the join's context");
	CHECK(ud->qp_num == 0xffffff && ud->qkey == RDMA_UDP_QKEY, "QPN %#x qkey %#x", ud->qp_num, ud->qkey);
	CHECK(ud->ah_attr.is_global && memcmp(ud->ah_attr.grh.dgid.raw, mgid, 16) == 0 && ud->ah_attr.dlid == 0 &&
	      ud->ah_attr.port_num == 1, "the address vector to the group's MGID");
	struct ibv_ah *ah = ibv_create_ah(id->pd, &ud->ah_attr);
	CHECK(ah != NULL, "an AH from the join's address vector");
	struct ibv_sge ss = { .addr = (uintptr_t)buf + 40, .length = 16, .lkey = mr->lkey };
	strcpy(buf + 40, "to the group");
	struct ibv_send_wr sw = { .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .wr.ud = { .ah = ah, .remote_qpn = ud->qp_num, .remote_qkey = ud->qkey } }, *bsw;
	rdma_ack_cm_event(e);
	CHECK(ibv_post_send(id->qp, &sw, &bsw) == 0, "send to the group");
	int got = 0, sent = 0;
	for (int i = 0; i < 5000 && !(got && sent); i++) {
		struct ibv_wc wc;
		while (ibv_poll_cq(cq, 1, &wc) == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS, "completion status %d", wc.status);
			if (wc.opcode == IBV_WC_RECV) {
				CHECK(wc.byte_len == 40 + 16 && strcmp(buf + 40, "to the group") == 0, "the datagram");
				got = 1;
			} else {
				sent = 1;
			}
		}
		usleep(1000);
	}
	CHECK(got && sent, "the member QP got its own datagram to the group");
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&grp) == 0, "leave");
	FAILS_WITH(rdma_leave_multicast(id, (struct sockaddr *)&grp), EADDRNOTAVAIL);
	CHECK(ibv_destroy_ah(ah) == 0, "destroy ah");
	CHECK(ibv_destroy_qp(id->qp) == 0, "the QP is detached: destroy works");
	id->qp = NULL;
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	rdma_destroy_id(id);

	struct rdma_cm_id *t;
	CHECK(rdma_create_id(ch, &t, NULL, RDMA_PS_TCP) == 0, "tcp id");
	CHECK(rdma_bind_addr(t, (struct sockaddr *)&src) == 0, "bind");
	FAILS_WITH(rdma_join_multicast(t, (struct sockaddr *)&grp, NULL), EINVAL);
	rdma_destroy_id(t);

	struct rdma_cm_id *s;
	CHECK(rdma_create_id(NULL, &s, NULL, RDMA_PS_UDP) == 0, "synchronous udp id");
	CHECK(rdma_bind_addr(s, (struct sockaddr *)&src) == 0, "bind");
	CHECK(rdma_join_multicast(s, (struct sockaddr *)&grp, &ctx) == 0, "a synchronous join");
	CHECK(s->event && s->event->event == RDMA_CM_EVENT_MULTICAST_JOIN, "its event kept in id->event");
	CHECK(rdma_leave_multicast(s, (struct sockaddr *)&grp) == 0, "leave");
	rdma_destroy_id(s);
	CHECK(!readable(ch->fd, 0), "no stray events");
	rdma_destroy_event_channel(ch);
}

/* RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH (0xff) ask for the device's limits
 * (rdma-core rdma_connect / rdma_accept); a value above them is EINVAL. */
static void max_rd_atomic(const char *ip)
{
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	CHECK(sch && cch, "channels");
	struct rdma_cm_id *l;
	struct sockaddr_in a = sin_of(ip, 7482);
	CHECK(rdma_create_id(sch, &l, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(l, (struct sockaddr *)&a) == 0 &&
	      rdma_listen(l, 2) == 0, "listener");
	struct ibv_device_attr da;
	CHECK(ibv_query_device(l->verbs, &da) == 0, "ibv_query_device");
	struct rdma_cm_id *c = resolved(cch, RDMA_PS_TCP, ip, 7482);
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	CHECK(rdma_create_qp(c, NULL, &qa) == 0, "client QP");
	struct rdma_conn_param too_many = { .responder_resources = da.max_qp_rd_atom + 1, .initiator_depth = 1 };
	FAILS_WITH(rdma_connect(c, &too_many), EINVAL);
	struct rdma_conn_param p = { .responder_resources = RDMA_MAX_RESP_RES, .initiator_depth = RDMA_MAX_INIT_DEPTH,
				     .retry_count = 7, .rnr_retry_count = 7 };
	CHECK(rdma_connect(c, &p) == 0, "rdma_connect asking for the device's limits");
	struct rdma_cm_event *e = next_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *n = e->id;
	CHECK(e->param.conn.responder_resources == (uint8_t)da.max_qp_init_rd_atom &&
	      e->param.conn.initiator_depth == (uint8_t)da.max_qp_rd_atom,
	      "the REQ carries the device's limits (%u/%u)", e->param.conn.responder_resources,
	      e->param.conn.initiator_depth);
	rdma_ack_cm_event(e);
	CHECK(rdma_create_qp(n, NULL, &qa) == 0, "server QP");
	CHECK(rdma_accept(n, &p) == 0, "rdma_accept asking for the device's limits");
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(next_event(sch, RDMA_CM_EVENT_ESTABLISHED));
	struct ibv_qp_attr qat;
	struct ibv_qp_init_attr qia;
	CHECK(ibv_query_qp(n->qp, &qat, IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MAX_QP_RD_ATOMIC, &qia) == 0 &&
	      qat.max_dest_rd_atomic == (uint8_t)da.max_qp_rd_atom && qat.max_rd_atomic == (uint8_t)da.max_qp_init_rd_atom,
	      "the acceptor's QP: %u responder resources, %u initiator depth", qat.max_dest_rd_atomic, qat.max_rd_atomic);
	CHECK(ibv_query_qp(c->qp, &qat, IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MAX_QP_RD_ATOMIC, &qia) == 0 &&
	      qat.max_dest_rd_atomic == (uint8_t)da.max_qp_rd_atom && qat.max_rd_atomic == (uint8_t)da.max_qp_init_rd_atom,
	      "the connector's QP: %u responder resources, %u initiator depth", qat.max_dest_rd_atomic, qat.max_rd_atomic);
	CHECK(rdma_disconnect(c) == 0, "rdma_disconnect");
	rdma_ack_cm_event(next_event(sch, RDMA_CM_EVENT_DISCONNECTED));
	CHECK(rdma_disconnect(n) == 0, "rdma_disconnect (DREP)");
	rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_destroy_qp(n);
	rdma_destroy_id(n);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

int main(void)
{
	event_names();
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch != NULL, "rdma_create_event_channel");
	channel_basics(ch);
	port_spaces(ch);
	int n = 0;
	struct ibv_context **devs = rdma_get_devices(&n);
	CHECK(devs && n >= 1 && devs[0] && devs[n] == NULL, "rdma_get_devices: %d", n);
	struct ibv_context *dev = devs[0];
	CHECK(strncmp(ibv_get_device_name(dev->device), "softverbs", 9) == 0, "a softverbs device");
	rdma_free_devices(devs);
	char dev_ip[INET_ADDRSTRLEN];
	device_addr(dev, dev_ip);
	binding(ch, dev, dev_ip);
	resolution(ch, dev, dev_ip);
	unreachable(ch);
	qps(ch);
	synchronous();
	acks_and_destroy(ch);
	migrate(ch);
	addrinfo();
	endpoints();
	connection_calls(ch);
	private_data_both_ways(dev_ip);
	multicast(dev_ip);
	max_rd_atomic(dev_ip);
	CHECK(!readable(ch->fd, 0), "no stray events");
	rdma_destroy_event_channel(ch);
	printf("ok\n");
	return 0;
}
