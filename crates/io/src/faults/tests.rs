use super::*;

fn cfg(s: &str) -> FaultConfig {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn err(s: &str) -> FaultConfigError {
    s.parse::<FaultConfig>().expect_err(s)
}

#[test]
fn parses_every_key() {
    let c = cfg("loss=0.05,dup=0.01,reorder=2%,delay=200us,corrupt=0.001,seed=7,dir=both");
    assert_eq!(c.loss, 0.05);
    assert_eq!(c.dup, 0.01);
    assert!((c.reorder - 0.02).abs() < 1e-12);
    assert_eq!(c.delay, Duration::from_micros(200));
    assert_eq!(c.corrupt, 0.001);
    assert_eq!(c.seed, 7);
    assert_eq!(c.dir, FaultDirection::Both);
    assert!(c.is_active());
    assert_eq!(cfg(" loss = 1 , dir=rx ").dir, FaultDirection::Rx);
    assert_eq!(cfg("delay=1.5ms").delay, Duration::from_micros(1500));
    assert_eq!(cfg("delay=3s").delay, Duration::from_secs(3));
    assert_eq!(cfg("delay=10ns").delay, Duration::from_nanos(10));
    assert_eq!(cfg("delay=0").delay, Duration::ZERO);
}

#[test]
fn empty_and_off_mean_no_faults() {
    for s in ["", "  ", "off", "none"] {
        assert_eq!(cfg(s), FaultConfig::default());
    }
    assert!(!FaultConfig::default().is_active());
    assert!(!cfg("seed=3,dir=both").is_active());
    assert_eq!(FaultConfig::default().dir, FaultDirection::Tx);
}

#[test]
fn errors_name_the_key() {
    let cases = [
        ("los=0.1", "los", "unknown key"),
        ("loss=0.1,jitter=1ms", "jitter", "unknown key"),
        ("loss=1.5", "loss", "between 0 and 1"),
        ("loss=-0.1", "loss", "between 0 and 1"),
        ("dup=lots", "dup", "not a probability"),
        ("reorder=150%", "reorder", "between 0 and 1"),
        ("corrupt=", "corrupt", "not a probability"),
        ("delay=200", "delay", "no unit"),
        ("delay=200m", "delay", "unknown unit"),
        ("delay=xms", "delay", "not a duration"),
        ("delay=11s", "delay", "between 0 and 10 s"),
        ("seed=-1", "seed", "unsigned integer"),
        ("dir=up", "dir", "tx, rx or both"),
        ("loss", "loss", "key=value"),
        ("loss=0.1,,dup=0.1", "", "key=value"),
        ("loss=0.1,loss=0.2", "loss", "twice"),
    ];
    for (text, key, words) in cases {
        let e = err(text);
        assert_eq!(e.key, key, "{text}");
        let shown = e.to_string();
        assert!(
            shown.contains("SOFTVERBS_FAULTS") && shown.contains(words),
            "{text}: {shown}"
        );
    }
}

#[test]
fn errors_are_typed_and_keep_the_parse_error() {
    use FaultValueError as V;
    assert_eq!(err("los=0.1").reason, V::UnknownKey);
    assert_eq!(err("loss").reason, V::NotKeyValue);
    assert_eq!(err("dup=0,dup=0").reason, V::Repeated);
    assert_eq!(
        err("reorder=150%").reason,
        V::ProbabilityRange {
            value: "150%".into()
        }
    );
    assert_eq!(
        err("delay=200m").reason,
        V::UnknownUnit {
            value: "200m".into(),
            unit: "m".into()
        }
    );
    assert_eq!(
        err("delay=ms").reason,
        V::NotDuration {
            value: "ms".into(),
            source: None
        }
    );
    assert_eq!(err("dir=up").reason, V::NotDirection { value: "up".into() });
    // A value that does not parse keeps the parser's error as its source.
    let e = err("seed=-1");
    assert!(
        matches!(&e.reason, V::NotUnsigned { value, .. } if value == "-1"),
        "{e:?}"
    );
    let chain = std::error::Error::source(&e).and_then(std::error::Error::source);
    assert!(
        chain.is_some(),
        "seed's ParseIntError is the reason's source"
    );
    let e = err("delay=1.2.3ms");
    assert!(
        matches!(
            &e.reason,
            V::NotDuration {
                source: Some(_),
                ..
            }
        ),
        "{e:?}"
    );
}

/// Counts of each fault over `n` decisions.
fn tally(model: &mut FaultModel, n: usize) -> [usize; 4] {
    let mut t = [0; 4];
    for _ in 0..n {
        let d = model.decide(100);
        t[0] += usize::from(d.drop);
        t[1] += usize::from(d.corrupt_bit.is_some());
        t[2] += usize::from(d.duplicate);
        t[3] += usize::from(d.reorder_after.is_some());
    }
    t
}

#[test]
fn rates_within_statistical_bounds() {
    let c = cfg("loss=0.05,corrupt=0.01,dup=0.02,reorder=0.1");
    let n = 200_000usize;
    for seed in [0, 7, 12345] {
        let mut m = FaultConfig { seed, ..c }.tx_model();
        let t = tally(&mut m, n);
        // Non-lost datagrams are the population of the other faults.
        let kept = (n - t[0]) as f64;
        let checks = [
            (t[0], n as f64, c.loss),
            (t[1], kept, c.corrupt),
            (t[2], kept, c.dup),
            (t[3], kept, c.reorder),
        ];
        for (i, (count, population, p)) in checks.into_iter().enumerate() {
            let mean = population * p;
            let sd = (population * p * (1.0 - p)).sqrt();
            assert!(
                (count as f64 - mean).abs() < 5.0 * sd,
                "seed {seed} fault {i}: {count} vs {mean}±{sd}"
            );
        }
    }
}

#[test]
fn zero_and_one_are_exact() {
    let mut none = FaultConfig::default().tx_model();
    assert_eq!(tally(&mut none, 10_000), [0; 4]);
    let mut all = cfg("loss=1").tx_model();
    assert_eq!(tally(&mut all, 10_000), [10_000, 0, 0, 0]);
    let mut every = cfg("dup=100%,reorder=1,corrupt=1").tx_model();
    assert_eq!(tally(&mut every, 10_000), [0, 10_000, 10_000, 10_000]);
}

#[test]
fn same_seed_same_decisions_and_directions_differ() {
    let c = cfg("loss=0.1,dup=0.1,reorder=0.1,corrupt=0.1,seed=9");
    let run = |mut m: FaultModel| {
        (0..5000)
            .map(|i| m.decide(64 + i % 1000))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(c.tx_model()), run(c.tx_model()));
    assert_ne!(run(c.tx_model()), run(c.rx_model()));
    assert_ne!(
        run(c.tx_model()),
        run(FaultConfig { seed: 10, ..c }.tx_model())
    );
    // Decision n does not depend on the lengths of the datagrams before it
    // (except for which bit is flipped).
    let mut a = c.tx_model();
    let mut b = c.tx_model();
    for i in 0..5000 {
        let (x, y) = (a.decide(100), b.decide(1000 + i));
        assert_eq!(
            (x.drop, x.duplicate, x.reorder_after),
            (y.drop, y.duplicate, y.reorder_after)
        );
        assert_eq!(x.corrupt_bit.is_some(), y.corrupt_bit.is_some());
    }
}

#[test]
fn corruption_avoids_the_icrc_masked_byte_and_stays_in_bounds() {
    let mut m = cfg("corrupt=1,seed=3").tx_model();
    let mut hit = [false; 16];
    for _ in 0..20_000 {
        let bit = m.decide(16).corrupt_bit.unwrap();
        assert!(bit < 16 * 8);
        assert_ne!(bit / 8, wire::icrc::BTH_MASKED_BYTE);
        hit[bit / 8] = true;
    }
    assert_eq!(hit.iter().filter(|&&h| h).count(), 15);
    assert_eq!(m.decide(0).corrupt_bit, None);
    assert!(m.decide(3).corrupt_bit.unwrap() < 24);
    let mut bytes = [0u8; 4];
    flip_bit(&mut bytes, 9);
    assert_eq!(bytes, [0, 2, 0, 0]);
    flip_bit(&mut bytes, 1000); // out of range: nothing
    assert_eq!(bytes, [0, 2, 0, 0]);
}
