//! `hangar bench artifacts`: an artifact made by a task on one worker and
//! read by a task on another, against what the same bytes cost moved by
//! plain tools between the same directories on the same disk, in one run:
//!
//! - one large file (incompressible): hangar's copy against `curl`
//!   downloading the file from a plain HTTP server on loopback into the
//!   target directory (target: at least 0.8× its speed);
//! - a tree of many small files: hangar's copy against
//!   `tar -C src -cf - . | tar -C dst -xf -` (target: at most 1.3× its
//!   time).
//!
//! hangar's figure is the time, in the build log as a client sees it, from
//! the reading task's `copying input … from worker src to dst` line to its
//! `running on worker dst` line: the pull of the volume (the target worker
//! streams it straight from the source) and the start of a process, a few
//! milliseconds. Web, both workers and the floors share the machine's
//! disk and page cache, warm for both (the bench cannot drop caches); the
//! contenders take turns, each after `sync` has written back what came
//! before, so neither pays for the other's dirty pages; hangar's turn
//! also waits until web has collected the previous build's volumes, so
//! no worker is deleting thousands of files while it copies.
//!
//! Then what `hangar execute` adds to a build to upload the same tree or
//! file as an input (`-i`) and to download it as an output (`-o`), against
//! the same floors (see [`crate::artifacts_cli`]): the bytes pass through
//! web there, which is the only host the CLI may reach.
//!
//! The workers run process tasks without the sandbox
//! (`--no-process-sandbox`): the task that makes the artifact copies it
//! from the bench's scratch dir, which the sandbox would not show it, and
//! the figure is about bytes, not tasks.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hangar_api::builds::{BuildEventKind, CreateBuild};
use hangar_api::{OwnerKind, VolumeState};
use hangar_client::Client;
use hangar_volumes::DriverKind;
use serde::Serialize;
use tokio::io::AsyncReadExt;

use crate::artifacts_cli::{Cli, Transfer};
use crate::procs::{self, WebSpec, WorkerSpec};
use crate::stats::Summary;

