//! The path rate from the port's width and speed (src/rate.rs; the enum's
//! values are checked against verbs.h by tests/layout.rs).

#[path = "../src/rate.rs"]
mod rate;

use rate::{port_rate, IBV_RATES};

fn value(name: &str) -> u8 {
    IBV_RATES.iter().find(|e| e.1 == name).unwrap().2
}

#[test]
fn known_links_map_to_their_rate() {
    assert_eq!(port_rate(1, 1), value("IBV_RATE_2_5_GBPS"), "1x SDR");
    assert_eq!(port_rate(2, 4), value("IBV_RATE_40_GBPS"), "4x QDR");
    assert_eq!(port_rate(2, 16), value("IBV_RATE_56_GBPS"), "4x FDR");
    assert_eq!(port_rate(2, 32), value("IBV_RATE_100_GBPS"), "4x EDR");
    assert_eq!(port_rate(8, 1), value("IBV_RATE_30_GBPS"), "12x SDR");
    assert_eq!(port_rate(16, 64), value("IBV_RATE_100_GBPS"), "2x HDR");
    assert_eq!(port_rate(2, 128), value("IBV_RATE_400_GBPS"), "4x NDR");
}

#[test]
fn the_table_ascends_and_every_port_gets_a_rate_at_most_its_own() {
    assert!(IBV_RATES.windows(2).all(|w| w[0].0 < w[1].0));
    for width in [1u8, 2, 4, 8, 16] {
        for speed in [1u8, 2, 4, 8, 16, 32, 64, 128] {
            let r = port_rate(width, speed);
            let gbps = IBV_RATES.iter().find(|e| e.2 == r).unwrap().0;
            assert!(
                gbps <= rate::lanes(width) * rate::lane_rate(speed),
                "width {width} speed {speed}"
            );
        }
    }
}
