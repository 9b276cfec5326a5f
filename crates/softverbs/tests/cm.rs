//! Connection management through the public API: two devices in one process
//! (each its own loopback address and socket) connect RC QPs over IBTA CM
//! MADs on QP1, move data, disconnect; rejects, nobody listening, silence,
//! SIDR, and a forged MAD from the network.

mod pair;
mod tshark;

use pair::*;
use softverbs::cm::{self, CmError, ConnEvent, ConnectOptions, Listener, PortSpace, RejReason};
use softverbs::*;
use std::net::UdpSocket;
use std::time::Duration;

const W: Duration = Duration::from_secs(10);

fn sides(tag: u8) -> (Side, Side) {
    sides_on("cm", 29, tag, 1 << 16)
}

fn ip(s: &Side) -> std::net::IpAddr {
    s.gid().ip()
}

/// Short MAD timing for tests that wait for silence: 1 ms + 2 × 1 ms per try.
fn quick(retries: u8) -> ConnectOptions {
    ConnectOptions {
        timing: cm::CmTiming {
            packet_life_time: 8,
            cm_response_timeout: 8,
            max_cm_retries: retries,
        },
        ..ConnectOptions::default()
    }
}

/// Connects a → b on `port` with private data both ways; returns (active, passive).
fn connected(a: &Side, b: &Side, port: u16) -> (cm::Connection, cm::Connection) {
    let l = Listener::bind(&b.pd, PortSpace::Tcp, port).unwrap();
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    let qb = b.pd.create_rc_qp(&b.init()).unwrap();
    let opts = ConnectOptions {
        private_data: b"hello from a".to_vec(),
        wait: W,
        ..ConnectOptions::default()
    };
    let peer = ip(b);
    let t = std::thread::spawn(move || cm::connect(qa, peer, port, &opts));
    let req = l.accept_request(W).unwrap();
    assert_eq!(req.peer(), ip(a));
    assert_eq!(&req.private_data()[..12], b"hello from a");
    assert_eq!(req.private_data().len(), cm::REQ_PRIVATE_DATA_MAX);
    let pb = req.accept(qb, b"welcome, a").unwrap();
    let pa = t.join().unwrap().unwrap();
    assert_eq!(&pa.peer_private_data()[..10], b"welcome, a");
    assert_eq!(pb.peer(), ip(a));
    (pa, pb)
}

fn send_and_write(a: &Side, b: &Side, pa: &cm::Connection, pb: &cm::Connection) {
    assert_eq!(pa.qp().state().unwrap(), QpState::Rts);
    assert_eq!(pb.qp().state().unwrap(), QpState::Rts);
    let qa = pa.qp().query().unwrap().attr;
    let qb = pb.qp().query().unwrap().attr;
    assert_eq!(qa.dest_qp_num, pb.qp().qp_num());
    assert_eq!(qb.dest_qp_num, pa.qp().qp_num());
    assert_eq!(qa.sq_psn, qb.rq_psn, "the PSNs the CM exchanged");
    assert_eq!(qb.sq_psn, qa.rq_psn);
    // SEND a → b.
    let msg = pattern(3000, 7);
    assert!(a.mr.write(0, &msg));
    pb.qp()
        .post_recv(&recv_wr(1, &[b.mr.sge(8192, 4096)]))
        .unwrap();
    let sg = [a.mr.sge(0, 3000)];
    pa.qp()
        .post_send(&send_wr(2, WrOpcode::Send, &sg, WrTarget::None, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), vec![(2, WcStatus::Success)]);
    assert_eq!(ids(&wait(&b.rcq, 1)), vec![(1, WcStatus::Success)]);
    assert_eq!(read(&b.mr, 8192, 3000), msg);
    // WRITE b → a.
    let w = pattern(5000, 9);
    assert!(b.mr.write(16384, &w));
    let sg = [b.mr.sge(16384, 5000)];
    let target = WrTarget::Rdma(a.mr.remote(32768));
    pb.qp()
        .post_send(&send_wr(3, WrOpcode::RdmaWrite, &sg, target, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&b.scq, 1)), vec![(3, WcStatus::Success)]);
    assert_eq!(read(&a.mr, 32768, 5000), w);
}

