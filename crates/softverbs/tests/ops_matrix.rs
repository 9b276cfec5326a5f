//! Every operation × transport through the public API (RC: SEND, SEND_WITH_IMM,
//! RDMA_WRITE(+IMM), RDMA_READ, CMP_AND_SWP, FETCH_AND_ADD; UC: SEND(+IMM),
//! WRITE(+IMM); UD: SEND(+IMM)), with zero-length, one-byte, multi-packet and
//! full-MTU messages, up to max_sge elements on both sides and inline data up
//! to max_inline_data: in one process (two devices over UDP; one device) and
//! between two processes. The matrix and its checks are in `matrix/mod.rs`.

mod matrix;
mod pair;
use matrix::*;
use softverbs::*;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn device(name: &str, ip: &str) -> Context {
    let cfg = DeviceConfig {
        name: name.into(),
        addrs: vec![pair::private_addr(ip)],
        active_mtu: Mtu::Mtu1024,
    };
    Device::with_config(cfg).open().unwrap()
}

/// Runs the requester here and the responder on a thread.
fn two_threads(a: Context, b: Context) {
    let (listener, port) = Ctrl::listen();
    let responder = std::thread::spawn(move || End::setup(b, Ctrl::connect(port)).run_responder());
    let mut end = End::setup(a, Ctrl::accept(listener));
    let n = end.run_requester();
    let m = responder.join().expect("the responder failed");
    assert_eq!((n, m), (end.cases().len(), end.cases().len()));
    assert!(n >= 30, "the whole matrix ran: {n} cases");
}

#[test]
fn matrix_between_two_devices_in_one_process() {
    two_threads(device("mx-a", "127.7.1.1"), device("mx-b", "127.7.1.2"));
}

#[test]
fn matrix_within_one_device() {
    let ctx = device("mx-one", "127.7.1.3");
    two_threads(ctx.clone(), ctx);
}

const PEER_ENV: &str = "SOFTVERBS_TEST_MATRIX_PEER";

/// Kills the child (by its PID, through its handle) if the test fails.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// The responder in a second process: this test binary again, running only
/// `matrix_peer_process` with the control port in the environment. Each
/// process opens the default device, which takes a loopback address derived
/// from its PID: real RoCEv2 over UDP between two processes.
#[test]
fn matrix_between_two_processes() {
    let (listener, port) = Ctrl::listen();
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "--exact",
            "matrix_peer_process",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(PEER_ENV, port.to_string())
        .env_remove("SOFTVERBS_ADDR") // the parent may hold that address; the child takes its own
        .spawn()
        .expect("start the peer process");
    let mut child = Reap(child);
    let ctx = devices().unwrap()[0].open().unwrap();
    let mut end = End::setup(ctx, Ctrl::accept(listener));
    let n = end.run_requester();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the peer process did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "the peer process failed: {status}");
    assert!(n >= 30);
}

/// The peer role of `matrix_between_two_processes` (run by it; ignored otherwise).
#[test]
#[ignore = "started by matrix_between_two_processes in a child process"]
fn matrix_peer_process() {
    let port: u16 = std::env::var(PEER_ENV)
        .expect("run by matrix_between_two_processes")
        .parse()
        .unwrap();
    let ctx = devices().unwrap()[0].open().unwrap();
    let n = End::setup(ctx, Ctrl::connect(port)).run_responder();
    assert!(n >= 30);
}
