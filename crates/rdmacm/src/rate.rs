//! The static rate of a path from the port's width and speed (pure data):
//! `enum ibv_rate` as a table, checked against `<infiniband/verbs.h>` by
//! tests/layout.rs and its mapping by tests/rate.rs.

/// `(rate in units of 100 Mb/s, enum ibv_rate name, value)`, ascending.
pub const IBV_RATES: [(u32, &str, u8); 23] = [
    (25, "IBV_RATE_2_5_GBPS", 2),
    (50, "IBV_RATE_5_GBPS", 5),
    (100, "IBV_RATE_10_GBPS", 3),
    (140, "IBV_RATE_14_GBPS", 11),
    (200, "IBV_RATE_20_GBPS", 6),
    (250, "IBV_RATE_25_GBPS", 15),
    (280, "IBV_RATE_28_GBPS", 19),
    (300, "IBV_RATE_30_GBPS", 4),
    (400, "IBV_RATE_40_GBPS", 7),
    (500, "IBV_RATE_50_GBPS", 20),
    (560, "IBV_RATE_56_GBPS", 12),
    (600, "IBV_RATE_60_GBPS", 8),
    (800, "IBV_RATE_80_GBPS", 9),
    (1000, "IBV_RATE_100_GBPS", 16),
    (1120, "IBV_RATE_112_GBPS", 13),
    (1200, "IBV_RATE_120_GBPS", 10),
    (1680, "IBV_RATE_168_GBPS", 14),
    (2000, "IBV_RATE_200_GBPS", 17),
    (3000, "IBV_RATE_300_GBPS", 18),
    (4000, "IBV_RATE_400_GBPS", 21),
    (6000, "IBV_RATE_600_GBPS", 22),
    (8000, "IBV_RATE_800_GBPS", 23),
    (12000, "IBV_RATE_1200_GBPS", 24),
];

/// Lanes of `ibv_port_attr.active_width` (1x, 4x, 8x, 12x, 2x).
pub fn lanes(width: u8) -> u32 {
    match width {
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 1,
    }
}

/// Per-lane rate of `ibv_port_attr.active_speed`, in 100 Mb/s (SDR 2.5,
/// DDR 5, QDR 10, FDR10 10, FDR 14, EDR 25, HDR 50, NDR 100 Gb/s).
pub fn lane_rate(speed: u8) -> u32 {
    match speed {
        2 => 50,
        4 | 8 => 100,
        16 => 140,
        32 => 250,
        64 => 500,
        128 => 1000,
        _ => 25,
    }
}

/// The `enum ibv_rate` of a port: the highest table rate not above
/// lanes × lane rate (2.5 Gb/s at least).
pub fn port_rate(width: u8, speed: u8) -> u8 {
    let r = lanes(width) * lane_rate(speed);
    IBV_RATES
        .iter()
        .rev()
        .find(|(x, _, _)| *x <= r)
        .map_or(IBV_RATES[0].2, |e| e.2)
}
