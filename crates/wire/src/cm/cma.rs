//! The rdma_cm conventions on top of CM (spec/cm.md §3): IP-based service
//! IDs and the 36-byte `cma_hdr` at the start of REQ and SIDR_REQ private
//! data.
//!
//! Owns: [`PortSpace`], [`service_id`], [`Header`] (parse/emit). Promise:
//! `Header::parse` never panics; it refuses a short buffer, a version other
//! than 0 and an IP version other than 4 or 6.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::field;
use crate::mad::MadError;
use crate::Error;

/// `sizeof(struct cma_hdr)` (§3.2).
pub const HEADER_LEN: usize = 36;
/// `CMA_VERSION` (§3.2).
pub const CMA_VERSION: u8 = 0;
/// The Q_Key rdma_cm gives UD QPs of RDMA_PS_UDP / RDMA_PS_IB (§5.9).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// rdma_cm port spaces (`enum rdma_ucm_port_space`, §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    Ipoib = 0x0002,
    Tcp = 0x0106,
    Udp = 0x0111,
    Ib = 0x013F,
}

impl PortSpace {
    pub fn from_code(code: u16) -> Option<PortSpace> {
        [
            PortSpace::Ipoib,
            PortSpace::Tcp,
            PortSpace::Udp,
            PortSpace::Ib,
        ]
        .into_iter()
        .find(|ps| *ps as u16 == code)
    }
}

/// The service ID of `port` in `ps`: `ps << 16 | port` (`rdma_get_service_id`, §3.1).
pub const fn service_id(ps: PortSpace, port: u16) -> u64 {
    ((ps as u64) << 16) | port as u64
}

/// The (port space, port) a service ID stands for, if it is an rdma_cm one.
pub fn split_service_id(id: u64) -> Option<(PortSpace, u16)> {
    if id >> 32 != 0 {
        return None;
    }
    PortSpace::from_code((id >> 16) as u16).map(|ps| (ps, id as u16))
}

/// A parsed `cma_hdr` (§3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The active side's source port.
    pub src_port: u16,
    pub src: IpAddr,
    pub dst: IpAddr,
}

fn read_addr(b: &[u8], at: usize, v4: bool) -> IpAddr {
    let mut raw = [0u8; 16];
    raw.copy_from_slice(&b[at..at + 16]);
    if v4 {
        IpAddr::V4(Ipv4Addr::new(raw[12], raw[13], raw[14], raw[15]))
    } else {
        IpAddr::V6(Ipv6Addr::from(raw))
    }
}

fn write_addr(b: &mut [u8], at: usize, addr: IpAddr) {
    let raw = match addr {
        // union cma_ip_addr: pad[3] zero, then the IPv4 address.
        IpAddr::V4(v4) => {
            let mut r = [0u8; 16];
            r[12..].copy_from_slice(&v4.octets());
            r
        }
        IpAddr::V6(v6) => v6.octets(),
    };
    b[at..at + 16].copy_from_slice(&raw);
}

impl Header {
    pub fn parse(private_data: &[u8]) -> Result<Header, MadError> {
        field::check_len("cma_hdr", private_data, HEADER_LEN)?;
        if private_data[0] != CMA_VERSION {
            return Err(MadError::Reserved {
                field: "cma_hdr version",
                value: u32::from(private_data[0]),
            });
        }
        let v4 = match private_data[1] >> 4 {
            4 => true,
            6 => false,
            value => {
                return Err(MadError::Reserved {
                    field: "cma_hdr IP version",
                    value: u32::from(value),
                })
            }
        };
        Ok(Header {
            src_port: field::read_u16(private_data, 2),
            src: read_addr(private_data, 4, v4),
            dst: read_addr(private_data, 20, v4),
        })
    }

    /// Writes the 36 bytes. Both addresses must be of one family; an IPv4
    /// address paired with IPv6 is written in its IPv4-mapped IPv6 form.
    pub fn emit(&self, out: &mut [u8]) -> Result<(), Error> {
        if out.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall {
                need: HEADER_LEN,
                have: out.len(),
            });
        }
        let (src, dst) = match (self.src, self.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => (self.src, self.dst),
            (s, d) => (IpAddr::V6(to_v6(s)), IpAddr::V6(to_v6(d))),
        };
        out[0] = CMA_VERSION;
        out[1] = if src.is_ipv4() { 4 << 4 } else { 6 << 4 };
        field::write_u16(out, 2, self.src_port);
        write_addr(out, 4, src);
        write_addr(out, 20, dst);
        Ok(())
    }
}

fn to_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // cma_format_hdr for 10.0.0.1:40000 → 10.0.0.2.
    const BYTES: [u8; HEADER_LEN] = [
        0, 0x40, 0x9C, 0x40, //
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1, //
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
    ];

    fn header() -> Header {
        Header {
            src_port: 40000,
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        }
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(Header::parse(&BYTES), Ok(header()));
        let mut out = [0xEE; HEADER_LEN];
        header().emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
        let v6 = Header {
            src_port: 1,
            src: "fe80::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
        };
        v6.emit(&mut out).unwrap();
        assert_eq!(out[1], 0x60);
        assert_eq!(Header::parse(&out), Ok(v6));
    }

    #[test]
    fn bad_headers_are_refused() {
        let mut bad = BYTES;
        bad[0] = 1;
        assert!(matches!(
            Header::parse(&bad),
            Err(MadError::Reserved { value: 1, .. })
        ));
        let mut bad = BYTES;
        bad[1] = 0x50;
        assert!(matches!(
            Header::parse(&bad),
            Err(MadError::Reserved { value: 5, .. })
        ));
        assert!(Header::parse(&BYTES[..35]).is_err());
    }

    #[test]
    fn service_ids() {
        // rdma_get_service_id: ps << 16 + port; TCP port 7471 (rping's default).
        assert_eq!(service_id(PortSpace::Tcp, 7471), 0x0106_1D2F);
        assert_eq!(service_id(PortSpace::Udp, 8080), 0x0111_1F90);
        assert_eq!(split_service_id(0x0106_1D2F), Some((PortSpace::Tcp, 7471)));
        assert_eq!(split_service_id(0x0200_0000_0106_1D2F), None);
        assert_eq!(split_service_id(0x0999_0001), None);
    }
}
