//! Fuzzes the transport-packet parser (a UDP payload: BTH … ICRC).
//! Invariants: never panics; whatever parses re-emits to bytes that parse to
//! the same representation, and renders as one log line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::{icrc, Encap, TransportRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(repr) = TransportRepr::parse(data) else { return };
    assert_eq!(repr.buffer_len(), data.len());
    let payload = repr.payload(data);
    assert_eq!(payload.len(), repr.payload_len);
    let encap = Encap::ipv4([198, 18, 0, 1].into(), [198, 18, 0, 2].into(), 0xc000);
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out, payload, &encap).expect("a parsed repr re-emits");
    assert_eq!(TransportRepr::parse(&out), Ok(repr));
    assert!(icrc::verify(&encap, &out).is_ok());
    assert!(!repr.to_string().contains('\n'));
});
