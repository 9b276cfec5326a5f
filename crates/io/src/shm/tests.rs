//! Two paths in one process (two slots of one address, as two processes
//! would hold them): discovery, acceptance, datagrams both ways, wake-ups,
//! the end of a peer, and the refusals that send datagrams by UDP.

use super::*;
use crate::engine::Room;
use crate::share::qpn_range;
use inplace::STREAM_BATCH;

/// A datagram with a BTH whose destination QP is in `slot`.
fn to_slot(slot: u8, fill: u8, len: usize) -> Vec<u8> {
    let mut d = vec![fill; len.max(12)];
    d[5..8].copy_from_slice(&(qpn_range(slot).0 + 5).to_be_bytes()[1..]);
    d
}

fn sent(p: &mut ShmPath, to: SocketAddr, d: &[u8], c: &Counters) -> bool {
    p.send(to, d, ring::Meta::new(true, None), c) == Push::Sent
}

/// Receives up to `budget` datagrams, each handed to `f` with its sender
/// and whether it came marked intact.
fn each(
    p: &mut ShmPath,
    budget: usize,
    c: &Counters,
    mut f: impl FnMut(SocketAddr, &[u8], bool),
) -> bool {
    p.receive(budget, c, |stage, arrived| {
        for a in arrived {
            f(a.from, &stage[a.at..a.at + a.len], a.meta.is_intact());
        }
    })
}

/// What a progress thread does around a sleep: poll(2) on the path's
/// descriptors (at most 5 s), then a pass that checks what was ready.
fn sleep_and_check(p: &mut ShmPath, c: &Counters) {
    let mut fds = Vec::new();
    p.pollfds(&mut fds);
    crate::sys::poll(&mut fds, Some(Duration::from_secs(5))).unwrap();
    p.woke(&fds);
    each(p, 16, c, |_, _, _| {});
}

fn path(ip: IpAddr) -> (Slot, ShmPath) {
    let slot = Slot::claim(ip).unwrap();
    slot.joined();
    let local = SocketAddr::new(ip, 4791);
    let p = ShmPath::open(local, &slot, 65536).unwrap();
    (slot, p)
}

