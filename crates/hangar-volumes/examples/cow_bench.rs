//! Copy-on-write and stream-out benchmark (not a test).
//!
//! ```text
//! cargo run --release -p hangar-volumes --example cow_bench -- --size-mib 1024 [--dir /var/tmp]
//! ```
//!
//! Builds a parent volume of `--size-mib` MiB of incompressible data (half
//! one big file, half many files of 4-256 KiB in 64 directories, all really
//! written, nothing sparse), then times the creation of a copy-on-write child
//! with the naive driver and (as root) the overlay driver, and the stream-out
//! throughput of the parent and of the child. The page cache is warm (the
//! data was just written); pass `--drop-caches` (root) to drop it before each
//! timed step.

// An example reports what it measured on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hangar_volumes::{probe_overlay, Compression, DriverKind, Strategy, VolumeManager};

struct Args {
    size_mib: u64,
    dir: Option<PathBuf>,
    drop_caches: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        size_mib: 1024,
        dir: None,
        drop_caches: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--size-mib" => {
                args.size_mib = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--size-mib needs a number")
            }
            "--dir" => args.dir = Some(PathBuf::from(it.next().expect("--dir needs a path"))),
            "--drop-caches" => args.drop_caches = true,
            "-h" | "--help" => {
                println!("usage: cow_bench [--size-mib N] [--dir PATH] [--drop-caches]");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other:?} (try --help)"),
        }
    }
    assert!(args.size_mib >= 2, "--size-mib must be at least 2");
    args
}

/// xorshift64*: fast, incompressible enough for gzip.
struct Noise(u64);

impl Noise {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

struct Shape {
    files: u64,
    big: u64,
}

fn write_file(path: &Path, size: u64, noise: &mut Noise, buf: &mut [u8]) -> io::Result<()> {
    let mut f = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        noise.fill(&mut buf[..n]);
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    f.flush()
}

fn populate(dir: &Path, total: u64) -> io::Result<Shape> {
    let mut noise = Noise(0x9E37_79B9_7F4A_7C15);
    let mut buf = vec![0u8; 1 << 20];
    let big = total / 2;
    write_file(&dir.join("big.bin"), big, &mut noise, &mut buf)?;
    let sizes = [4u64 << 10, 16 << 10, 64 << 10, 256 << 10];
    let mut left = total - big;
    let mut files = 0u64;
    while left > 0 {
        let sub = dir.join(format!("d{:02}", files % 64));
        if files < 64 {
            fs::create_dir(&sub)?;
        }
        let size = sizes[(files % 4) as usize].min(left);
        write_file(
            &sub.join(format!("f{files:06}")),
            size,
            &mut noise,
            &mut buf,
        )?;
        left -= size;
        files += 1;
    }
    Ok(Shape { files, big })
}

fn drop_caches(enabled: bool) {
    if enabled {
        nix::unistd::sync();
        fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches (needs root)");
    }
}

struct Sink(u64);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn mbps(bytes: u64, d: Duration) -> String {
    format!("{:.0} MB/s", bytes as f64 / 1e6 / d.as_secs_f64())
}

fn bench_driver(
    base: &Path,
    driver: DriverKind,
    args: &Args,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = base.join(format!("{driver}-root"));
    let vm = VolumeManager::open(&root, driver)?;
    let total = args.size_mib << 20;
    let parent = vm.create("parent", Strategy::Empty, BTreeMap::new())?;
    let t = Instant::now();
    let shape = populate(&parent.path, total)?;
    nix::unistd::sync();
    let fill = t.elapsed();
    println!(
        "[{driver}] parent: {} MiB = 1 file of {} MiB + {} files in 64 dirs, written+synced in {:.1} s ({})",
        args.size_mib,
        shape.big >> 20,
        shape.files,
        fill.as_secs_f64(),
        mbps(total, fill)
    );

    drop_caches(args.drop_caches);
    let t = Instant::now();
    let child = vm.create(
        "child",
        Strategy::CopyOnWrite {
            parent: "parent".into(),
        },
        BTreeMap::new(),
    )?;
    let cow = t.elapsed();
    println!("[{driver}] copy-on-write child creation: {}", ms(cow));
    let t = Instant::now();
    vm.create(
        "grandchild",
        Strategy::CopyOnWrite {
            parent: "child".into(),
        },
        BTreeMap::new(),
    )?;
    println!(
        "[{driver}] copy-on-write grandchild creation: {}",
        ms(t.elapsed())
    );
    fs::write(child.path.join("d00/f000000"), b"changed in child")?;

    for (what, handle) in [("parent", "parent"), ("child", "child")] {
        for compression in [Compression::None, Compression::Gzip] {
            drop_caches(args.drop_caches);
            let mut sink = Sink(0);
            let t = Instant::now();
            let n = vm.stream_out(handle, "", &mut sink, compression)?;
            let d = t.elapsed();
            assert_eq!(n, sink.0);
            println!(
                "[{driver}] stream-out {what} ({compression:?}): {} archive bytes in {:.2} s = {} out, {} of volume data",
                n,
                d.as_secs_f64(),
                mbps(n, d),
                mbps(total, d)
            );
        }
    }

    let t = Instant::now();
    vm.destroy("grandchild")?;
    vm.destroy("child")?;
    println!("[{driver}] destroy child + grandchild: {}", ms(t.elapsed()));
    vm.destroy("parent")?;
    drop(vm);
    fs::remove_dir_all(&root)?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args();
    let tmp;
    let base = match &args.dir {
        Some(d) => {
            tmp = tempfile::tempdir_in(d)?;
            tmp.path().to_path_buf()
        }
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    println!(
        "cow_bench: --size-mib {} in {} (page cache {})",
        args.size_mib,
        base.display(),
        if args.drop_caches {
            "dropped before each timed step"
        } else {
            "warm"
        }
    );
    bench_driver(&base, DriverKind::Naive, &args)?;
    match probe_overlay(&base) {
        Ok(()) => bench_driver(&base, DriverKind::Overlay, &args)?,
        Err(reason) => println!("[overlay] skipped: {reason}"),
    }
    Ok(())
}
