//! Fuzzes the Ethernet/IP/UDP frame parser, then the transport parser and the
//! receive-side ICRC check (IPv4 ID recovery) on what it yields. Never panics;
//! a recovered ID must make the plain ICRC check pass.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::encap::parse_frame;
use wire::icrc::{self, Endpoints};
use wire::{IpInfo, Ipv4Info, TransportRepr};

fuzz_target!(|data: &[u8]| {
    let Ok((encap, transport)) = parse_frame(data) else { return };
    let _ = TransportRepr::parse(transport);
    let (src, dst) = match encap.ip {
        IpInfo::V4(v4) => (v4.src.into(), v4.dst.into()),
        IpInfo::V6(v6) => (v6.src.into(), v6.dst.into()),
    };
    let ep = Endpoints { src, dst, src_port: encap.src_port, dst_port: encap.dst_port };
    if let Ok(Some(id)) = icrc::verify_received(&ep, transport) {
        let IpInfo::V4(v4) = encap.ip else { panic!("ID recovered for IPv6") };
        let fixed = wire::Encap { ip: IpInfo::V4(Ipv4Info { id, flags_frag: Ipv4Info::DF, ..v4 }), ..encap };
        assert!(icrc::verify(&fixed, transport).is_ok());
    }
});
