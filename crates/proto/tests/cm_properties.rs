//! Property tests of the connection manager against hostile input: every
//! MAD of a real exchange, mutated and sent from the right or a foreign
//! GID, into endpoints in every phase of a connection. Nothing panics; each
//! datagram is either parsed (counted as received) or dropped as unparsable;
//! whatever the CM sends in answer is a valid MAD.

mod cm_common;

use cm_common::*;
use proptest::prelude::*;
use proto::cm::{Cm, CmEvent, DropReason};
use wire::mad::MAD_LEN;

/// A and B through a whole connection; every MAD either sent, in order, and
/// snapshots of both sides at each phase.
fn recorded() -> (Vec<[u8; MAD_LEN]>, Vec<(Cm, Cm)>) {
    let (mut a, mut b) = (node(1, 21), node(2, 21));
    b.listen(service()).unwrap();
    let mut mads = Vec::new();
    let mut phases = Vec::new();
    let mut move_all = |from: &mut Cm, fg, to: &mut Cm, now| {
        for t in drain(from) {
            mads.push(t.mad);
            to.handle_mad(now, fg, &t.mad);
        }
    };
    let id_a = a.connect(0, &connect_params(1, 2, 0x11, 1, b"x")).unwrap();
    phases.push((a.clone(), b.clone()));
    move_all(&mut a, gid(1), &mut b, 0);
    let Some(CmEvent::ConnectRequest { id: id_b, .. }) = b.poll_event() else {
        panic!()
    };
    phases.push((a.clone(), b.clone()));
    b.accept(0, id_b, &accept_params(0x22, 2, b"y")).unwrap();
    move_all(&mut b, gid(2), &mut a, 0);
    phases.push((a.clone(), b.clone()));
    a.ready_to_use(id_a, &[]).unwrap();
    move_all(&mut a, gid(1), &mut b, 0);
    phases.push((a.clone(), b.clone()));
    a.disconnect(0, id_a, &[]).unwrap();
    move_all(&mut a, gid(1), &mut b, 0);
    phases.push((a.clone(), b.clone()));
    b.disconnect(0, id_b, &[]).unwrap();
    move_all(&mut b, gid(2), &mut a, 0);
    phases.push((a.clone(), b.clone()));
    (mads, phases)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn hostile_mads_never_panic_and_are_accounted_for(
        which in 0usize..6,
        phase in 0usize..6,
        to_a in any::<bool>(),
        foreign in any::<bool>(),
        flips in proptest::collection::vec((0usize..MAD_LEN, any::<u8>()), 0..6),
        cut in proptest::option::of(0usize..MAD_LEN + 8),
    ) {
        let (mads, phases) = recorded();
        let (mut a, mut b) = phases[phase].clone();
        let target = if to_a { &mut a } else { &mut b };
        let mut mad = mads[which % mads.len()].to_vec();
        for (at, v) in flips {
            mad[at] = v;
        }
        if let Some(len) = cut {
            mad.resize(len, 0);
        }
        let from = if foreign { gid(7) } else if to_a { gid(2) } else { gid(1) };
        let before = *target.counters();
        target.handle_mad(1, from, &mad);
        target.handle_timeout(u64::MAX / 2);
        let after = target.counters();
        let parsed: u64 = after.received.iter().sum::<u64>() - before.received.iter().sum::<u64>();
        let unparsable = [DropReason::Length, DropReason::NotCmSend, DropReason::Attribute, DropReason::BadField]
            .iter()
            .map(|r| after.dropped(*r) - before.dropped(*r))
            .sum::<u64>();
        prop_assert_eq!(parsed + unparsable, 1);
        while let Some(t) = target.poll_transmit() {
            prop_assert!(wire::cm::Repr::parse(&t.mad).is_ok());
        }
        while target.poll_event().is_some() {}
    }
}
