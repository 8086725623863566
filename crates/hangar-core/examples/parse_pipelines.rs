//! Reads pipeline files as `hangar set-pipeline` does and prints every
//! error and warning, then how many were read and refused:
//! `cargo run -p hangar-core --example parse_pipelines -- pipelines/*.yml`.
//! Files holding `((vars))` are read as they are: the reader accepts vars
//! where Concourse takes free-form values.

#![allow(clippy::print_stdout)]

fn main() {
    let (mut read, mut refused) = (0, 0);
    for path in std::env::args().skip(1) {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                println!("{path}: {e}");
                refused += 1;
                continue;
            }
        };
        match hangar_core::pipeline::parse_pipeline(&text) {
            Ok(v) => {
                read += 1;
                for w in &v.warnings {
                    println!("{path}: warning ({}): {}", w.kind, w.message);
                }
            }
            Err(e) => {
                refused += 1;
                println!("{path}: {e}");
            }
        }
    }
    println!("read {read}, refused {refused}");
}