#[derive(Debug, Clone)]
pub struct ArtifactsConfig {
    pub bin: PathBuf,
    /// Size of the large file, MiB.
    pub large_mib: u64,
    /// Files in the tree of small files (1 KiB each).
    pub small_files: usize,
    /// Timed runs of each contender.
    pub runs: usize,
    pub dir: Option<PathBuf>,
    /// The workers' volume driver; `None`: overlay where it works here (as
    /// a worker's `auto`), else naive.
    pub volume_driver: Option<DriverKind>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Contest {
    pub what: String,
    pub bytes: u64,
    pub hangar_ms: Summary,
    pub floor: String,
    pub floor_ms: Summary,
    /// Every round, in the order run.
    pub hangar_runs: Vec<f64>,
    pub floor_runs: Vec<f64>,
    /// hangar's speed as a share of the floor's (p50 against p50).
    pub speed_ratio: f64,
    /// The same of each contender's best round: a disk's throttling and
    /// writeback only ever add time, to either contender's rounds.
    pub best_speed_ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ArtifactsReport {
    /// The workers' volume driver: on naive a task's copy of its input is
    /// a copy of every file, on overlay a mount.
    pub volume_driver: String,
    pub large: Contest,
    pub small: Contest,
    pub upload_large: Contest,
    pub upload_small: Contest,
    pub download_large: Contest,
    pub download_small: Contest,
    /// The same four as the CLI times the transfer itself, in order.
    pub cli_timed: Vec<Contest>,
}

impl Contest {
    fn line(&self, target: &str) -> String {
        format!(
            "{}: hangar p50 {:.0} ms ({:.0} MB/s), {} p50 {:.0} ms ({:.0} MB/s); hangar at {:.2}× the floor's speed ({target}); best rounds {:.0} / {:.0} ms, {:.2}×",
            self.what,
            p50(&self.hangar_ms),
            mb_per_s(self.bytes, p50(&self.hangar_ms)),
            self.floor,
            p50(&self.floor_ms),
            mb_per_s(self.bytes, p50(&self.floor_ms)),
            self.speed_ratio,
            best(&self.hangar_runs),
            best(&self.floor_runs),
            self.best_speed_ratio,
        )
    }
}

impl ArtifactsReport {
    pub fn lines(&self) -> String {
        let (large, small) = (
            "target ≥ 0.80×",
            "target ≥ 0.77×, i.e. time ≤ 1.3× tar | tar",
        );
        let head = format!("workers' volume driver: {}\n", self.volume_driver);
        head + &[
            (&self.large, large),
            (&self.small, small),
            (&self.upload_large, large),
            (&self.upload_small, small),
            (&self.download_large, large),
            (&self.download_small, small),
        ]
        .into_iter()
        .chain(self.cli_timed.iter().zip([large, small, large, small]))
        .map(|(c, target)| c.line(target) + "\n")
        .collect::<String>()
    }
}

fn p50(s: &Summary) -> f64 {
    s.p50.unwrap_or(0.0)
}

/// The fastest round (0 without rounds).
fn best(runs: &[f64]) -> f64 {
    runs.iter()
        .copied()
        .fold(None, |min: Option<f64>, r| {
            Some(min.map_or(r, |m| m.min(r)))
        })
        .unwrap_or(0.0)
}

fn mb_per_s(bytes: u64, ms: f64) -> f64 {
    if ms <= 0.0 {
        return 0.0;
    }
    bytes as f64 / 1e6 / (ms / 1000.0)
}

pub async fn run(cfg: ArtifactsConfig) -> anyhow::Result<ArtifactsReport> {
    if cfg.runs == 0 || cfg.large_mib == 0 || cfg.small_files == 0 {
        bail!("--runs, --large-mib and --small-files must be at least 1");
    }
    let tmp;
    let dir = match &cfg.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp = tempfile::Builder::new().prefix("hangar-bench-").tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let data = dir.join("data");
    let large = data.join("large");
    let small = data.join("small");
    let large_bytes = write_large(&large, cfg.large_mib)?;
    let small_bytes = write_small(&small, cfg.small_files)?;
    eprintln!(
        "bench artifacts: {} MiB file and {} small files written",
        cfg.large_mib, cfg.small_files
    );

    let driver = cfg
        .volume_driver
        .unwrap_or_else(|| hangar_volumes::best_driver(&dir));
    let mut spec = WebSpec::new(&cfg.bin, &dir)?;
    spec.extra_args.push("--gc-interval=200ms".into());
    let mut web = spec.start().await?;
    let mut workers = Vec::new();
    for name in ["src", "dst"] {
        let mut w = WorkerSpec::new(&cfg.bin, &dir, name, &spec.url());
        w.tags = vec![name.to_string()];
        // Volumes are deleted through the worker's reports: often, so
        // the wait for the last build's to go is short.
        w.report_interval = Duration::from_millis(500);
        w.extra_args.push("--no-process-sandbox".into());
        w.volume_driver = match driver {
            DriverKind::Overlay => "overlay",
            DriverKind::Naive => "naive",
        };
        workers.push(w.start()?);
    }
    let client = procs::admin_client(&spec.url(), Duration::from_secs(600))?;
    let result = async {
        for name in ["src", "dst"] {
            procs::wait_for_state(&client, name, "running", Duration::from_secs(60)).await?;
        }
        let server = FileServer::start(large.join("large.bin")).await?;
        let (mut large_hangar, mut large_floor) = (Vec::new(), Vec::new());
        let (mut small_hangar, mut small_floor) = (Vec::new(), Vec::new());
        // Turn about, each after the disk has written back what came
        // before: neither contender pays for the other's dirty pages.
        for i in 0..cfg.runs {
            collected(&client).await?;
            settle().await?;
            large_hangar.push(hangar_once(&client, &large, "large", i).await?);
            settle().await?;
            large_floor.push(curl_once(&dir, &server.url, i).await?);
        }
        for i in 0..cfg.runs {
            collected(&client).await?;
            settle().await?;
            small_hangar.push(hangar_once(&client, &small, "small", i).await?);
            settle().await?;
            small_floor.push(tar_once(&dir, &small, i).await?);
        }
        let cli = Cli {
            bin: &cfg.bin,
            url: &spec.url(),
            dir: &dir,
            tag: "dst",
        };
        let (mut through_cli, mut cli_timed) = (Vec::new(), Vec::new());
        for (transfer, data, label) in [
            (Transfer::Upload, &large, "large"),
            (Transfer::Upload, &small, "small"),
            (Transfer::Download, &large, "large"),
            (Transfer::Download, &small, "small"),
        ] {
            let (mut runs, mut timed) = (Vec::new(), Vec::new());
            for i in 0..cfg.runs {
                collected(&client).await?;
                settle().await?;
                let (ms, said) = cli.transfer_ms(transfer, data, label, i).await?;
                runs.push(ms);
                timed.extend(said);
            }
            through_cli.push(runs);
            cli_timed.push(timed);
        }
        let [upload_large, upload_small, download_large, download_small] =
            <[Vec<f64>; 4]>::try_from(through_cli).expect("four contests");
        let large_what = format!("one {} MiB file", cfg.large_mib);
        let small_what = format!("{} files of 1 KiB", cfg.small_files);
        let cli_timed = cli_timed
            .into_iter()
            .zip([
                ("execute -i", &large_what, large_bytes, "curl", &large_floor),
                (
                    "execute -i",
                    &small_what,
                    small_bytes,
                    "tar | tar",
                    &small_floor,
                ),
                ("execute -o", &large_what, large_bytes, "curl", &large_floor),
                (
                    "execute -o",
                    &small_what,
                    small_bytes,
                    "tar | tar",
                    &small_floor,
                ),
            ])
            .map(|(timed, (verb, what, bytes, floor, floor_runs))| {
                contest(
                    format!("{verb}, {what}, the transfer as the CLI times it"),
                    bytes,
                    timed,
                    floor,
                    floor_runs.clone(),
                )
            })
            .collect();
        Ok::<_, anyhow::Error>(ArtifactsReport {
            volume_driver: driver.to_string(),
            cli_timed,
            upload_large: contest(
                format!("execute -i, {large_what}"),
                large_bytes,
                upload_large,
                "curl",
                large_floor.clone(),
            ),
            upload_small: contest(
                format!("execute -i, {small_what}"),
                small_bytes,
                upload_small,
                "tar | tar",
                small_floor.clone(),
            ),
            download_large: contest(
                format!("execute -o, {large_what}"),
                large_bytes,
                download_large,
                "curl",
                large_floor.clone(),
            ),
            download_small: contest(
                format!("execute -o, {small_what}"),
                small_bytes,
                download_small,
                "tar | tar",
                small_floor.clone(),
            ),
            large: contest(large_what, large_bytes, large_hangar, "curl", large_floor),
            small: contest(
                small_what,
                small_bytes,
                small_hangar,
                "tar | tar",
                small_floor,
            ),
        })
    }
    .await;
    for w in &mut workers {
        w.stop(Duration::from_secs(10)).await;
    }
    web.stop(Duration::from_secs(10)).await;
    unmount_under(&dir);
    result
}

/// The overlay mounts the workers leave (a worker keeps its volumes
/// mounted across restarts), deepest first: else the scratch dir could not
/// be removed.
fn unmount_under(dir: &Path) {
    use hangar_volumes::os::{Os, RealOs};
    let mounts = RealOs.mounts_under(dir).unwrap_or_default();
    for mount in mounts {
        if let Err(e) = RealOs.unmount(&mount) {
            eprintln!("bench artifacts: cannot unmount {}: {e}", mount.display());
        }
    }
}

fn contest(
    what: String,
    bytes: u64,
    hangar: Vec<f64>,
    floor: &str,
    floor_runs: Vec<f64>,
) -> Contest {
    let hangar_ms = Summary::of(&hangar);
    let floor_ms = Summary::of(&floor_runs);
    let ratio = |floor: f64, hangar: f64| if hangar > 0.0 { floor / hangar } else { 0.0 };
    Contest {
        what,
        bytes,
        speed_ratio: ratio(p50(&floor_ms), p50(&hangar_ms)),
        best_speed_ratio: ratio(best(&floor_runs), best(&hangar)),
        hangar_ms,
        floor: floor.to_string(),
        floor_ms,
        hangar_runs: hangar,
        floor_runs,
    }
}

/// A file of pseudo-random (incompressible) bytes.
fn write_large(dir: &Path, mib: u64) -> anyhow::Result<u64> {
    std::fs::create_dir_all(dir)?;
    let mut file = std::io::BufWriter::new(std::fs::File::create(dir.join("large.bin"))?);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut block = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for chunk in block.chunks_mut(8) {
            // xorshift64*
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let v = state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        file.write_all(&block)?;
    }
    file.flush()?;
    Ok(mib << 20)
}

/// `n` files of 1 KiB in directories of 100.
fn write_small(dir: &Path, n: usize) -> anyhow::Result<u64> {
    for i in 0..n {
        let sub = dir.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&sub)?;
        }
        let body: Vec<u8> = (0..1024u32).map(|b| (b as usize * 31 + i) as u8).collect();
        std::fs::write(sub.join(format!("f{i}.txt")), body)?;
    }
    Ok(n as u64 * 1024)
}

