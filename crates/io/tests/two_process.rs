//! Two processes, each with its own driver on its own 127.x address, exchange
//! datagrams. The child is this test binary run again with `SV_IO_CHILD_BIND`
//! set (the `child_echo` entry point); the parent kills it (by its PID, via
//! `Child::kill`) only if it overstays the deadline.
mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{start, wait_until, Fake, FakeState, DEADLINE};

const ROUNDS: u64 = 500;
const BIND_VAR: &str = "SV_IO_CHILD_BIND";
const READY: &str = "SV_IO_CHILD_ADDR=";

/// Child side: an echo driver that exits after ROUNDS datagrams (or the deadline).
#[test]
fn child_echo() {
    let Ok(bind) = std::env::var(BIND_VAR) else {
        return;
    };
    let d = start(Fake::echo(), &bind);
    println!("{READY}{}", d.local_addr());
    std::io::stdout().flush().unwrap();
    assert!(wait_until(|| d.counters().datagrams_sent >= ROUNDS));
}

/// Reads the child's stdout until it announces its address (bounded wait).
fn child_addr(stdout: std::process::ChildStdout) -> Option<SocketAddr> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // Keep draining to EOF: a closed pipe would fail the child's later prints.
            if let Some(addr) = line.split(READY).nth(1) {
                let _ = tx.send(addr.trim().parse::<SocketAddr>());
            }
        }
    });
    rx.recv_timeout(DEADLINE).ok()?.ok()
}

#[test]
fn two_processes_exchange_datagrams() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_echo", "--nocapture", "--test-threads=1"])
        .env(BIND_VAR, "127.0.0.132:0")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let peer = child_addr(child.stdout.take().unwrap());
    let Some(peer) = peer else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("child did not announce its address");
    };
    let a = start(
        Fake::from(FakeState {
            echo_budget: ROUNDS - 1,
            ..FakeState::default()
        }),
        "127.0.0.131:0",
    );
    let started = Instant::now();
    a.with(|e| e.s().outbox.push_back((peer, vec![0x5a; 64])));
    a.doorbell();
    let done = wait_until(|| a.counters().datagrams_received == ROUNDS);
    let elapsed = started.elapsed();
    let status = wait_child(&mut child);
    assert!(
        done,
        "only {} of {ROUNDS} replies",
        a.counters().datagrams_received
    );
    assert!(status.is_some_and(|s| s.success()), "child: {status:?}");
    a.with(|e| {
        assert!(e
            .s()
            .inbox
            .iter()
            .all(|r| r.from == peer && r.payload == [0x5a; 64]))
    });
    eprintln!("{ROUNDS} round trips across processes in {elapsed:?}");
}

/// Waits for the child to exit; kills it (our own child, by PID) past the deadline.
fn wait_child(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}