/// Sends until the receiver accepts (it must run its checks to answer),
/// bounded: how many went by the ring.
fn send_accepted(a: &mut ShmPath, b: &mut ShmPath, to: SocketAddr, d: &[u8], c: &Counters) {
    for _ in 0..1000 {
        if sent(a, to, d, c) {
            return;
        }
        each(b, 16, c, |_, _, _| panic!("nothing was pushed yet"));
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the receiver never accepted");
}

/// `a`'s ring to `b` up, accepted, settled and read empty, by a datagram
/// to `slot` (`b`'s).
fn ring_up(a: &mut ShmPath, b: &mut ShmPath, at: SocketAddr, slot: u8, c: &Counters) {
    send_accepted(a, b, at, &to_slot(slot, 1, 64), c);
    b.settle_fresh();
    each(b, 16, c, |_, _, _| {});
}

#[test]
fn datagrams_cross_both_ways_and_end_with_the_peer() {
    let ip: IpAddr = "127.0.91.1".parse().unwrap();
    let (sa, mut a) = path(ip);
    let (sb, mut b) = path(ip);
    let c = Counters::default();
    let to_b = SocketAddr::new(ip, 4791);
    let d = to_slot(sb.index(), 0xab, 1000);
    send_accepted(&mut a, &mut b, to_b, &d, &c);
    for i in 0..50u8 {
        assert!(sent(
            &mut a,
            to_b,
            &to_slot(sb.index(), i, 100 + usize::from(i)),
            &c
        ));
    }
    // A ring nothing was taken from is left until its owner read the
    // socket to its end (what the sender sent before the switch).
    assert!(b.fresh_data());
    let _ = each(&mut b, 100, &c, |_, _, _| panic!("taken from a fresh ring"));
    b.settle_fresh();
    assert!(!b.fresh_data());
    let mut got = Vec::new();
    each(&mut b, 100, &c, |from, bytes, _| {
        got.push((from, bytes.to_vec()))
    });
    assert_eq!(got.len(), 51);
    assert_eq!(
        got[0],
        (to_b, d.clone()),
        "the sender's address comes along"
    );
    for (i, (_, g)) in got[1..].iter().enumerate() {
        assert_eq!(g, &to_slot(sb.index(), i as u8, 100 + i));
    }
    // And back: b discovers a.
    let to_a = SocketAddr::new(ip, 4791);
    send_accepted(&mut b, &mut a, to_a, &to_slot(sa.index(), 1, 64), &c);
    a.settle_fresh();
    let mut n = 0;
    each(&mut a, 16, &c, |_, _, _| n += 1);
    assert_eq!(n, 1);
    let s = c.snapshot();
    assert_eq!((s.shm_datagrams_sent, s.shm_datagrams_received), (52, 52));
    assert_eq!(s.shm_fallbacks, 0);
    // The sender's intact mark comes along as given.
    assert_eq!(a.send(to_b, &d, ring::Meta::default(), &c), Push::Sent);
    assert!(sent(&mut a, to_b, &d, &c));
    let mut marks = Vec::new();
    each(&mut b, 16, &c, |_, bytes, intact| {
        assert_eq!(bytes, &d[..]);
        marks.push(intact);
    });
    assert_eq!(marks, [false, true]);

    // b sleeps: a's next push must wake it (one byte on the connection).
    assert!(!b.arm(), "empty: b may sleep");
    assert!(sent(&mut a, to_b, &d, &c));
    assert_eq!(c.snapshot().shm_wakeups, 1);
    let mut fds = Vec::new();
    b.pollfds(&mut fds);
    crate::sys::poll(&mut fds, Some(Duration::from_secs(5))).unwrap();
    assert!(
        fds.iter().any(|p| p.revents != 0),
        "the wake-up is seen by poll"
    );
    let accepts = c.snapshot().shm_accept_calls;
    b.woke(&fds);
    let mut n = 0;
    each(&mut b, 16, &c, |_, _, _| n += 1);
    assert_eq!(n, 1);
    assert_eq!(
        c.snapshot().shm_accept_calls,
        accepts,
        "a wake-up reads its connection only: the listener was not ready"
    );

    // A full ring holds datagrams back (no consumer here): Full, not UDP.
    let big = to_slot(sb.index(), 7, 65536);
    let mut pushed = 0;
    let full = loop {
        match a.send(to_b, &big, ring::Meta::new(true, None), &c) {
            Push::Sent => pushed += 1,
            other => break other,
        }
        assert!(pushed <= RING_BYTES / 65536, "more than the ring holds");
    };
    assert_eq!(full, Push::Full);
    assert_eq!(c.snapshot().shm_ring_full, 1);
    // 8 of 64 KiB: more than the stage holds, so two hand-overs.
    let mut n = 0;
    each(&mut b, 8, &c, |_, d, _| {
        assert_eq!(d, &big[..]);
        n += 1
    });
    assert_eq!(n, 8);
    assert_eq!(
        a.send(to_b, &big, ring::Meta::new(true, None), &c),
        Push::Sent,
        "room again"
    );
    each(&mut b, 1000, &c, |_, _, _| {});

    // b goes: a notices the end and falls back to UDP (send says no), and
    // asks again only after REDISCOVER.
    drop(b);
    drop(sb);
    sleep_and_check(&mut a, &c);
    assert!(!sent(&mut a, to_b, &d, &c), "nobody holds that path now");
    assert!(
        !a.may_take(to_b, &d),
        "refused peers go by UDP until REDISCOVER"
    );
    assert_eq!(c.snapshot().shm_fallbacks, 1);
}

/// A path says whether it has a ring either way, and its lock's guard
/// leaves that in the flag the transmitting and polling threads read
/// before they take the lock (`Shared::shm_with_rings`).
#[test]
fn the_flag_follows_the_rings_either_way() {
    use crate::driver::ShmGuard;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::sync::Mutex;
    let ip: IpAddr = "127.0.91.11".parse().unwrap();
    let (_sa, a) = path(ip);
    let (sb, b) = path(ip);
    let c = Counters::default();
    let (a, b) = (Mutex::new(a), Mutex::new(b));
    let (ra, rb) = (AtomicBool::new(true), AtomicBool::new(true));
    {
        let (ga, gb) = (
            ShmGuard::new(a.lock().unwrap(), &ra),
            ShmGuard::new(b.lock().unwrap(), &rb),
        );
        assert!(!ga.has_rings() && !gb.has_rings(), "no peer yet");
    }
    assert!(
        !ra.load(Relaxed) && !rb.load(Relaxed),
        "a guard's release records it"
    );
    {
        let mut ga = ShmGuard::new(a.lock().unwrap(), &ra);
        let mut gb = ShmGuard::new(b.lock().unwrap(), &rb);
        ring_up(&mut ga, &mut gb, SocketAddr::new(ip, 4791), sb.index(), &c);
    }
    assert!(ra.load(Relaxed), "the sender has a ring to its peer");
    assert!(rb.load(Relaxed), "the receiver has a ring it reads");
    // The receiver goes: the sender's peer is refused, no ring is left.
    drop(b);
    drop(sb);
    {
        let mut ga = ShmGuard::new(a.lock().unwrap(), &ra);
        sleep_and_check(&mut ga, &c);
    }
    assert!(!ra.load(Relaxed), "the peer went, and its ring");
}

#[test]
fn no_path_there_means_udp() {
    let ip: IpAddr = "127.0.91.2".parse().unwrap();
    let (_sa, mut a) = path(ip);
    let c = Counters::default();
    // Slot 9 of this address: nobody holds it.
    let to = SocketAddr::new(ip, 4791);
    assert!(
        a.may_take(to, &to_slot(9, 0, 64)),
        "unknown peers are asked"
    );
    assert!(!sent(&mut a, to, &to_slot(9, 0, 64), &c));
    assert!(!a.may_take(to, &to_slot(9, 0, 64)));
    assert_eq!(c.snapshot().shm_fallbacks, 1);
    // Never the path: CM MADs (QP1), multicast, other ports, short datagrams.
    let mut gsi = to_slot(0, 0, 300);
    gsi[5..8].copy_from_slice(&[0, 0, 1]);
    assert!(!a.may_take(to, &gsi));
    assert!(!a.may_take("224.0.0.9:4791".parse().unwrap(), &to_slot(1, 0, 64)));
    assert!(!a.may_take(SocketAddr::new(ip, 4792), &to_slot(1, 0, 64)));
    assert!(!a.may_take(to, &[0u8; 8]));
}

#[test]
fn a_hello_from_another_namespace_is_refused() {
    let ip: IpAddr = "127.0.91.3".parse().unwrap();
    let (_sa, mut a) = path(ip);
    let (sb, mut b) = path(ip);
    // Pretend b lives in another namespace: a's hello no longer matches.
    b.netns = Some((1, 2));
    let c = Counters::default();
    let to = SocketAddr::new(ip, 4791);
    let d = to_slot(sb.index(), 0, 64);
    for _ in 0..200 {
        assert!(!sent(&mut a, to, &d, &c), "a refused ring was used");
        if c.snapshot().shm_fallbacks > 0 {
            break;
        }
        each(&mut b, 16, &c, |_, _, _| {});
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        c.snapshot().shm_fallbacks,
        1,
        "the sender learned of the refusal"
    );
    assert!(b.inbound.is_empty());
}

/// A path name held by a process of another user (abstract names carry no
/// permissions, so anyone can bind one) is refused: the datagrams go by UDP
/// and nothing is handed to it. Needs root to run the squatter as `nobody`;
/// CI runs as root.
#[test]
fn a_path_held_by_another_user_is_refused() {
    if crate::sys::euid() != 0 {
        eprintln!("skipped: holding the name as another user needs root");
        return;
    }
    let ip: IpAddr = "127.0.91.4".parse().unwrap();
    let (_sa, mut a) = path(ip);
    let script = format!(
        "import socket, time; s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); \
         s.bind(b'\\0{}'); s.listen(8); print('held', flush=True); time.sleep(30)",
        name(ip, 7)
    );
    // setpriv execs python: the child's pid is the squatter's (ended below
    // by that pid; the script also ends itself after 30 s).
    let mut squatter = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/usr/bin/python3", "-c", &script])
        .current_dir("/")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let stdout = squatter.stdout.take().unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    let c = Counters::default();
    let to = SocketAddr::new(ip, 4791);
    let went = sent(&mut a, to, &to_slot(7, 0, 64), &c);
    let _ = squatter.kill();
    let _ = squatter.wait();
    assert_eq!(line.trim(), "held");
    assert!(!went, "nothing goes to another user's process");
    let s = c.snapshot();
    assert_eq!((s.shm_fallbacks, s.shm_datagrams_sent), (1, 0));
}

/// The path is on by default; `SOFTVERBS_SHM=1` (or on/yes/true) keeps it
/// on, anything else turns it off, nothing leaves it as it was.
#[test]
fn on_by_default_and_the_environment_turns_it_off() {
    let mut o = crate::DriverOptions::default();
    assert!(o.shm, "on by default");
    for (value, on) in [
        ("1", true),
        (" on ", true),
        ("yes", true),
        ("0", false),
        ("x", false),
    ] {
        o.apply_env("d", |n| (n == ENV).then(|| value.to_string()))
            .unwrap();
        assert_eq!(o.shm, on, "{value:?}");
    }
    o.shm = true;
    o.apply_env("d", |_| None).unwrap();
    assert!(o.shm, "unset leaves the setting as it was");
    o.shm = false;
    o.apply_env("d", |_| None).unwrap();
    assert!(!o.shm, "unset leaves the setting as it was");
}

/// A receiver without faults or a capture answers that it takes intact
/// datagrams unchecked, and its sender names it to the engine (address
/// and the QPNs of its slot) once its ring is up; one that has faults or a
/// capture does not; a peer that goes is named no more.
#[test]
fn a_plain_receiver_is_named_as_reached_intact() {
    let ip: IpAddr = "127.0.91.7".parse().unwrap();
    let (_sa, mut a) = path(ip);
    let (sb, mut b) = path(ip);
    let (sc, mut with_faults) = path(ip);
    with_faults.plain = false;
    let c = Counters::default();
    let to = SocketAddr::new(ip, 4791);
    assert_eq!(a.take_intact(), None, "nothing yet");
    send_accepted(&mut a, &mut b, to, &to_slot(sb.index(), 1, 64), &c);
    let (first, last) = qpn_range(sb.index());
    assert_eq!(a.take_intact(), Some(vec![(ip, first, last)]));
    assert_eq!(a.take_intact(), None, "taken; nothing changed since");
    send_accepted(
        &mut a,
        &mut with_faults,
        to,
        &to_slot(sc.index(), 2, 64),
        &c,
    );
    assert_eq!(
        a.take_intact(),
        Some(vec![(ip, first, last)]),
        "the receiver with faults is not named"
    );
    drop(b);
    drop(sb);
    sleep_and_check(&mut a, &c);
    assert_eq!(a.take_intact(), Some(vec![]), "gone: named no more");
}

/// What one in-place read of `p` offers for replies: for each batch, `f`
/// with the batch's sender and the way back, if one is offered.
fn receive_replying(
    p: &mut ShmPath,
    c: &Counters,
    respond: bool,
    mut f: impl FnMut(SocketAddr, Option<&mut Rooms<'_>>),
) {
    p.receive_in_place(Instant::now(), 16, c, respond, |batch, replies| {
        f(batch.from, replies)
    });
}

#[test]
fn a_reply_goes_back_through_the_ring_of_the_requester() {
    let ip: IpAddr = "127.0.91.7".parse().unwrap();
    let (sa, mut a) = path(ip);
    let (sb, mut b) = path(ip);
    let c = Counters::default();
    let at = SocketAddr::new(ip, 4791);
    // Both rings open and accepted, each way.
    ring_up(&mut a, &mut b, at, sb.index(), &c);
    ring_up(&mut b, &mut a, at, sa.index(), &c);
    let qpn_a = qpn_range(sa.index()).0 + 5;
    let reply = to_slot(sa.index(), 9, 80);
    // A request from a; b's engine answers it at once.
    assert!(sent(&mut a, at, &to_slot(sb.index(), 3, 64), &c));
    let mut batches = 0;
    receive_replying(&mut b, &c, true, |from, replies| {
        batches += 1;
        assert_eq!(from, at);
        let r = replies.expect("a way back is offered");
        // Not for QP1, multicast, or another port.
        assert!(r.room(at, 1).is_none());
        assert!(r
            .room(SocketAddr::new("224.0.0.9".parse().unwrap(), 4791), qpn_a)
            .is_none());
        assert!(r.room(SocketAddr::new(ip, 4792), qpn_a).is_none());
        let room = r.room(at, qpn_a).expect("room in the ring back to a");
        room[..reply.len()].copy_from_slice(&reply);
        r.publish(&Transmit {
            to: at,
            len: reply.len(),
            segments: None,
        });
    });
    assert_eq!(batches, 1);
    let mut got = Vec::new();
    each(&mut a, 16, &c, |from, bytes, intact| {
        got.push((from, bytes.to_vec(), intact))
    });
    assert_eq!(got, [(at, reply.clone(), true)], "the reply, marked intact");
    let s = c.snapshot();
    assert_eq!((s.shm_responses, s.send_errors), (1, 0));
    // A reply built for another ring than its room's is dropped, counted.
    assert!(sent(&mut a, at, &to_slot(sb.index(), 4, 64), &c));
    receive_replying(&mut b, &c, true, |_, replies| {
        let r = replies.unwrap();
        let room = r.room(at, qpn_a).unwrap();
        let stray = to_slot(sb.index(), 5, 80);
        room[..stray.len()].copy_from_slice(&stray);
        r.publish(&Transmit {
            to: at,
            len: stray.len(),
            segments: None,
        });
    });
    each(&mut a, 16, &c, |_, _, _| panic!("a stray reply arrived"));
    let s = c.snapshot();
    assert_eq!((s.shm_responses, s.send_errors), (1, 1));
    // Not asked for (or a path that records or alters): none offered.
    assert!(sent(&mut a, at, &to_slot(sb.index(), 6, 64), &c));
    receive_replying(&mut b, &c, false, |_, replies| assert!(replies.is_none()));
    b.plain = false;
    assert!(sent(&mut a, at, &to_slot(sb.index(), 7, 64), &c));
    receive_replying(&mut b, &c, true, |_, replies| assert!(replies.is_none()));
}

/// A read that takes several datagrams, or a run, is a stream's (its
/// progress thread watches before it sleeps); one or two datagrams, a
/// ping-pong's, are not.
#[test]
fn a_batch_of_several_datagrams_or_a_run_is_a_streams() {
    let ip: IpAddr = "127.0.91.9".parse().unwrap();
    let (_sa, mut a) = path(ip);
    let (sb, mut b) = path(ip);
    let c = Counters::default();
    let at = SocketAddr::new(ip, 4791);
    ring_up(&mut a, &mut b, at, sb.index(), &c);
    let d = to_slot(sb.index(), 2, 64);
    let read = |b: &mut ShmPath| {
        let mut seen = Vec::new();
        b.receive_in_place(Instant::now(), 16, &c, false, |batch, _| {
            seen.push((batch.datagrams().count(), batch.is_stream()))
        });
        seen
    };
    for (n, stream) in [
        (1, false),
        (STREAM_BATCH - 1, false),
        (STREAM_BATCH, true),
        (9, true),
    ] {
        for _ in 0..n {
            assert!(sent(&mut a, at, &d, &c));
        }
        assert_eq!(read(&mut b), [(n, stream)], "{n} datagrams");
    }
    // One datagram that is a run (a long message's packets) is one too.
    let run = ring::Meta::new(true, Some([1, 0, 64]));
    assert_eq!(a.send(at, &d, run, &c), Push::Sent);
    assert_eq!(read(&mut b), [(1, true)], "a run");
}
