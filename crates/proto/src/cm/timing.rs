//! CM time arithmetic (spec/cm.md §3.6, §4): the kernel's conversions from
//! 5-bit IBA time codes (4.096 µs × 2^code) to milliseconds, and the local ACK
//! timeout a path gets. Numbers only; no clocks.

/// Nanoseconds in a millisecond.
pub const MS_NS: u64 = 1_000_000;

/// `cm_convert_to_ms`: 4.096 µs × 2^code as a power-of-two of milliseconds,
/// `1 << max(code − 8, 0)` (spec/cm.md §4.1). Codes above 31 count as 31.
pub fn convert_to_ms(code: u8) -> u64 {
    1u64 << code.min(31).saturating_sub(8)
}

/// `cm_ack_timeout(ack_delay, packet_life_time)` (spec/cm.md §3.6): the
/// smallest code whose timeout covers the CA's ACK delay plus twice the
/// packet life time, rounded as the kernel rounds, at most 31.
pub fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let life = i32::from(packet_life_time) + 1;
    let delay = i32::from(ca_ack_delay);
    let t = if life >= delay {
        life + i32::from(delay >= life - 1)
    } else {
        delay + i32::from(life >= delay - 1)
    };
    t.clamp(0, 31) as u8
}

/// The REQ's MAD timeout: `2 × convert(packet_life_time) +
/// convert(remote_cm_response_timeout)` ms (`ib_send_cm_req`, spec/cm.md §4.2).
pub fn req_timeout_ns(packet_life_time: u8, remote_cm_response_timeout: u8) -> u64 {
    (2 * convert_to_ms(packet_life_time) + convert_to_ms(remote_cm_response_timeout)) * MS_NS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_match_the_kernel() {
        assert_eq!(convert_to_ms(0), 1);
        assert_eq!(convert_to_ms(8), 1);
        assert_eq!(convert_to_ms(18), 1024);
        assert_eq!(convert_to_ms(20), 4096);
        assert_eq!(convert_to_ms(24), 65_536);
        // rdma_cm on RoCE: life 18, response timeout 20 → 6144 ms per try (spec §4.2).
        assert_eq!(req_timeout_ns(18, 20), 6144 * MS_NS);
    }

    #[test]
    fn ack_timeout_rounds_like_cm_ack_timeout() {
        // life + 1 dominates; ack delay within one step rounds up.
        assert_eq!(ack_timeout(0, 18), 19);
        assert_eq!(ack_timeout(15, 18), 19);
        assert_eq!(ack_timeout(18, 18), 20);
        assert_eq!(ack_timeout(19, 18), 20);
        // ack delay dominates.
        assert_eq!(ack_timeout(25, 10), 25);
        assert_eq!(ack_timeout(25, 23), 26);
        assert_eq!(ack_timeout(31, 31), 31);
    }
}
