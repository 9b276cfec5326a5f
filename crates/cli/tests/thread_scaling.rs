//! `softverbs perf --threads`: every thread count runs in every round, every
//! WRITE of every QP completes successfully and is counted once, and each
//! row's median lies within its range (the rates themselves are a
//! benchmark's output and gate nothing).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn thread_scaling_counts_every_message_of_every_thread_count() {
    let (iters, rounds) = (100u64, 2u64);
    let mut child = Command::new(env!("CARGO_BIN_EXE_softverbs"))
        .args(["perf", "--threads", "--iters", &iters.to_string()])
        .args(["--rounds", &rounds.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run softverbs perf --threads");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill(); // our own child, by handle
            panic!("softverbs perf --threads did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Vec<f64>> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<f64> = l
                .trim_end_matches('x')
                .split_whitespace()
                .map(|w| w.trim_end_matches('x').parse().ok())
                .collect::<Option<_>>()?;
            (f.len() == 8).then_some(f)
        })
        .collect();
    let threads: Vec<u64> = rows.iter().map(|r| r[0] as u64).collect();
    assert_eq!(threads, [1, 2, 4, 8], "{text}");
    for r in &rows {
        let t = r[0] as u64;
        assert_eq!(r[1] as u64, t * 8, "QPs: {text}");
        assert_eq!(r[2] as u64, t * 8 * iters * rounds, "messages: {text}");
        assert_eq!(r[3] as u64, rounds, "rounds: {text}");
        let (rate, lo, hi) = (r[4], r[5], r[6]);
        assert!(lo > 0.0 && lo <= rate && rate <= hi, "rate: {text}");
    }
}
