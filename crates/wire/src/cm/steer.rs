//! Which process of a shared address must handle a CM MAD (spec/cm.md §8,
//! spec/shared-address.md): comm IDs carry the allocating process's slot in
//! their top 7 bits, so a MAD that names one of them can be handed to its
//! owner by reading one field; REQ and SIDR_REQ go by service ID. Pure
//! functions of the MAD's bytes: any process of the address can decide.

use super::{Message, Repr};

/// Comm IDs carry the allocating process's slot of a shared address in
/// their top 7 bits (spec/cm.md §8): as many slots as QPNs have (io's share).
pub const COMM_ID_SLOTS: u32 = 128;
/// Where the slot starts in a comm ID.
pub const COMM_ID_SLOT_SHIFT: u32 = 25;
/// The bits of a comm ID below the slot.
pub const COMM_ID_LOW_MASK: u32 = (1 << COMM_ID_SLOT_SHIFT) - 1;

/// The slot a comm ID was allocated in (proto's `Cm::set_slot`).
pub fn comm_id_slot(id: u32) -> u8 {
    (id >> COMM_ID_SLOT_SHIFT) as u8
}

/// Which process of a shared address must handle a CM MAD (spec/cm.md §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steer {
    /// A MAD that names one of our comm IDs (REP, RTU, REJ, MRA, DREQ, DREP:
    /// Remote Comm ID; SIDR_REP: Request ID): the slot that allocated it
    /// ([`comm_id_slot`]).
    Slot(u8),
    /// A REQ or SIDR_REQ: the process listening on this service ID.
    Service(u64),
    /// Anything else (malformed, a REJ naming no comm ID of ours, other
    /// attributes): whoever received it; its CM answers or drops it.
    Here,
}

/// Where a CM MAD (the 256 bytes after BTH and DETH) must go. Pure: no
/// table is consulted, so any process of the address can decide.
pub fn steer(mad: &[u8]) -> Steer {
    let Ok(repr) = Repr::parse(mad) else {
        return Steer::Here;
    };
    let named = match &repr.message {
        Message::Req(r) => return Steer::Service(r.service_id),
        Message::SidrReq(r) => return Steer::Service(r.service_id),
        Message::Rep(r) => r.remote_comm_id,
        Message::Rtu(r) => r.remote_comm_id,
        Message::Rej(r) => r.remote_comm_id,
        Message::Mra(m) => m.remote_comm_id,
        Message::Dreq(d) => d.remote_comm_id,
        Message::Drep(d) => d.remote_comm_id,
        Message::SidrRep(r) => r.request_id,
    };
    // 0 names nothing (a REJ of a REQ not yet answered, matched by CA GUID).
    if named == 0 {
        Steer::Here
    } else {
        Steer::Slot(comm_id_slot(named))
    }
}