/// The artifact made on `src` from `data` (and written back to disk), read
/// on `dst`: the copy's time, ms.
async fn hangar_once(client: &Client, data: &Path, label: &str, i: usize) -> anyhow::Result<f64> {
    let copy = "cp -a \"$DATA/.\" out/ && sync";
    let plan = serde_json::json!([
        {"task": "make", "tags": ["src"], "config": {
            "platform": "linux",
            "params": {"DATA": data.display().to_string()},
            "outputs": [{"name": "out"}],
            "run": {"path": "sh", "args": ["-c", copy]},
        }},
        {"task": "read", "tags": ["dst"], "config": {
            "platform": "linux",
            "inputs": [{"name": "out"}],
            "run": {"path": "true"},
        }},
    ]);
    let build = client
        .create_build(&CreateBuild {
            resource_types: serde_json::Value::Null,
            name: Some(format!("artifacts-{label}-{i}")),
            plan,
            artifacts: BTreeMap::new(),
            team: None,
        })
        .await?;
    let ms = copy_time(client, build.id).await?;
    eprintln!("bench artifacts: {label}: hangar run {}: {ms:.0} ms", i + 1);
    Ok(ms)
}

/// Waits until web has collected the scratch volumes of the builds before
/// and the workers have deleted every volume being destroyed (artifacts
/// stay, for `-o`, and cost nothing while they do): a copy that shares the CPU and the
/// disk with the deletion of the last one measures both.
async fn collected(client: &Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = client
            .volumes(None)
            .await?
            .iter()
            .filter(|v| v.owner_kind == OwnerKind::Container || v.state == VolumeState::Destroying)
            .count();
        if left == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{left} volumes of earlier builds still not collected after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the disk has written back every dirty page (`sync`).
async fn settle() -> anyhow::Result<()> {
    let status = tokio::process::Command::new("sync")
        .status()
        .await
        .context("run sync")?;
    if !status.success() {
        bail!("sync failed: {status}");
    }
    Ok(())
}

/// From `copying input` to `running on worker dst` in the build's log.
async fn copy_time(client: &Client, id: i64) -> anyhow::Result<f64> {
    let mut after = 0;
    let (mut copying, mut running) = (None, None);
    loop {
        let page = client.build_events(id, after, 10_000).await?;
        for e in &page.events {
            after = after.max(e.id);
            if e.payload.starts_with("copying input") {
                copying = Some(e.at);
            }
            if copying.is_some()
                && running.is_none()
                && e.kind == BuildEventKind::Step
                && e.payload.starts_with("running on worker dst")
            {
                running = Some(e.at);
            }
        }
        if page.status.is_final() && page.events.is_empty() {
            if page.status.to_string() != "succeeded" {
                bail!("build {id} ended {}", page.status);
            }
            let (Some(from), Some(to)) = (copying, running) else {
                bail!("build {id}: no copy between the workers in its log");
            };
            return Ok((to - from) as f64);
        }
    }
}

/// A plain HTTP server of one file on loopback, for `curl`.
struct FileServer {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FileServer {
    async fn start(file: PathBuf) -> anyhow::Result<FileServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/large.bin", listener.local_addr()?);
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let file = file.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = conn.read(&mut request).await;
                    let Ok(conn) = conn.into_std() else {
                        return;
                    };
                    // The body as a file server sends it: std's copy from a
                    // file to a socket is the kernel's sendfile, no copy
                    // through this process (tokio's copy would move 8 KiB
                    // reads through its blocking pool and slow the floor).
                    let _ = tokio::task::spawn_blocking(move || serve_file(conn, &file)).await;
                });
            }
        });
        Ok(FileServer { url, task })
    }
}

