//! Clean shutdown leaks no file descriptor (own test binary: it counts
//! /proc/self/fd, which parallel tests in the same process would disturb).
mod common;

use std::net::UdpSocket;

use common::{start, wait_until, Fake, DEADLINE};
use sv_io::Notification;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Start a driver with a channel, move traffic and a notification, drop everything.
fn cycle() {
    let d = start(Fake::echo(), "127.0.0.111:0");
    let ch = d.create_completion_channel().unwrap();
    let client = UdpSocket::bind("127.0.0.112:0").unwrap();
    client.set_read_timeout(Some(DEADLINE)).unwrap();
    client.send_to(b"hello", d.local_addr()).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(client.recv_from(&mut buf).unwrap().0, 5);
    d.with(|e| {
        e.s().notes.push_back(Notification::Completion {
            channel: ch.id(),
            cq: 9,
        })
    });
    d.doorbell();
    assert!(wait_until(|| ch.pending() == 1));
    drop(ch);
    d.shutdown();
}

#[test]
fn start_and_shutdown_leak_no_fd() {
    cycle(); // warm-up: anything std opens once per process
    let before = open_fds();
    for _ in 0..5 {
        cycle();
    }
    assert_eq!(open_fds(), before);
}
