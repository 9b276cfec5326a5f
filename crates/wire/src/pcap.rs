//! Classic pcap files, link type Ethernet.
//!
//! Owns: [`PcapWriter`] (to any `std::io::Write`) and [`PcapReader`] (over a
//! byte slice; µs and ns timestamps, either byte order). Promise: the reader
//! never panics on any input; it reports a damaged file as `Malformed`/`Truncated`.

use std::io::{self, Write};

use crate::field::check_len;
use crate::{Encap, Error};

/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Snapshot length written into the file header.
pub const SNAPLEN: u32 = 262_144;
const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
const FILE_HEADER_LEN: usize = 24;
const RECORD_HEADER_LEN: usize = 16;

/// Writes a classic pcap stream (µs timestamps, host little-endian layout).
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    frame: Vec<u8>,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the 24-byte file header.
    pub fn new(mut out: W) -> io::Result<Self> {
        let mut h = [0u8; FILE_HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC_US.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes()); // version 2.4
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay 0
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter {
            out,
            frame: Vec::new(),
        })
    }

    /// Appends one Ethernet frame with a timestamp in microseconds.
    pub fn write_frame(&mut self, ts_us: u64, frame: &[u8]) -> io::Result<()> {
        let len = u32::try_from(frame.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too long"))?;
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&((ts_us / 1_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((ts_us % 1_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&len.min(SNAPLEN).to_le_bytes());
        h[12..16].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&h)?;
        self.out
            .write_all(&frame[..frame.len().min(SNAPLEN as usize)])
    }

    /// Wraps `transport` (a sealed UDP payload) in Ethernet/IP/UDP per `encap`
    /// and appends it.
    pub fn write_transport(
        &mut self,
        ts_us: u64,
        encap: &Encap,
        transport: &[u8],
    ) -> io::Result<()> {
        let mut frame = std::mem::take(&mut self.frame);
        frame.resize(encap.frame_len(transport.len()), 0);
        let result = encap
            .emit_frame(transport, &mut frame)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
            .and_then(|_| self.write_frame(ts_us, &frame));
        self.frame = frame;
        result
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One record of a pcap file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub ts_sec: u32,
    /// Microseconds or nanoseconds, per the file's magic.
    pub ts_frac: u32,
    pub orig_len: u32,
    pub data: &'a [u8],
}

/// Iterates over the records of a classic pcap file held in memory.
#[derive(Debug, Clone)]
pub struct PcapReader<'a> {
    rest: &'a [u8],
    big_endian: bool,
    pub nanoseconds: bool,
    pub linktype: u32,
}

fn read(b: &[u8], at: usize, big_endian: bool) -> u32 {
    let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if big_endian {
        u32::from_be_bytes(v)
    } else {
        u32::from_le_bytes(v)
    }
}

impl<'a> PcapReader<'a> {
    /// Reads the file header.
    pub fn new(file: &'a [u8]) -> Result<Self, Error> {
        check_len("pcap file header", file, FILE_HEADER_LEN)?;
        let (big_endian, nanoseconds) = match read(file, 0, false) {
            MAGIC_US => (false, false),
            MAGIC_NS => (false, true),
            m if m.swap_bytes() == MAGIC_US => (true, false),
            m if m.swap_bytes() == MAGIC_NS => (true, true),
            _ => {
                return Err(Error::Malformed {
                    layer: "pcap",
                    what: "bad magic",
                })
            }
        };
        let linktype = read(file, 20, big_endian);
        Ok(PcapReader {
            rest: &file[FILE_HEADER_LEN..],
            big_endian,
            nanoseconds,
            linktype,
        })
    }

    fn next_record(&mut self) -> Result<Record<'a>, Error> {
        check_len("pcap record header", self.rest, RECORD_HEADER_LEN)?;
        let h = self.rest;
        let incl = read(h, 8, self.big_endian) as usize;
        let end = RECORD_HEADER_LEN
            .checked_add(incl)
            .filter(|&e| e <= h.len());
        let end = end.ok_or(Error::Truncated {
            header: "pcap record",
            need: RECORD_HEADER_LEN.saturating_add(incl),
            have: h.len(),
        })?;
        let record = Record {
            ts_sec: read(h, 0, self.big_endian),
            ts_frac: read(h, 4, self.big_endian),
            orig_len: read(h, 12, self.big_endian),
            data: &h[RECORD_HEADER_LEN..end],
        };
        self.rest = &h[end..];
        Ok(record)
    }
}

impl<'a> Iterator for PcapReader<'a> {
    type Item = Result<Record<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let record = self.next_record();
        if record.is_err() {
            self.rest = &[]; // stop after the first damaged record
        }
        Some(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(1_500_000, &[1, 2, 3]).unwrap();
        w.write_frame(2_000_001, &[4; 70]).unwrap();
        let file = w.into_inner();
        assert_eq!(file[..4], [0xd4, 0xc3, 0xb2, 0xa1]);
        let records: Vec<_> = PcapReader::new(&file)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(
            (records[0].ts_sec, records[0].ts_frac, records[0].data),
            (1, 500_000, &[1u8, 2, 3][..])
        );
        assert_eq!(
            (records[1].ts_sec, records[1].ts_frac, records[1].orig_len),
            (2, 1, 70)
        );
    }

    #[test]
    fn damaged_files_are_errors() {
        assert!(PcapReader::new(&[0; 10]).is_err());
        assert!(PcapReader::new(&[0; 24]).is_err());
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(0, &[9; 40]).unwrap();
        let file = w.into_inner();
        for cut in 25..file.len() {
            let results: Vec<_> = PcapReader::new(&file[..cut]).unwrap().collect();
            assert!(results.iter().any(Result::is_err), "cut {cut}");
        }
    }
}
