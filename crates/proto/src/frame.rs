//! RAW_PACKET frames as the engine and the driver speak of them: the
//! Ethernet sizes, a frame the engine wrote for a QP's packet socket, and the
//! raw path's counters (spec/raw-packet.md). Imports nothing of the crate;
//! the path itself is `datapath::raw`.

/// An Ethernet header: destination and source MAC, EtherType.
pub const ETH_HEADER_LEN: u32 = 14;
/// One 802.1Q tag.
pub const VLAN_TAG_LEN: u32 = 4;
/// The default frame limit: a 1500-byte MTU, its header and one VLAN tag.
pub const DEFAULT_FRAME_MAX: u32 = 1500 + ETH_HEADER_LEN + VLAN_TAG_LEN;

/// A frame the engine wrote into the driver's buffer: `len` bytes, to leave
/// through the packet socket of QP `qpn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The RAW_PACKET QP whose socket sends it.
    pub qpn: u32,
    /// Bytes written at the start of the buffer.
    pub len: usize,
}

/// Device counters of the raw path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawCounters {
    /// Frames sent.
    pub frames_sent: u64,
    /// Frames delivered to a receive WQE.
    pub frames_received: u64,
    /// Frames dropped: no such RAW_PACKET QP, or not in a receiving state.
    pub drop_not_ready: u64,
    /// Frames dropped for want of a receive WQE.
    pub drop_no_wqe: u64,
}