#[test]
fn connect_accept_move_data_disconnect_from_active() {
    let (a, b) = sides(0);
    let (mut pa, pb) = connected(&a, &b, 7001);
    send_and_write(&a, &b, &pa, &pb);
    // The RTU (or the data) established the passive side.
    assert_eq!(pb.next_event(W), Some(ConnEvent::Established));
    // A receive left posted is flushed when the QP goes to ERR.
    pa.qp().post_recv(&recv_wr(9, &[a.mr.sge(0, 64)])).unwrap();
    pa.disconnect().unwrap();
    assert_eq!(pa.qp().state().unwrap(), QpState::Err);
    assert_eq!(ids(&wait(&a.rcq, 1)), vec![(9, WcStatus::WrFlushErr)]);
    assert!(pb.wait_disconnected(W), "DREQ reached the passive side");
    let mut pb = pb;
    pb.disconnect().unwrap(); // the DREP
    assert!(pa.wait_disconnected(W), "DREP reached the active side");
    let c = a.ctx.cm_counters();
    // REQ, RTU, DREQ sent by a; REP and DREP received.
    assert!(c.sent[0] >= 1 && c.sent[4] >= 1 && c.sent[5] >= 1, "{c:?}");
    assert!(c.received[3] >= 1 && c.received[6] >= 1, "{c:?}");
}

#[test]
fn disconnect_from_passive_side() {
    let (a, b) = sides(1);
    let (mut pa, mut pb) = connected(&a, &b, 7002);
    send_and_write(&a, &b, &pa, &pb);
    pb.disconnect().unwrap();
    assert_eq!(pb.qp().state().unwrap(), QpState::Err);
    assert!(pa.wait_disconnected(W));
    pa.disconnect().unwrap();
    assert_eq!(pa.qp().state().unwrap(), QpState::Err);
    assert!(pb.wait_disconnected(W));
}

