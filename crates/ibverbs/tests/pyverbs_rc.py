"""RC through pyverbs on the drop-in libibverbs (run by tests/programs.rs
with /usr/bin/python3 and the library on LD_LIBRARY_PATH).

Opens the first device, creates PD, CQ, MRs and two RC QPs, walks both
RESET -> INIT -> RTR -> RTS towards each other (GID index 0, RoCE v2),
queries them, then moves data: SEND/RECV, RDMA WRITE and RDMA READ, each
checked byte for byte. Prints "pyverbs rc: ok" at the end; any failure
raises (non-zero exit).
"""

import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

PORT = 1
GID_INDEX = 0
SIZE = 4096
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
          | e.IBV_ACCESS_REMOTE_READ)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def poll(cq, expected, timeout=20.0):
    """Polls until every wr_id in `expected` ({wr_id: (opcode, byte_len)})
    completed successfully with that opcode and length, in any order."""
    left = dict(expected)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        n, wcs = cq.poll(1)
        if not n:
            time.sleep(0.001)
            continue
        wc = wcs[0]
        check(wc.status == e.IBV_WC_SUCCESS, f"wr {wc.wr_id}: status {wc.status}")
        check(wc.wr_id in left, f"unexpected completion of wr {wc.wr_id}")
        opcode, byte_len = left.pop(wc.wr_id)
        check(wc.opcode == opcode, f"wr {wc.wr_id}: opcode {wc.opcode}, expected {opcode}")
        check(wc.byte_len == byte_len, f"wr {wc.wr_id}: byte_len {wc.byte_len}, expected {byte_len}")
    check(not left, f"no completion for wr {sorted(left)} within {timeout} s")


def pattern(seed):
    return bytes((seed * 31 + i * 7) & 0xFF for i in range(SIZE))


