//! Peak memory of one stream-in of a small archive with very many entries
//! (not a test).
//!
//! ```text
//! cargo run --release -p hangar-volumes --example tar_memory -- [--entries 999000] [--distinct]
//! ```
//!
//! Builds a gzip tar of `--entries` directory entries in memory (the same
//! directory over and over, or with `--distinct` that many different
//! directories), streams it into a fresh volume and prints the gzip size and
//! the process's peak RSS (`VmHWM`) before and after the stream-in.

// An example reports what it measured on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::io::{Cursor, Write};

use hangar_volumes::{Compression, DriverKind, Limits, Strategy, VolumeManager};

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM in /proc/self/status")
}

fn archive(entries: u64, distinct: bool) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut b = tar::Builder::new(gz);
    for i in 0..entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        h.set_mode(0o755);
        h.set_mtime(0);
        let name = if distinct {
            format!("d/{i:07}/")
        } else {
            "d/".to_string()
        };
        b.append_data(&mut h, name, std::io::empty())
            .expect("append entry");
    }
    let mut gz = b.into_inner().expect("finish tar");
    gz.flush().expect("flush gzip");
    gz.finish().expect("finish gzip")
}

fn main() {
    let mut entries = 999_000u64;
    let mut distinct = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--entries" => {
                entries = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--entries N")
            }
            "--distinct" => distinct = true,
            other => panic!("unknown argument {other}"),
        }
    }
    let gz = archive(entries, distinct);
    let dir = tempfile::tempdir().expect("temp dir");
    let vm = VolumeManager::open(dir.path(), DriverKind::Naive).expect("open volume store");
    vm.create("v", Strategy::Empty, BTreeMap::new())
        .expect("create volume");
    let before = vm_hwm_kib();
    let started = std::time::Instant::now();
    let report = vm
        .stream_in(
            "v",
            "",
            Cursor::new(&gz),
            Compression::Gzip,
            &Limits::default(),
        )
        .expect("stream in");
    let after = vm_hwm_kib();
    println!(
        "tar_memory: {} {} directory entries in {} bytes of gzip: stream-in {:.1} s, peak RSS {:.1} MiB before, {:.1} MiB after (+{:.1} MiB)",
        report.entries,
        if distinct { "distinct" } else { "identical" },
        gz.len(),
        started.elapsed().as_secs_f64(),
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        (after - before) as f64 / 1024.0,
    );
}
