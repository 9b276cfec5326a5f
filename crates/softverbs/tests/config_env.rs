//! Fault and capture settings from the environment: a bad value is refused when
//! the device opens, with a message naming the variable and the key; a
//! per-device override replaces the variable. (One test in this binary: it
//! sets process environment variables.)

use softverbs::*;

fn device(name: &str, ip: &str) -> Device {
    let cfg = DeviceConfig {
        name: name.into(),
        addrs: vec![ip.parse().unwrap()],
        active_mtu: Mtu::Mtu1024,
    };
    Device::with_config(cfg)
}

fn config_error(d: &Device) -> String {
    match d.open() {
        Err(e @ Error::Config(_)) => {
            assert_eq!(e.errno(), Errno::EINVAL);
            e.to_string()
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[test]
fn environment_settings_are_checked_when_the_device_opens() {
    std::env::set_var("SOFTVERBS_FAULTS", "loss=0.1,jitter=2ms");
    let msg = config_error(&device("env-a", "127.9.6.1"));
    assert!(
        msg.contains("SOFTVERBS_FAULTS") && msg.contains("\"jitter\"") && msg.contains("env-a"),
        "{msg}"
    );
    std::env::set_var("SOFTVERBS_FAULTS", "loss=2");
    let msg = config_error(&device("env-a", "127.9.6.1"));
    assert!(
        msg.contains("\"loss\"") && msg.contains("between 0 and 1"),
        "{msg}"
    );

    // An override replaces the variable (which is then not even parsed).
    let fine = device("env-b", "127.9.6.2").with_faults("dup=0.5,seed=1".parse().unwrap());
    let ctx = fine.open().unwrap();
    assert_eq!(ctx.counters().io.fault_drops, 0);
    drop(ctx);

    std::env::set_var("SOFTVERBS_FAULTS", "loss=0.2, seed=3");
    std::env::set_var("SOFTVERBS_PCAP", "/tmp/%q.pcap");
    let msg = config_error(&device("env-c", "127.9.6.3"));
    assert!(
        msg.contains("SOFTVERBS_PCAP") && msg.contains("%q"),
        "{msg}"
    );
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::env::set_var("SOFTVERBS_PCAP", dir.join("config-env-%d.pcap"));
    let ctx = device("env-d", "127.9.6.4").open().unwrap();
    let file = dir.join("config-env-env-d.pcap");
    assert!(file.exists(), "%d expanded to the device name");
    drop(ctx);
    assert_eq!(
        std::fs::read(&file).unwrap().len(),
        24,
        "header only: no traffic"
    );
    std::fs::remove_file(file).unwrap();
}
