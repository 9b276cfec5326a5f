//! Running tshark on a capture file: decoded BTH fields and malformed packets.
//! Without tshark the callers skip, unless `SOFTVERBS_REQUIRE_TOOLS=1` (CI).

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// Whether tshark runs here; panics if it does not and tools are required.
pub fn available() -> bool {
    let ok = Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok || std::env::var("SOFTVERBS_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "tshark not found and SOFTVERBS_REQUIRE_TOOLS=1"
    );
    ok
}

/// One packet as tshark decodes it (RoCEv2 on UDP 4791).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    pub src: String,
    pub dst: String,
    /// BTH opcode, `None` if tshark found no BTH.
    pub opcode: Option<u8>,
    pub dest_qp: Option<u32>,
    pub psn: Option<u32>,
    /// AETH syndrome, when there is one.
    pub syndrome: Option<u8>,
    /// tshark marked the packet malformed.
    pub malformed: bool,
}

fn number(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Every packet of `file`, decoded by tshark.
pub fn decode(file: &Path) -> Vec<Decoded> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-d", "udp.port==4791,infiniband", "-T", "fields"])
        .args(["-E", "separator=/t", "-E", "occurrence=f"])
        .args([
            "-e",
            "ip.src",
            "-e",
            "ip.dst",
            "-e",
            "infiniband.bth.opcode",
        ])
        .args(["-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn"])
        .args(["-e", "infiniband.aeth.syndrome", "-e", "_ws.malformed"])
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let get = |i: usize| f.get(i).copied().unwrap_or("");
            Decoded {
                src: get(0).to_string(),
                dst: get(1).to_string(),
                opcode: number(get(2)).map(|v| v as u8),
                dest_qp: number(get(3)).map(|v| v as u32),
                psn: number(get(4)).map(|v| v as u32),
                syndrome: number(get(5)).map(|v| v as u8),
                malformed: !get(6).is_empty(),
            }
        })
        .collect()
}
