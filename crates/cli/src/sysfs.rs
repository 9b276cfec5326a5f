//! The sysfs view of a device: every file, with the contents and format the
//! kernel gives it (`spec/sysfs.md`, from `drivers/infiniband/core/sysfs.c` and
//! `uverbs_main.c`). Pure data: the values come from [`DeviceInfo`] (what the
//! device itself reports to the query verbs), the launcher writes the files.

use softverbs::{DeviceInfo, Gid, PortState};
use std::path::PathBuf;

/// What the view needs beyond the device: where it sits on the host.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The `uverbsN` index (the drop-in library names device N `uverbsN`).
    pub uverbs_index: usize,
    /// The network interface holding each GID's address (`gid_attrs/ndevs/N`);
    /// `None`: no interface holds it, and the file is absent (the kernel fails the read).
    pub ndevs: Vec<Option<String>>,
    /// `major:minor` of the character device standing in for `/dev/infiniband/uverbsN`.
    pub dev_numbers: (u32, u32),
}

/// One file of the view: a path relative to `/sys/class` and its contents.
pub type File = (PathBuf, String);

/// Every file of `/sys/class/infiniband/<dev>` and `/sys/class/infiniband_verbs`.
pub fn files(info: &DeviceInfo, place: &Placement) -> Vec<File> {
    let dev = PathBuf::from("infiniband").join(&info.name);
    let mut out: Vec<File> = Vec::new();
    let mut add = |path: PathBuf, text: String| out.push((path, text + "\n"));
    let id = &info.ident;
    add(dev.join("node_type"), node_type(id.node_type));
    add(dev.join("node_guid"), guid(info.attr.node_guid));
    add(dev.join("sys_image_guid"), guid(info.attr.sys_image_guid));
    add(
        dev.join("node_desc"),
        id.node_desc.chars().take(64).collect(),
    );
    add(dev.join("fw_ver"), info.attr.fw_ver.clone());
    add(dev.join("hca_type"), id.hca_type.clone());
    add(dev.join("board_id"), id.board_id.clone());
    add(dev.join("device/numa_node"), id.numa_node.to_string());
    let p = &info.port;
    for port in 1..=info.attr.phys_port_cnt {
        let dir = dev.join("ports").join(port.to_string());
        add(dir.join("state"), port_state(p.state));
        add(dir.join("phys_state"), phys_state(p.phys_state));
        add(dir.join("link_layer"), link_layer(p.link_layer).to_string());
        add(dir.join("rate"), rate(p.active_speed, p.active_width));
        add(dir.join("lid"), format!("{:#x}", p.lid));
        add(dir.join("sm_lid"), format!("{:#x}", p.sm_lid));
        add(dir.join("lid_mask_count"), p.lmc.to_string());
        add(dir.join("sm_sl"), p.sm_sl.to_string());
        add(dir.join("cap_mask"), format!("0x{:08x}", p.port_cap_flags));
        for i in 0..p.pkey_tbl_len {
            if let Ok(key) = info.query_pkey(port, u32::from(i)) {
                add(dir.join(format!("pkeys/{i}")), format!("0x{key:04x}"));
            }
        }
        for i in 0..p.gid_tbl_len {
            let gid = info.query_gid(port, i).unwrap_or(Gid::ZERO);
            add(dir.join(format!("gids/{i}")), gid_text(&gid));
            if gid.is_zero() {
                continue; // the kernel has no attributes for an empty entry
            }
            // Every softverbs GID is RoCE v2 (proto::device::GID_TYPE_ROCE_V2).
            add(
                dir.join(format!("gid_attrs/types/{i}")),
                "RoCE v2".to_string(),
            );
            if let Some(Some(ndev)) = place.ndevs.get(i as usize) {
                add(dir.join(format!("gid_attrs/ndevs/{i}")), ndev.clone());
            }
        }
    }
    let uverbs = PathBuf::from("infiniband_verbs").join(format!("uverbs{}", place.uverbs_index));
    add(
        PathBuf::from("infiniband_verbs/abi_version"),
        UVERBS_ABI_VERSION.to_string(),
    );
    add(uverbs.join("ibdev"), info.name.clone());
    add(
        uverbs.join("abi_version"),
        id.uverbs_abi_version.to_string(),
    );
    add(
        uverbs.join("dev"),
        format!("{}:{}", place.dev_numbers.0, place.dev_numbers.1),
    );
    out
}

/// `/sys/class/infiniband_verbs/abi_version`: `IB_USER_VERBS_ABI_VERSION`, the
/// kernel's user-verbs ABI (rdma-core's libibverbs reads it; the drop-in does not).
pub const UVERBS_ABI_VERSION: u32 = 6;

/// `show_node_type`: `"1: CA"`.
fn node_type(t: u8) -> String {
    let name = match t {
        1 => "CA",
        2 => "switch",
        3 => "router",
        4 => "RNIC",
        5 => "usNIC",
        6 => "usNIC UDP",
        _ => "<unknown>",
    };
    format!("{t}: {name}")
}

/// `show_node_guid`: four big-endian 16-bit groups, `%04x:%04x:%04x:%04x`.
fn guid(g: u64) -> String {
    let w = |s: u32| (g >> s) & 0xffff;
    format!("{:04x}:{:04x}:{:04x}:{:04x}", w(48), w(32), w(16), w(0))
}

/// `show_port_gid`: `%pI6`, eight groups of four hex digits, never shortened.
fn gid_text(g: &Gid) -> String {
    let groups: Vec<String> =
        g.0.chunks(2)
            .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
            .collect();
    groups.join(":")
}