def main():
    devs = d.get_device_list()
    check(len(devs) >= 1, "no device")
    name = devs[0].name.decode()
    ctx = d.Context(name=name)
    port = ctx.query_port(PORT)
    check(port.state == e.IBV_PORT_ACTIVE, f"port state {port.state}")
    check(port.link_layer == e.IBV_LINK_LAYER_ETHERNET, f"link layer {port.link_layer}")
    gid = ctx.query_gid(PORT, GID_INDEX)
    check(str(gid).startswith("0000:0000:0000:0000:0000:ffff:"), f"GID {gid} is not IPv4-mapped")

    pd = PD(ctx)
    cq = CQ(ctx, 64)
    cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)
    qa = QP(pd, init)
    qb = QP(pd, init)
    for qp in (qa, qb):
        check(qp.qp_state == e.IBV_QPS_RESET, f"new QP in state {qp.qp_state}")

    # RESET -> INIT -> RTR -> RTS, each QP towards the other.
    for qp, peer in ((qa, qb), (qb, qa)):
        a = QPAttr()
        a.qp_state = e.IBV_QPS_INIT
        a.pkey_index = 0
        a.port_num = PORT
        a.qp_access_flags = ACCESS
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                  | e.IBV_QP_ACCESS_FLAGS)
        check(qp.qp_state == e.IBV_QPS_INIT, "not INIT")

        a = QPAttr()
        a.qp_state = e.IBV_QPS_RTR
        a.path_mtu = e.IBV_MTU_1024
        a.dest_qp_num = peer.qp_num
        a.rq_psn = 0x100 + peer.qp_num
        a.max_dest_rd_atomic = 4
        a.min_rnr_timer = 12
        gr = GlobalRoute(dgid=gid, sgid_index=GID_INDEX, hop_limit=64)
        a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=PORT)
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU
                  | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
                  | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
        check(qp.qp_state == e.IBV_QPS_RTR, "not RTR")

    for qp in (qa, qb):
        a = QPAttr()
        a.qp_state = e.IBV_QPS_RTS
        a.timeout = 14
        a.retry_cnt = 7
        a.rnr_retry = 7
        a.sq_psn = 0x100 + qp.qp_num
        a.max_rd_atomic = 4
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT
                  | e.IBV_QP_RNR_RETRY | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)

    # Query: state and the attributes just set.
    for qp, peer in ((qa, qb), (qb, qa)):
        attr, init_attr = qp.query(e.IBV_QP_STATE | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
                                   | e.IBV_QP_SQ_PSN | e.IBV_QP_RQ_PSN | e.IBV_QP_TIMEOUT
                                   | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
                                   | e.IBV_QP_MAX_QP_RD_ATOMIC | e.IBV_QP_MAX_DEST_RD_ATOMIC
                                   | e.IBV_QP_ACCESS_FLAGS | e.IBV_QP_CAP)
        check(attr.qp_state == e.IBV_QPS_RTS, f"queried state {attr.qp_state}")
        check(qp.qp_state == e.IBV_QPS_RTS, "not RTS")
        check(attr.path_mtu == e.IBV_MTU_1024, f"path_mtu {attr.path_mtu}")
        check(attr.dest_qp_num == peer.qp_num, f"dest_qp_num {attr.dest_qp_num}")
        check(attr.sq_psn == 0x100 + qp.qp_num, f"sq_psn {attr.sq_psn:#x}")
        check(attr.rq_psn == 0x100 + peer.qp_num, f"rq_psn {attr.rq_psn:#x}")
        check(attr.timeout == 14 and attr.retry_cnt == 7 and attr.rnr_retry == 7,
              f"timeout/retry {attr.timeout}/{attr.retry_cnt}/{attr.rnr_retry}")
        check(attr.max_rd_atomic == 4 and attr.max_dest_rd_atomic == 4,
              f"rd_atomic {attr.max_rd_atomic}/{attr.max_dest_rd_atomic}")
        check(attr.qp_access_flags == ACCESS, f"access {attr.qp_access_flags:#x}")
        check(attr.cap.max_send_wr >= 16 and attr.cap.max_recv_wr >= 16, "caps shrank")
        check(init_attr.qp_type == e.IBV_QPT_RC, f"qp_type {init_attr.qp_type}")

    mr_a = MR(pd, SIZE, ACCESS)
    mr_b = MR(pd, SIZE, ACCESS)

    # SEND / RECV: a -> b.
    data = pattern(1)
    mr_a.write(data, SIZE)
    mr_b.write(bytes(SIZE), SIZE)
    qb.post_recv(RecvWR(wr_id=10, num_sge=1, sg=[SGE(mr_b.buf, SIZE, mr_b.lkey)]))
    qa.post_send(SendWR(wr_id=11, opcode=e.IBV_WR_SEND, num_sge=1,
                        sg=[SGE(mr_a.buf, SIZE, mr_a.lkey)]))
    poll(cq, {11: (e.IBV_WC_SEND, SIZE), 10: (e.IBV_WC_RECV, SIZE)})
    check(mr_b.read(SIZE, 0) == data, "SEND: received bytes differ")

    # RDMA WRITE: a's buffer into b's MR.
    data = pattern(2)
    mr_a.write(data, SIZE)
    wr = SendWR(wr_id=12, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(mr_a.buf, SIZE, mr_a.lkey)])
    wr.set_wr_rdma(mr_b.rkey, mr_b.buf)
    qa.post_send(wr)
    poll(cq, {12: (e.IBV_WC_RDMA_WRITE, SIZE)})
    check(mr_b.read(SIZE, 0) == data, "RDMA WRITE: target bytes differ")

    # RDMA READ: b reads a's MR into its own.
    data = pattern(3)
    mr_a.write(data, SIZE)
    mr_b.write(bytes(SIZE), SIZE)
    wr = SendWR(wr_id=13, opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                sg=[SGE(mr_b.buf, SIZE, mr_b.lkey)])
    wr.set_wr_rdma(mr_a.rkey, mr_a.buf)
    qb.post_send(wr)
    poll(cq, {13: (e.IBV_WC_RDMA_READ, SIZE)})
    check(mr_b.read(SIZE, 0) == data, "RDMA READ: fetched bytes differ")

    summary = f"{name}, GID {gid}, QPs {qa.qp_num:#x} <-> {qb.qp_num:#x}"
    for obj in (qa, qb, mr_a, mr_b, cq, pd, ctx):
        obj.close()
    print(f"pyverbs rc: ok ({summary})")


if __name__ == "__main__":
    main()
