//! Runs simulation scenarios: `--seed S --scenario NAME` replays one run;
//! `--seeds N` runs N seeds (from `--seed`, default 1) of every scenario (or of
//! `--scenario`); `--list` names the scenarios.

fn main() {
    let mut seed: Option<u64> = None;
    let mut seeds: u64 = 1;
    let mut scenario: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--seed" => seed = Some(value().parse().unwrap_or_else(|_| usage("bad --seed"))),
            "--seeds" => seeds = value().parse().unwrap_or_else(|_| usage("bad --seeds")),
            "--scenario" => scenario = Some(value()),
            "--list" => {
                println!("{}", sim::all_names().join("\n"));
                return;
            }
            _ => usage(&format!("unknown argument {a}")),
        }
    }
    let names: Vec<String> = match &scenario {
        Some(s) if !sim::known(s) => usage(&format!("unknown scenario {s}")),
        Some(s) => vec![s.clone()],
        None => sim::all_names(),
    };
    let first = seed.unwrap_or(1);
    for name in names {
        for s in first..first + seeds {
            let sum = sim::run(&name, s);
            println!("{}", sim::summary_line(&name, s, &sum));
        }
    }
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "sim: {msg}\nusage: sim [--seed S] [--seeds N] [--scenario NAME] [--list]\nscenarios: {}",
        sim::all_names().join(", ")
    );
    std::process::exit(2);
}