/// `state_show`: `"4: ACTIVE"`.
fn port_state(s: PortState) -> String {
    let name = match s {
        PortState::Down => "DOWN",
        PortState::Init => "INIT",
        PortState::Armed => "ARMED",
        PortState::Active => "ACTIVE",
    };
    format!("{}: {name}", s as u8)
}

/// `phys_state_show`: `"5: LinkUp"`.
fn phys_state(s: u8) -> String {
    let name = match s {
        1 => "Sleep",
        2 => "Polling",
        3 => "Disabled",
        4 => "PortConfigurationTraining",
        5 => "LinkUp",
        6 => "LinkErrorRecovery",
        7 => "Phy Test",
        _ => "<unknown>",
    };
    format!("{s}: {name}")
}

/// `link_layer_show`.
fn link_layer(l: u8) -> &'static str {
    match l {
        1 => "InfiniBand",
        2 => "Ethernet",
        _ => "Unknown",
    }
}

/// `rate_show`: the lane speed (in tenths of Gb/s) times the width, e.g.
/// EDR (32) × 4X (2) = `"100 Gb/sec (4X EDR)"`, SDR (1) × 1X (1) =
/// `"2.5 Gb/sec (1X SDR)"`; an unknown speed counts as SDR (named " SDR" since
/// the kernel's rate_show gained NDR).
fn rate(speed: u8, width: u8) -> String {
    let (deci, name) = match speed {
        2 => (50, " DDR"),
        4 => (100, " QDR"),
        8 => (100, " FDR10"),
        16 => (140, " FDR"),
        32 => (250, " EDR"),
        64 => (500, " HDR"),
        128 => (1000, " NDR"),
        _ => (25, " SDR"),
    };
    let lanes = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 0,
    };
    let total = deci * lanes;
    let half = if total % 10 != 0 { ".5" } else { "" };
    format!("{}{half} Gb/sec ({lanes}X{name})", total / 10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use softverbs::{DeviceConfig, Mtu};

    fn view() -> Vec<File> {
        let info = DeviceInfo::new(&DeviceConfig {
            name: "softverbs0".into(),
            addrs: vec!["127.1.2.3".parse().unwrap(), "fe80::1".parse().unwrap()],
            active_mtu: Mtu::Mtu1024,
        });
        let place = Placement {
            uverbs_index: 0,
            ndevs: vec![Some("lo".into()), None],
            dev_numbers: (1, 3),
        };
        files(&info, &place)
    }

    fn get(files: &[File], path: &str) -> Option<String> {
        files
            .iter()
            .find(|(p, _)| p == &PathBuf::from(path))
            .map(|(_, t)| t.clone())
    }

    #[test]
    fn formats_match_the_kernel() {
        let f = view();
        let port = "infiniband/softverbs0/ports/1";
        assert_eq!(
            get(&f, &format!("{port}/rate")).unwrap(),
            "2.5 Gb/sec (1X SDR)\n",
            "a link of unknown speed counts as 1000 Mb/s: 1X SDR"
        );
        assert_eq!(get(&f, &format!("{port}/state")).unwrap(), "4: ACTIVE\n");
        assert_eq!(
            get(&f, &format!("{port}/phys_state")).unwrap(),
            "5: LinkUp\n"
        );
        assert_eq!(
            get(&f, &format!("{port}/link_layer")).unwrap(),
            "Ethernet\n"
        );
        assert_eq!(get(&f, &format!("{port}/lid")).unwrap(), "0x0\n");
        assert_eq!(get(&f, &format!("{port}/pkeys/0")).unwrap(), "0xffff\n");
        assert_eq!(
            get(&f, &format!("{port}/gids/0")).unwrap(),
            "0000:0000:0000:0000:0000:ffff:7f01:0203\n"
        );
        assert_eq!(
            get(&f, &format!("{port}/gids/1")).unwrap(),
            "fe80:0000:0000:0000:0000:0000:0000:0001\n"
        );
        assert_eq!(
            get(&f, &format!("{port}/gid_attrs/types/1")).unwrap(),
            "RoCE v2\n"
        );
        assert_eq!(
            get(&f, &format!("{port}/gid_attrs/ndevs/0")).unwrap(),
            "lo\n"
        );
        assert_eq!(get(&f, &format!("{port}/gid_attrs/ndevs/1")), None);
        assert_eq!(
            get(&f, "infiniband/softverbs0/node_type").unwrap(),
            "1: CA\n"
        );
        assert_eq!(
            get(&f, "infiniband_verbs/uverbs0/ibdev").unwrap(),
            "softverbs0\n"
        );
        assert_eq!(get(&f, "infiniband_verbs/uverbs0/dev").unwrap(), "1:3\n");
        assert_eq!(
            get(&f, "infiniband/softverbs0/device/numa_node").unwrap(),
            "-1\n"
        );
    }

    #[test]
    fn guid_and_rate_arithmetic() {
        assert_eq!(guid(0x0200_1122_3344_5566), "0200:1122:3344:5566");
        assert_eq!(rate(1, 1), "2.5 Gb/sec (1X SDR)");
        assert_eq!(rate(16, 2), "56 Gb/sec (4X FDR)");
        assert_eq!(rate(64, 2), "200 Gb/sec (4X HDR)");
        assert_eq!(rate(32, 2), "100 Gb/sec (4X EDR)");
        assert_eq!(rate(8, 1), "10 Gb/sec (1X FDR10)");
        assert_eq!(rate(32, 16), "50 Gb/sec (2X EDR)");
    }
}
