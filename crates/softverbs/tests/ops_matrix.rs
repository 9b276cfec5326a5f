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
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
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

/// The child process: killed (by its PID, through its handle) if the test
/// fails; its output is collected rather than passed through (so its own test
/// summary line does not count twice) and shown when the test fails.
struct Peer {
    child: Child,
    output: Arc<Mutex<String>>,
}

impl Peer {
    fn spawn(mut cmd: Command) -> Peer {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the peer process");
        let output = Arc::new(Mutex::new(String::new()));
        let pipes: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for mut pipe in pipes {
            let out = output.clone();
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = pipe.read_to_string(&mut s);
                out.lock().unwrap().push_str(&s);
            });
        }
        Peer { child, output }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if std::thread::panicking() {
            std::thread::sleep(Duration::from_millis(50)); // let the readers drain the pipes
            eprintln!(
                "--- the peer process said:\n{}",
                self.output.lock().unwrap()
            );
        }
    }
}

/// The responder in a second process: this test binary again, running only
/// this test, with the control port in the environment (which makes it the
/// peer). Each process opens the default device, which takes a loopback
/// address derived from its PID: real RoCEv2 over UDP between two processes.
#[test]
fn matrix_between_two_processes() {
    if let Ok(port) = std::env::var(PEER_ENV) {
        // The child: the responder role.
        let port: u16 = port.parse().expect("control port");
        let ctx = devices().unwrap()[0].open().unwrap();
        let n = End::setup(ctx, Ctrl::connect(port)).run_responder();
        assert!(n >= 30);
        return;
    }
    let (listener, port) = Ctrl::listen();
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "matrix_between_two_processes",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env(PEER_ENV, port.to_string())
    .env_remove("SOFTVERBS_ADDR"); // the parent may hold that address; the child takes its own
    let mut peer = Peer::spawn(cmd);
    let ctx = devices().unwrap()[0].open().unwrap();
    let mut end = End::setup(ctx, Ctrl::accept(listener));
    let n = end.run_requester();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = peer.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the peer process did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "the peer process failed: {status}");
    let said = peer.output.lock().unwrap().clone();
    assert!(said.contains("1 passed"), "the peer ran its role: {said}");
    assert!(n >= 30);
}
