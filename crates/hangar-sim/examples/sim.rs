//! Replays one seed of the simulation, or sweeps many:
//!
//! ```sh
//! cargo run -p hangar-sim --example sim -- 134          # one seed, with its trace
//! cargo run -p hangar-sim --example sim -- --sweep 10000 # seeds 0..10000
//! ```

// An example reports what it measured on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, n] if flag == "--sweep" => {
            let n: u64 = n.parse().expect("--sweep N");
            let mut total = hangar_sim::SimStats::default();
            let mut failed = Vec::new();
            for seed in 0..n {
                match hangar_sim::run(seed) {
                    Ok(s) => total.add(&s),
                    Err(v) => {
                        println!("seed {}: {}", v.seed, v.what);
                        failed.push(v.seed);
                    }
                }
            }
            println!("{total:#?}");
            println!("{} of {n} seeds failed: {failed:?}", failed.len());
            if !failed.is_empty() {
                std::process::exit(1);
            }
        }
        [seed] => {
            let seed: u64 = seed.parse().expect("a seed");
            match hangar_sim::run(seed) {
                Ok(stats) => println!("seed {seed} keeps every invariant: {stats:#?}"),
                Err(v) => {
                    println!("{v}");
                    std::process::exit(1);
                }
            }
        }
        _ => {
            eprintln!("usage: sim SEED | sim --sweep N");
            std::process::exit(2);
        }
    }
}