#[test]
fn reject_carries_reason_and_private_data() {
    let (a, b) = sides(2);
    let l = Listener::bind(&b.pd, PortSpace::Tcp, 7003).unwrap();
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    let peer = ip(&b);
    let t = std::thread::spawn(move || {
        let o = ConnectOptions {
            wait: W,
            ..Default::default()
        };
        cm::connect(qa, peer, 7003, &o)
    });
    let req = l.accept_request(W).unwrap();
    req.reject(b"go away").unwrap();
    match t.join().unwrap() {
        Err(CmError::Rejected {
            reason,
            private_data,
        }) => {
            assert_eq!(reason, RejReason::ConsumerDefined);
            assert_eq!(&private_data[..7], b"go away");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn nobody_listening_is_rejected_with_invalid_service_id() {
    let (a, b) = sides(3);
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    let r = cm::connect(qa, ip(&b), 7999, &ConnectOptions::default());
    assert_eq!(
        r.unwrap_err(),
        CmError::NobodyListening {
            peer: ip(&b),
            port: 7999
        }
    );
    // Answered by a REJ, not by the 16 × 6 s of REQ retries: the REQ went
    // out once.
    let c = a.ctx.cm_counters();
    assert_eq!(
        (c.sent[0], c.retransmitted[0]),
        (1, 0),
        "one REQ, no resend"
    );
}

#[test]
fn silence_is_unreachable_after_the_retries() {
    let (a, _b) = sides(4);
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    // An address of this test's range where no device runs.
    let nobody = private_addr("127.7.29.99");
    let r = cm::connect(qa, nobody, 7004, &quick(3));
    assert_eq!(r.unwrap_err(), CmError::Unreachable { sends: 4 });
    let c = a.ctx.cm_counters();
    assert_eq!(
        (c.sent[0], c.retransmitted[0]),
        (4, 3),
        "REQ sent 1 + 3 times"
    );
}

#[test]
fn the_callers_wait_bounds_connect() {
    let (a, b) = sides(5);
    // A listener that never answers: REQs are received, nobody accepts.
    let _l = Listener::bind(&b.pd, PortSpace::Tcp, 7005).unwrap();
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    let o = ConnectOptions {
        wait: Duration::from_millis(300),
        ..Default::default()
    };
    let r = cm::connect(qa, ip(&b), 7005, &o);
    assert_eq!(
        r.unwrap_err(),
        CmError::TimedOut(Duration::from_millis(300))
    );
}

#[test]
fn sidr_resolves_a_ud_service() {
    let (a, b) = sides(6);
    let l = Listener::bind(&b.pd, PortSpace::Udp, 7006).unwrap();
    let ud = ud_qp(&b);
    let qpn = ud.qp_num();
    let peer = ip(&b);
    let s = std::thread::scope(|sc| {
        let t = sc.spawn(|| cm::resolve_ud(&a.pd, peer, 7006, b"ud?", W));
        let pdata = l.answer_sidr(qpn, 0x1234_5678, W).unwrap();
        assert_eq!(&pdata[..3], b"ud?");
        t.join().unwrap().unwrap()
    });
    assert_eq!((s.qpn, s.qkey), (qpn, 0x1234_5678));
    // Nobody listening on the UDP port: the SIDR_REP says so.
    let r = cm::resolve_ud(&a.pd, peer, 7998, &[], W);
    assert!(matches!(r, Err(CmError::Sidr(_))), "{r:?}");
}

#[test]
fn forged_mads_are_dropped_and_counted() {
    let (_a, b) = sides(7);
    let sock = UdpSocket::bind((private_addr("127.7.29.98"), 0)).unwrap();
    let to = (ip(&b), 4791);
    let before = b.ctx.cm_counters().total_dropped();
    // 1. Not a GSI datagram: a UD SEND_ONLY to QP 1 with a Q_Key other
    //    than 0x80010000 (check_gsi refuses it, as rxe's check_keys).
    let wrong_qkey = forged_rtu(sock.local_addr().unwrap(), ip(&b), 0x1234);
    sock.send_to(&wrong_qkey, to).unwrap();
    // 2. A GSI MAD with a wrong ICRC is dropped before the CM.
    // 3. A well-formed UD SEND_ONLY to QP1 whose MAD names no connection: an
    //    RTU for an unknown comm ID, with a valid ICRC.
    let pkt = forged_rtu(sock.local_addr().unwrap(), ip(&b), 0x8001_0000);
    sock.send_to(&pkt, to).unwrap();
    let mut bad = pkt.clone();
    let n = bad.len();
    bad[n - 1] ^= 1;
    sock.send_to(&bad, to).unwrap();
    let deadline = std::time::Instant::now() + W;
    loop {
        // Wait until all three datagrams are handled (they may be in any order).
        let d = b.ctx.counters();
        let (g, c) = (d.gsi, d.cm);
        if g.drop_not_gsi >= 1
            && c.dropped(cm::DropReason::UnknownCommId) >= 1
            && d.engine.drop_icrc >= 1
        {
            assert_eq!(c.total_dropped(), before + 1);
            assert_eq!(g.mads_received, 1, "the bad-ICRC copy never reached the CM");
            // The same through the CM's own accessors.
            assert_eq!((b.ctx.gsi_counters(), b.ctx.cm_counters()), (g, c));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{g:?} {c:?} {:?}",
            d.engine
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A UD SEND_ONLY to QP1 carrying an RTU for comm IDs nobody has, with the
/// ICRC the receiver computes over (`from` → `to`:4791).
fn forged_rtu(from: std::net::SocketAddr, to: std::net::IpAddr, qkey: u32) -> Vec<u8> {
    let mut mad = [0u8; 256];
    mad[0] = 1; // base version
    mad[1] = 0x07; // CM class
    mad[2] = 2; // class version
    mad[3] = 0x03; // Send
    mad[8..16].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
    mad[16..18].copy_from_slice(&0x0014u16.to_be_bytes()); // RTU
    mad[24..28].copy_from_slice(&0xdead_beefu32.to_be_bytes());
    mad[28..32].copy_from_slice(&0xfeed_f00du32.to_be_bytes());
    let mut t = wire::mad::gsi_transport(wire::Psn::from_masked(5));
    if let Some(d) = t.deth.as_mut() {
        d.qkey = wire::Qkey(qkey);
    }
    let encap = wire::Encap::from_addrs(from.ip(), to, from.port()).unwrap();
    let mut buf = vec![0u8; t.buffer_len()];
    let n = t.emit(&mut buf, &mad, &encap).unwrap();
    buf.truncate(n);
    buf
}

/// A side whose device injects `faults` into what it sends and captures to `pcap`.
fn side_with(name: &str, ip: &str, faults: &str, pcap: Option<std::path::PathBuf>) -> Side {
    let cfg = DeviceConfig {
        name: name.into(),
        addrs: vec![private_addr(ip)],
        active_mtu: Mtu::Mtu1024,
    };
    let ctx = Device::with_config(cfg)
        .with_faults(faults.parse().unwrap())
        .with_capture(pcap)
        .open()
        .unwrap();
    Side::new(ctx, 1 << 16)
}

/// MAD timing short enough for a lossy test: 96 ms per REQ try, 16 tries.
fn lossy_opts(private: &[u8]) -> ConnectOptions {
    ConnectOptions {
        private_data: private.to_vec(),
        timing: cm::CmTiming {
            packet_life_time: 12,
            cm_response_timeout: 14,
            max_cm_retries: 15,
        },
        wait: Duration::from_secs(20),
        ..ConnectOptions::default()
    }
}

/// One connection a → b on `port`, data both ways, disconnect from `a`.
fn lossy_round(a: &Side, b: &Side, l: &Listener, port: u16, round: u8) {
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    let qb = b.pd.create_rc_qp(&b.init()).unwrap();
    let peer = ip(b);
    let (mut pa, mut pb) = std::thread::scope(|sc| {
        let t = sc.spawn(move || cm::connect(qa, peer, port, &lossy_opts(&[round; 8])));
        let req = l.accept_request(Duration::from_secs(20)).unwrap();
        assert_eq!(&req.private_data()[..8], &[round; 8]);
        let pb = req.accept(qb, &[round ^ 0xff; 16]).unwrap();
        let pa = t.join().unwrap().unwrap();
        (pa, pb)
    });
    assert_eq!(&pa.peer_private_data()[..16], &[round ^ 0xff; 16]);
    send_and_write(a, b, &pa, &pb);
    pa.disconnect().unwrap();
    assert!(
        pb.wait_disconnected(Duration::from_secs(20)),
        "round {round}: DREQ"
    );
    pb.disconnect().unwrap();
    assert!(
        pa.wait_disconnected(Duration::from_secs(20)),
        "round {round}: DREP"
    );
}

#[test]
fn connections_form_and_tear_down_with_loss_dup_reorder() {
    let f = "loss=0.05,dup=0.05,reorder=0.05,seed=11";
    let a = side_with("cm-lossy-a", "127.7.29.60", f, None);
    let b = side_with("cm-lossy-b", "127.7.29.61", &f.replace("11", "12"), None);
    let l = Listener::bind(&b.pd, PortSpace::Tcp, 7010).unwrap();
    for round in 0..12 {
        lossy_round(&a, &b, &l, 7010, round);
    }
    let (ca, cb) = (a.ctx.cm_counters(), b.ctx.cm_counters());
    eprintln!("active {ca:?}\npassive {cb:?}");
    // The faults reached the MADs: some were resent after a loss or arrived twice
    // (about 120 MADs at 5 % loss and 5 % duplication each way).
    let resent: u64 = ca.retransmitted.iter().chain(&cb.retransmitted).sum();
    assert!(resent + ca.duplicates + cb.duplicates > 0, "{ca:?} {cb:?}");
    // Drops only of late duplicates (for connections already gone or past
    // that state), never of a malformed or foreign MAD.
    for c in [&ca, &cb] {
        let late = c.dropped(cm::DropReason::UnknownCommId) + c.dropped(cm::DropReason::WrongState);
        assert_eq!(c.total_dropped(), late, "{c:?}");
    }
}

#[test]
fn a_pcap_of_a_connection_decodes_as_infiniband_cm() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cm-connection-{}.pcap", std::process::id()));
    let _ = std::fs::remove_file(&path);
    {
        let a = side_with("cm-pcap-a", "127.7.29.62", "", Some(path.clone()));
        let b = side_with("cm-pcap-b", "127.7.29.63", "", None);
        let (mut pa, mut pb) = connected(&a, &b, 7011);
        send_and_write(&a, &b, &pa, &pb);
        pa.disconnect().unwrap();
        assert!(pb.wait_disconnected(W));
        pb.disconnect().unwrap();
        assert!(pa.wait_disconnected(W));
        drop((pa, pb));
    } // the capture is complete once the device closes
    if !tshark::available() {
        eprintln!("tshark not found: skipping the decode");
        return;
    }
    let run = |args: &[&str]| {
        let out = std::process::Command::new("timeout")
            .args(["60", "tshark", "-r"])
            .arg(&path)
            .args(["-d", "udp.port==4791,infiniband"])
            .args(args)
            .output()
            .expect("run tshark");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let bad = run(&["-Y", "_ws.malformed || _ws.expert.severity >= 0x00800000"]);
    assert!(bad.trim().is_empty(), "malformed or error frames:\n{bad}");
    let ids = run(&[
        "-Y",
        "infiniband.bth.destqp == 1",
        "-T",
        "fields",
        "-e",
        "ip.src",
        "-e",
        "infiniband.mad.attributeid",
    ]);
    let a_ip = private_addr("127.7.29.62").to_string();
    let mads: Vec<(bool, u64)> = ids
        .lines()
        .map(|l| {
            let (src, id) = l.split_once('\t').unwrap();
            let id = id.trim().trim_start_matches("0x");
            (src == a_ip, u64::from_str_radix(id, 16).unwrap())
        })
        .collect();
    // REQ, REP, RTU, DREQ, DREP in that order (sent by a, b, a, a, b).
    let want = [
        (true, 0x10),
        (false, 0x13),
        (true, 0x14),
        (true, 0x15),
        (false, 0x16),
    ];
    assert_eq!(mads, want, "{ids}");
    let verbose = run(&["-Y", "infiniband.bth.destqp == 1", "-V"]);
    for title in [
        "CM ConnectRequest",
        "CM ConnectReply",
        "CM ReadyToUse",
        "CM DisconnectRequest",
        "CM DisconnectReply",
    ] {
        assert!(verbose.contains(title), "{title} not decoded:\n{verbose}");
    }
}

const PEER_VAR: &str = "SV_CM_PEER";
const PEER_PORT: u16 = 7100;

/// The peer process of `two_processes_connect_move_data_and_disconnect`: its
/// default device (its own loopback address), a listener; it accepts with
/// its buffer's address and rkey as REP private data, checks the WRITE and
/// the SEND, then answers the parent's DREQ.
#[test]
fn cm_peer() {
    if std::env::var(PEER_VAR).is_err() {
        return;
    }
    let ctx = devices().unwrap()[0].open().unwrap();
    let s = Side::new(ctx, 1 << 16);
    let l = Listener::bind(&s.pd, PortSpace::Tcp, PEER_PORT).unwrap();
    println!("READY {}", ip(&s));
    let req = l.accept_request(W).unwrap();
    assert_eq!(&req.private_data()[..11], b"from parent");
    let qp = s.pd.create_rc_qp(&s.init()).unwrap();
    req.init_qp(&qp).unwrap();
    qp.post_recv(&recv_wr(1, &[s.mr.sge(0, 4096)])).unwrap();
    let mut rep = b"from peer!".to_vec();
    rep.extend_from_slice(&s.mr.addr().to_be_bytes());
    rep.extend_from_slice(&s.mr.rkey().to_be_bytes());
    let mut c = req.accept(qp, &rep).unwrap();
    assert_eq!(ids(&wait(&s.rcq, 1)), vec![(1, WcStatus::Success)]);
    assert_eq!(read(&s.mr, 0, 2000), pattern(2000, 3));
    assert_eq!(read(&s.mr, 8192, 6000), pattern(6000, 4));
    println!("CHECKED");
    assert!(c.wait_disconnected(W), "the parent's DREQ");
    c.disconnect().unwrap();
    // Let the DREP leave before the device closes.
    std::thread::sleep(Duration::from_millis(100));
    println!("DONE");
}

#[test]
fn two_processes_connect_move_data_and_disconnect() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "cm_peer", "--nocapture", "--test-threads=1"])
        .env(PEER_VAR, "1")
        .env_remove("SOFTVERBS_ADDR")
        .env_remove("SOFTVERBS_FAULTS")
        .env_remove("SOFTVERBS_PCAP")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut expect = |prefix: &str| -> String {
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                // The harness may print "test cm_peer ... " before it.
                Ok(l) => {
                    if let Some(i) = l.find(prefix) {
                        return l[i..].to_string();
                    }
                }
                Err(_) => {
                    let _ = child.kill(); // our own child, by its PID
                    let _ = child.wait();
                    panic!("the peer did not say {prefix:?} in time");
                }
            }
        }
    };
    let ready = expect("READY ");
    let peer: std::net::IpAddr = ready["READY ".len()..].parse().unwrap();
    let (a, _) = sides(8);
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    let opts = ConnectOptions {
        private_data: b"from parent".to_vec(),
        wait: W,
        ..Default::default()
    };
    let mut c = cm::connect(qa, peer, PEER_PORT, &opts).unwrap();
    let pd = c.peer_private_data();
    assert_eq!(&pd[..10], b"from peer!");
    let addr = u64::from_be_bytes(pd[10..18].try_into().unwrap());
    let rkey = u32::from_be_bytes(pd[18..22].try_into().unwrap());
    // WRITE first, then the SEND: RC order means both landed when the SEND did.
    assert!(a.mr.write(0, &pattern(2000, 3)));
    assert!(a.mr.write(8192, &pattern(6000, 4)));
    let sg = [a.mr.sge(8192, 6000)];
    let target = WrTarget::Rdma(proto_target(addr + 8192, rkey));
    c.qp()
        .post_send(&send_wr(1, WrOpcode::RdmaWrite, &sg, target, SIG))
        .unwrap();
    let sg = [a.mr.sge(0, 2000)];
    c.qp()
        .post_send(&send_wr(2, WrOpcode::Send, &sg, WrTarget::None, SIG))
        .unwrap();
    assert_eq!(
        ids(&wait(&a.scq, 2)),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    expect("CHECKED");
    c.disconnect().unwrap();
    assert!(c.wait_disconnected(W), "the peer's DREP");
    expect("DONE");
    let start = std::time::Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "peer exit {st}");
            break;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the peer did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn proto_target(remote_addr: u64, rkey: u32) -> RdmaTarget {
    RdmaTarget { remote_addr, rkey }
}

#[test]
fn channel_fds_are_readable_exactly_while_events_wait() {
    let (a, b) = sides(9);
    let l = Listener::bind(&b.pd, PortSpace::Tcp, 7012).unwrap();
    let ch = l.channel().clone();
    assert!(!ch.wait_readable(Some(Duration::ZERO)), "nothing yet");
    assert!(l.try_request().is_none());
    let qa = a.pd.create_rc_qp(&a.init()).unwrap();
    let connecting = cm::connect_start(qa, ip(&b), 7012, &ConnectOptions::default()).unwrap();
    // The REQ arrives: the listener's fd becomes readable (as rdma_cm's
    // event channel fd, which the C ABI polls).
    assert!(ch.wait_readable(Some(W)), "the REQ's event");
    let req = l
        .try_request()
        .expect("a request after the fd was readable");
    assert!(!ch.wait_readable(Some(Duration::ZERO)), "drained");
    let qb = b.pd.create_rc_qp(&b.init()).unwrap();
    let pb = req.accept(qb, &[]).unwrap();
    // The active side's outcome arrives on its own channel.
    let ach = connecting.channel().unwrap().clone();
    assert!(ach.wait_readable(Some(W)), "the REP's event");
    let pa = connecting.wait(W).unwrap();
    assert!(pb.channel().wait_readable(Some(W)), "the RTU's event");
    assert_eq!(pb.next_event(Duration::ZERO), Some(ConnEvent::Established));
    assert!(!pb.channel().wait_readable(Some(Duration::ZERO)));
    drop(pa);
}
