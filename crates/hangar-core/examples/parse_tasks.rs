//! Reads task files as `hangar execute` does and prints each refusal, then
//! how many were read and refused, and how many of those read could not run
//! without an image from the step (no `run.path` and no image to take a
//! command from):
//! `cargo run -p hangar-core --example parse_tasks -- tasks/*.yml`.

#![allow(clippy::print_stdout)]

fn main() {
    let (mut read, mut refused, mut need_command) = (0, 0, 0);
    for path in std::env::args().skip(1) {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                println!("{path}: {e}");
                refused += 1;
                continue;
            }
        };
        match hangar_core::task::parse_task_config(&text) {
            Ok(config) => {
                read += 1;
                if config.check_runnable(false).is_err() {
                    need_command += 1;
                }
            }
            Err(e) => {
                refused += 1;
                println!("{path}: {e}");
            }
        }
    }
    println!(
        "read {read}, refused {refused}; {need_command} of those read have no run.path and no image"
    );
}