fn serve_file(mut conn: std::net::TcpStream, file: &Path) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    let mut f = std::fs::File::open(file)?;
    let len = f.metadata()?.len();
    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n");
    conn.write_all(head.as_bytes())?;
    std::io::copy(&mut f, &mut conn)?;
    Ok(())
}

/// `curl` downloading the large file into a directory of its own, ms.
async fn curl_once(dir: &Path, url: &str, i: usize) -> anyhow::Result<f64> {
    let target = dir.join(format!("curl-{i}"));
    std::fs::create_dir_all(&target)?;
    let t0 = Instant::now();
    let status = tokio::process::Command::new("curl")
        .args(["-sSf", "-o"])
        .arg(target.join("large.bin"))
        .arg(url)
        .status()
        .await
        .context("run curl")?;
    if !status.success() {
        bail!("curl failed: {status}");
    }
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    eprintln!("bench artifacts: large: curl run {}: {ms:.0} ms", i + 1);
    std::fs::remove_dir_all(&target)?;
    Ok(ms)
}

/// `tar -C data -cf - . | tar -C target -xf -`, ms.
async fn tar_once(dir: &Path, data: &Path, i: usize) -> anyhow::Result<f64> {
    let target = dir.join(format!("tar-{i}"));
    std::fs::create_dir_all(&target)?;
    let t0 = Instant::now();
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg("tar -C \"$1\" -cf - . | tar -C \"$2\" -xf -")
        .arg("sh")
        .arg(data)
        .arg(&target)
        .status()
        .await
        .context("run tar | tar")?;
    if !status.success() {
        bail!("tar | tar failed: {status}");
    }
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    eprintln!(
        "bench artifacts: small: tar | tar run {}: {ms:.0} ms",
        i + 1
    );
    std::fs::remove_dir_all(&target)?;
    Ok(ms)
}
