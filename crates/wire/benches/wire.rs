//! Throughput of parse, emit and ICRC in bytes of transport packet per second,
//! beside a memcpy of the same bytes measured in the same run (the baseline).
//!
//! Run: `cargo bench -p softverbs-wire` (criterion prints GiB/s per function).

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use wire::icrc::{self, Endpoints};
use wire::{bth, reth, Encap, Opcode, Psn, Qpn, Rkey, TransportRepr};

fn write_only(payload_len: usize) -> TransportRepr {
    let bth = bth::Repr {
        ack_req: true,
        ..bth::Repr::new(
            Opcode::RC_RDMA_WRITE_ONLY,
            Qpn::from_masked(0x11),
            Psn::from_masked(7),
        )
    };
    let mut r = TransportRepr::new(bth);
    r.reth = Some(reth::Repr {
        va: 0x7f00_0000_1000,
        rkey: Rkey(0x1043),
        dma_len: payload_len as u32,
    });
    r.payload_len = payload_len;
    r
}

fn bench(c: &mut Criterion) {
    let encap = Encap::ipv4(
        Ipv4Addr::new(198, 18, 0, 1),
        Ipv4Addr::new(198, 18, 0, 2),
        0xc123,
    );
    let ep = Endpoints {
        src: [198, 18, 0, 1].into(),
        dst: [198, 18, 0, 2].into(),
        src_port: 0xc123,
        dst_port: 4791,
    };
    let mut group = c.benchmark_group("wire");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    for payload_len in [64usize, 1024, 4096] {
        let repr = write_only(payload_len);
        let payload: Vec<u8> = (0..payload_len).map(|i| i as u8).collect();
        let mut packet = vec![0u8; repr.buffer_len()];
        repr.emit(&mut packet, &payload, &encap).unwrap();
        let mut out = vec![0u8; repr.buffer_len()];
        group.throughput(Throughput::Bytes(packet.len() as u64));

        group.bench_with_input(BenchmarkId::new("memcpy", payload_len), &packet, |b, p| {
            b.iter(|| out.copy_from_slice(black_box(p)))
        });
        group.bench_with_input(BenchmarkId::new("parse", payload_len), &packet, |b, p| {
            b.iter(|| TransportRepr::parse(black_box(p)).unwrap())
        });
        group.bench_with_input(
            BenchmarkId::new("emit_unsealed", payload_len),
            &payload,
            |b, p| {
                b.iter(|| {
                    repr.emit_unsealed(black_box(&mut out), black_box(p))
                        .unwrap()
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("emit_with_icrc", payload_len),
            &payload,
            |b, p| {
                b.iter(|| {
                    repr.emit(black_box(&mut out), black_box(p), &encap)
                        .unwrap()
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("icrc_compute", payload_len),
            &packet,
            |b, p| b.iter(|| icrc::compute(&encap, black_box(p)).unwrap()),
        );
        group.bench_with_input(
            BenchmarkId::new("icrc_verify_received_v4", payload_len),
            &packet,
            |b, p| b.iter(|| icrc::verify_received(&ep, black_box(p)).unwrap()),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
