//! Agreement with Wireshark on CM: a whole connection's MADs — REQ, MRA, REP,
//! RTU, DREQ, DREP, a REJ, SIDR_REQ and SIDR_REP — each as a RoCEv2 UD
//! SEND_ONLY to QP1 (spec/cm.md §1.2), written to a pcap and decoded by
//! `tshark`: each must decode as InfiniBand CM with the attribute we sent,
//! every CM field tshark shows must equal what we encoded, and nothing may be
//! marked malformed.
//!
//! Without tshark the test prints "skipped: tshark not found", unless
//! `SOFTVERBS_REQUIRE_TOOLS=1` (CI), where it fails.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;

use wire::cm::{self, cma, Message, MsgKind, RejReason, SidrStatus, TransportType};
use wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};
use wire::pcap::PcapWriter;
use wire::*;

const A_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const A_GUID: u64 = 0x0211_22FF_FE33_4455;
const B_GUID: u64 = 0x0266_77FF_FE88_99AA;

fn gid(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// One MAD of each kind, with distinctive values, and who sends it.
fn exchange() -> Vec<(bool, cm::Repr)> {
    let a_id = 0x1111_0001;
    let b_id = 0x2222_0002;
    let mut req_pd = [0u8; cm::req::PRIVATE_DATA_LEN];
    cma::Header {
        src_port: 40001,
        src: IpAddr::V4(A_IP),
        dst: IpAddr::V4(B_IP),
    }
    .emit(&mut req_pd)
    .unwrap();
    req_pd[36..40].copy_from_slice(b"ping");
    let req = cm::req::Repr {
        local_comm_id: a_id,
        service_id: cma::service_id(cma::PortSpace::Tcp, 7471),
        local_ca_guid: A_GUID,
        local_qkey: Qkey(0),
        local_qpn: Qpn::from_masked(0x11),
        responder_resources: 4,
        local_eecn: 0,
        initiator_depth: 2,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport: TransportType::Rc,
        flow_control: true,
        starting_psn: Psn::from_masked(0xAB_CDEF),
        local_cm_response_timeout: 19,
        retry_count: 7,
        pkey: PKey(0xFFFF),
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 6,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: cm::req::Path {
            local_lid: 0xFFFF,
            remote_lid: 0xFFFF,
            local_gid: gid(A_IP),
            remote_gid: gid(B_IP),
            flow_label: 0x1_2345,
            packet_rate: 3,
            traffic_class: 0x20,
            hop_limit: 64,
            sl: 2,
            subnet_local: false,
            local_ack_timeout: 19,
        },
        alternate_path: cm::req::Path::default(),
        sap_supported: false,
        private_data: req_pd,
    };
    let mra = cm::mra::Repr {
        local_comm_id: b_id,
        remote_comm_id: a_id,
        message_mraed: MsgKind::Req,
        service_timeout: 24,
        private_data: [0; cm::mra::PRIVATE_DATA_LEN],
    };
    let mut rep_pd = [0u8; cm::rep::PRIVATE_DATA_LEN];
    rep_pd[..4].copy_from_slice(b"pong");
    let rep = cm::rep::Repr {
        local_comm_id: b_id,
        remote_comm_id: a_id,
        local_qkey: Qkey(0),
        local_qpn: Qpn::from_masked(0x22),
        local_eecn: 0,
        starting_psn: Psn::from_masked(0x12_3456),
        responder_resources: 8,
        initiator_depth: 3,
        target_ack_delay: 15,
        failover_accepted: 0,
        flow_control: true,
        rnr_retry_count: 5,
        srq: true,
        local_ca_guid: B_GUID,
        private_data: rep_pd,
    };
    let rtu = cm::rtu::Repr {
        local_comm_id: a_id,
        remote_comm_id: b_id,
        private_data: [0; cm::rtu::PRIVATE_DATA_LEN],
    };
    let dreq = cm::dreq::Repr {
        local_comm_id: a_id,
        remote_comm_id: b_id,
        remote_qpn: Qpn::from_masked(0x22),
        private_data: [0; cm::dreq::PRIVATE_DATA_LEN],
    };
    let drep = cm::rtu::Repr {
        local_comm_id: b_id,
        remote_comm_id: a_id,
        private_data: [0; cm::rtu::PRIVATE_DATA_LEN],
    };
    let mut ari = [0u8; cm::rej::ARI_LEN];
    ari[..8].copy_from_slice(&B_GUID.to_be_bytes());
    let rej = cm::rej::Repr {
        local_comm_id: 0,
        remote_comm_id: a_id + 1,
        message_rejected: MsgKind::Req,
        reason: RejReason::InvalidServiceId,
        ari_len: 8,
        ari,
        private_data: [0; cm::rej::PRIVATE_DATA_LEN],
    };
    let mut sidr_pd = [0u8; cm::sidr_req::PRIVATE_DATA_LEN];
    cma::Header {
        src_port: 40002,
        src: IpAddr::V4(A_IP),
        dst: IpAddr::V4(B_IP),
    }
    .emit(&mut sidr_pd)
    .unwrap();
    let sidr_req = cm::sidr_req::Repr {
        request_id: a_id + 2,
        pkey: PKey(0xFFFF),
        service_id: cma::service_id(cma::PortSpace::Udp, 8080),
        private_data: sidr_pd,
    };
    let sidr_rep = cm::sidr_rep::Repr {
        request_id: a_id + 2,
        status: SidrStatus::Success,
        info_len: 0,
        qpn: Qpn::from_masked(0x33),
        service_id: cma::service_id(cma::PortSpace::Udp, 8080),
        qkey: Qkey(cma::RDMA_UDP_QKEY),
        info: [0; cm::sidr_rep::INFO_LEN],
        private_data: [0; cm::sidr_rep::PRIVATE_DATA_LEN],
    };
    let hi = 0x0000_00AA_0000_0000u64;
    let tid_a = hi | u64::from(a_id);
    let m = |tid: u64, message: Message| cm::Repr {
        tid,
        attr_mod: 0,
        message,
    };
    vec![
        (true, m(tid_a, Message::Req(req))),
        (false, m(tid_a, Message::Mra(mra))),
        (false, m(tid_a, Message::Rep(rep))),
        (true, m(tid_a, Message::Rtu(rtu))),
        (true, m(tid_a + 0x100, Message::Dreq(dreq))),
        (false, m(tid_a + 0x100, Message::Drep(drep))),
        (false, m(tid_a + 1, Message::Rej(rej))),
        (true, m(tid_a + 2, Message::SidrReq(sidr_req))),
        (false, m(tid_a + 2, Message::SidrRep(sidr_rep))),
    ]
}

/// The MAD as a RoCEv2 UD SEND_ONLY to QP1 from QP1 (spec/cm.md §1.2).
fn gmp_packet(mad: &[u8; MAD_LEN], psn: u32, encap: &Encap) -> Vec<u8> {
    let t = mad::gsi_transport(Psn::from_masked(psn));
    let mut buf = vec![0u8; t.buffer_len()];
    t.emit(&mut buf, mad, encap).unwrap();
    let back = TransportRepr::parse(&buf).unwrap();
    assert_eq!(mad::check_gsi(&back), Ok(()));
    assert_eq!(
        (back.bth.pkey.0, back.deth.unwrap().src_qp.get()),
        (0xFFFF, GSI_QPN)
    );
    assert_eq!(back.deth.unwrap().qkey.get(), GSI_QKEY);
    buf
}

fn write_pcap(path: &Path, mads: &[(bool, cm::Repr)]) {
    let a_to_b = Encap::ipv4(A_IP, B_IP, 0xC001);
    let b_to_a = Encap::ipv4(B_IP, A_IP, 0xC002);
    let mut w = PcapWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    for (i, (from_a, repr)) in mads.iter().enumerate() {
        let encap = if *from_a { &a_to_b } else { &b_to_a };
        let pkt = gmp_packet(&repr.to_bytes(), i as u32, encap);
        w.write_transport(i as u64 * 1000, encap, &pkt).unwrap();
    }
    w.flush().unwrap();
}

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn tshark(args: &[&str], pcap: &Path) -> String {
    let out = Command::new("timeout")
        .args(["60", "tshark", "-r"])
        .arg(pcap)
        .args(["-d", "udp.port==4791,infiniband"])
        .args(args)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn pcap_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// The line Wireshark 4.0 heads each CM message's subtree with. It has no
/// dissector for MRA and SIDR (it names them and shows the MAD header only).
fn tshark_title(m: &Message) -> &'static str {
    match m {
        Message::Req(_) => "CM ConnectRequest",
        Message::Mra(_) => "CM MsgRcptAck",
        Message::Rej(_) => "CM ConnectReject",
        Message::Rep(_) => "CM ConnectReply",
        Message::Rtu(_) => "CM ReadyToUse",
        Message::Dreq(_) => "CM DisconnectRequest",
        Message::Drep(_) => "CM DisconnectReply",
        Message::SidrReq(_) => "CM ServiceIDResReq",
        Message::SidrRep(_) => "CM ServiceIDResReqResp",
    }
}

/// Expected values: numbers, or text for address fields.
#[derive(Debug, PartialEq)]
enum V {
    N(u64),
    S(String),
}

/// (tshark field, value) pairs for one MAD. Not compared: the REQ's Primary
/// Flow Label and Packet Rate, which Wireshark 4.0 reads from the wrong bytes
/// of the word at REQ byte 88 (it shows 0x00123 / 0x12 for flow label
/// 0x12345, rate 3); our layout is the kernel's (ibta_vol1_c12.h
/// CM_REQ_PRIMARY_FLOW_LABEL 88:20, CM_REQ_PRIMARY_PACKET_RATE 91[2]:6) and is
/// checked against its tables in the unit tests.
fn expected(r: &cm::Repr) -> Vec<(&'static str, V)> {
    use V::N;
    let mut v = vec![
        ("infiniband.mad.baseversion", N(1)),
        ("infiniband.mad.mgmtclass", N(7)),
        ("infiniband.mad.classversion", N(2)),
        ("infiniband.mad.method", N(3)),
        ("infiniband.mad.transactionid", N(r.tid)),
        ("infiniband.mad.attributeid", N(r.message.attr_id().into())),
        ("infiniband.bth.destqp", N(1)),
        ("infiniband.deth.q_key", N(0x8001_0000)),
        ("infiniband.deth.srcqp", N(1)),
    ];
    let n = |x: u32| N(u64::from(x));
    let ip = |g: &[u8; 16]| {
        V::S(
            std::net::Ipv6Addr::from(*g)
                .to_ipv4_mapped()
                .unwrap()
                .to_string(),
        )
    };
    match &r.message {
        Message::Req(q) => {
            let hdr = cma::Header::parse(&q.private_data).unwrap();
            v.extend([
                ("infiniband.cm.req", n(q.local_comm_id)),
                ("infiniband.cm.req.serviceid.protocol", N(6)),
                (
                    "infiniband.cm.req.serviceid.dport",
                    N(q.service_id & 0xFFFF),
                ),
                ("infiniband.cm.req.localcaguid", N(q.local_ca_guid)),
                ("infiniband.cm.req.localqkey", n(q.local_qkey.get())),
                ("infiniband.cm.req.localqpn", n(q.local_qpn.get())),
                (
                    "infiniband.cm.req.responderres",
                    n(q.responder_resources.into()),
                ),
                ("infiniband.cm.req.initdepth", n(q.initiator_depth.into())),
                (
                    "infiniband.cm.req.remoteresptout",
                    n(q.remote_cm_response_timeout.into()),
                ),
                ("infiniband.cm.req.transpsvctype", n(q.transport as u32)),
                ("infiniband.cm.req.e2eflowctrl", n(q.flow_control.into())),
                ("infiniband.cm.req.startpsn", n(q.starting_psn.get())),
                (
                    "infiniband.cm.req.localresptout",
                    n(q.local_cm_response_timeout.into()),
                ),
                ("infiniband.cm.req.retrcount", n(q.retry_count.into())),
                ("infiniband.cm.req.pkey", n(q.pkey.0.into())),
                ("infiniband.cm.req.pppmtu", n(q.path_mtu.into())),
                (
                    "infiniband.cm.req.rnrretrcount",
                    n(q.rnr_retry_count.into()),
                ),
                ("infiniband.cm.req.maxcmretr", n(q.max_cm_retries.into())),
                ("infiniband.cm.req.srq", n(q.srq.into())),
                (
                    "infiniband.cm.req.prim_locallid",
                    n(q.primary_path.local_lid.into()),
                ),
                (
                    "infiniband.cm.req.prim_remotelid",
                    n(q.primary_path.remote_lid.into()),
                ),
                (
                    "infiniband.cm.req.prim_localgid_ipv4",
                    ip(&q.primary_path.local_gid),
                ),
                (
                    "infiniband.cm.req.prim_remotegid_ipv4",
                    ip(&q.primary_path.remote_gid),
                ),
                (
                    "infiniband.cm.req.prim_tfcclass",
                    n(q.primary_path.traffic_class.into()),
                ),
                (
                    "infiniband.cm.req.prim_hoplim",
                    n(q.primary_path.hop_limit.into()),
                ),
                ("infiniband.cm.req.prim_sl", n(q.primary_path.sl.into())),
                (
                    "infiniband.cm.req.prim_subnetlocal",
                    n(q.primary_path.subnet_local.into()),
                ),
                (
                    "infiniband.cm.req.prim_localacktout",
                    n(q.primary_path.local_ack_timeout.into()),
                ),
                ("infiniband.cm.req.alt_locallid", N(0)),
                ("infiniband.cm.req.ip_cm.ipv", N(4)),
                ("infiniband.cm.req.ip_cm.sport", n(hdr.src_port.into())),
                ("infiniband.cm.req.ip_cm.sip4", V::S(hdr.src.to_string())),
                ("infiniband.cm.req.ip_cm.dip4", V::S(hdr.dst.to_string())),
            ]);
        }
        Message::Rep(p) => v.extend([
            ("infiniband.cm.rep", n(p.local_comm_id)),
            ("infiniband.cm.rep.remotecommid", n(p.remote_comm_id)),
            ("infiniband.cm.rep.localqkey", n(p.local_qkey.get())),
            ("infiniband.cm.rep.localqpn", n(p.local_qpn.get())),
            ("infiniband.cm.rep.startpsn", n(p.starting_psn.get())),
            ("infiniband.cm.rep.respres", n(p.responder_resources.into())),
            ("infiniband.cm.rep.initdepth", n(p.initiator_depth.into())),
            (
                "infiniband.cm.rep.tgtackdelay",
                n(p.target_ack_delay.into()),
            ),
            (
                "infiniband.cm.rep.failoveracc",
                n(p.failover_accepted.into()),
            ),
            ("infiniband.cm.rep.e2eflowctrl", n(p.flow_control.into())),
            (
                "infiniband.cm.rep.rnrretrcount",
                n(p.rnr_retry_count.into()),
            ),
            ("infiniband.cm.rep.srq", n(p.srq.into())),
            ("infiniband.cm.rep.localcaguid", N(p.local_ca_guid)),
        ]),
        Message::Rtu(t) => v.extend([
            ("infiniband.cm.rtu.localcommid", n(t.local_comm_id)),
            ("infiniband.cm.rtu.remotecommid", n(t.remote_comm_id)),
        ]),
        Message::Dreq(d) => v.extend([
            ("infiniband.cm.dreq.localcommid", n(d.local_comm_id)),
            ("infiniband.cm.dreq.remotecommid", n(d.remote_comm_id)),
            ("infiniband.cm.req.remoteqpneecn", n(d.remote_qpn.get())),
        ]),
        Message::Drep(d) => v.extend([
            ("infiniband.cm.drsp.localcommid", n(d.local_comm_id)),
            ("infiniband.cm.drsp.remotecommid", n(d.remote_comm_id)),
        ]),
        Message::Rej(j) => v.extend([
            ("infiniband.cm.rej.localcommid", n(j.local_comm_id)),
            ("infiniband.cm.rej.remotecommid", n(j.remote_comm_id)),
            ("infiniband.cm.rej.msgrej", n(j.message_rejected as u32)),
            ("infiniband.cm.rej.rejinfolen", n(j.ari_len.into())),
            ("infiniband.cm.rej.reason", n(j.reason.code().into())),
        ]),
        Message::Mra(_) | Message::SidrReq(_) | Message::SidrRep(_) => {}
    }
    v
}

fn number(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    }
    .unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

fn skip_without_tshark() -> bool {
    if tshark_available() {
        return false;
    }
    assert!(
        std::env::var("SOFTVERBS_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "tshark not found and SOFTVERBS_REQUIRE_TOOLS=1"
    );
    eprintln!("skipped: tshark not found");
    true
}

#[test]
fn tshark_decodes_a_cm_exchange_on_qp1() {
    if skip_without_tshark() {
        return;
    }
    let mads = exchange();
    // Our own parser reads back what we wrote, byte for byte.
    for (_, r) in &mads {
        assert_eq!(cm::Repr::parse(&r.to_bytes()).as_ref(), Ok(r));
    }
    let path = pcap_path("cm_exchange.pcap");
    write_pcap(&path, &mads);

    // Nothing malformed, no expert error.
    let bad = tshark(
        &["-Y", "_ws.malformed || _ws.expert.severity >= 0x00800000"],
        &path,
    );
    assert!(bad.trim().is_empty(), "malformed or error frames:\n{bad}");

    // Each frame carries its CM message.
    let verbose = tshark(&["-V"], &path);
    let frames: Vec<&str> = verbose.split("\nFrame ").collect();
    assert_eq!(frames.len(), mads.len(), "one frame per MAD");
    for (frame, (_, r)) in frames.iter().zip(&mads) {
        let title = tshark_title(&r.message);
        assert!(
            frame.contains(&format!("\n    {title}")),
            "{} not decoded as {title}:\n{frame}",
            r.message.name()
        );
    }

    // Field by field, one tshark run for every field of every message.
    let mut fields: Vec<&str> = Vec::new();
    for (_, r) in &mads {
        for (f, _) in expected(r) {
            if !fields.contains(&f) {
                fields.push(f);
            }
        }
    }
    let mut args = vec!["-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"];
    for f in &fields {
        args.extend(["-e", f]);
    }
    let text = tshark(&args, &path);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), mads.len(), "one line per MAD:\n{text}");
    for (line, (_, r)) in lines.iter().zip(&mads) {
        let got: Vec<&str> = line.split('\t').collect();
        assert_eq!(got.len(), fields.len(), "{line:?}");
        for (field, value) in expected(r) {
            let raw = got[fields.iter().position(|f| *f == field).unwrap()];
            let have = match value {
                V::N(_) => V::N(number(raw)),
                V::S(_) => V::S(raw.to_string()),
            };
            assert_eq!(
                have,
                value,
                "{} field {field}: tshark {raw:?}",
                r.message.name()
            );
        }
    }
    eprintln!("tshark agreed on {} CM MADs", mads.len());
}
