//! `hangar bench image`: an image of about 100 MiB in 5 gzip layers, built
//! here and pushed to a local `docker-registry`, pulled cold into a root
//! filesystem by hangar's own puller (what the `registry-image` type's `in`
//! runs) and, in the same run and from the same registry, by the peers:
//! `skopeo copy` to an OCI layout (download and verify, no unpack) and, when
//! `umoci` is there, `skopeo copy` then `umoci raw unpack` (download, verify
//! and unpack, the same work as hangar's). Runs alternate between the
//! contenders so a noisy machine hurts each alike; the figures are medians
//! and their ratios.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use hangar_images::testing::{sha256, Compression, Registry, TarBuilder, TestImage, TestLayer};
use hangar_images::{Platform, Source};
use serde::Serialize;
use tokio::process::Command;

use crate::stats::{fmt_opt, Summary};

pub struct ImageConfig {
    pub layers: usize,
    pub layer_mib: usize,
    pub runs: usize,
    /// Keep the scratch dir here instead of a temporary one.
    pub dir: Option<PathBuf>,
    /// The `hangar` binary, for the task-start half (web and a worker as
    /// processes); `None` skips it.
    pub bin: Option<PathBuf>,
    /// Timed builds of the task-start half.
    pub start_runs: usize,
}

impl Default for ImageConfig {
    fn default() -> Self {
        ImageConfig {
            layers: 5,
            layer_mib: 20,
            runs: 5,
            dir: None,
            bin: None,
            start_runs: 10,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ImageReport {
    pub layers: usize,
    /// What the layers hold, unpacked.
    pub image_mib: f64,
    /// What travels: the compressed layers.
    pub compressed_mib: f64,
    pub runs: usize,
    /// hangar's pull into a root filesystem, ms.
    pub hangar_ms: Summary,
    /// `skopeo copy` to an OCI layout, ms.
    pub skopeo_copy_ms: Summary,
    /// `skopeo copy` then `umoci raw unpack`, ms (when umoci is there).
    pub skopeo_umoci_ms: Option<Summary>,
    /// hangar's median over skopeo copy's.
    pub ratio_to_skopeo_copy: Option<f64>,
    /// hangar's median over skopeo copy + umoci unpack's.
    pub ratio_to_skopeo_umoci: Option<f64>,
    /// A task on a cached image: placement to runc started, ms.
    pub task_runtime_started_ms: Option<Summary>,
    /// A task on a cached image: placement to its first output line, ms.
    pub task_first_output_ms: Option<Summary>,
    /// Why the task start was not measured, when it was not.
    pub task_start_skipped: Option<String>,
}

impl ImageReport {
    pub fn line(&self) -> String {
        let umoci = self
            .skopeo_umoci_ms
            .map(|s| {
                format!(
                    ", skopeo copy + umoci unpack p50 {} ms (ratio {})",
                    fmt_opt(s.p50, 0),
                    fmt_opt(self.ratio_to_skopeo_umoci, 2)
                )
            })
            .unwrap_or_default();
        format!(
            "image {} layers, {:.1} MiB ({:.1} MiB compressed), {} cold pulls each: hangar p50 {} ms, \
             skopeo copy p50 {} ms (ratio {}){umoci}",
            self.layers,
            self.image_mib,
            self.compressed_mib,
            self.runs,
            fmt_opt(self.hangar_ms.p50, 0),
            fmt_opt(self.skopeo_copy_ms.p50, 0),
            fmt_opt(self.ratio_to_skopeo_copy, 2),
        ) + &match (
            &self.task_runtime_started_ms,
            &self.task_first_output_ms,
            &self.task_start_skipped,
        ) {
            (Some(r), Some(o), _) => format!(
                "; task on a cached image, after placement: runc started p50 {} ms (max {}), \
                 first output p50 {} ms (max {}), {} builds",
                fmt_opt(r.p50, 0),
                fmt_opt(r.max, 0),
                fmt_opt(o.p50, 0),
                fmt_opt(o.max, 0),
                r.count
            ),
            (_, _, Some(why)) => format!("; task start on a cached image not measured: {why}"),
            _ => String::new(),
        }
    }
}

pub(crate) fn on_path(program: &str) -> bool {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .any(|d| Path::new(d).join(program).is_file())
}

/// Layer `i`: files of pseudo-random bytes (they do not compress, as
/// binaries barely do), 4 MiB each.
fn layer(i: usize, mib: usize) -> Vec<u8> {
    let mut tar = TarBuilder::new();
    let dir = format!("layer{i}");
    tar.dir(&dir);
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ (i as u64 + 1);
    let mut left = mib << 20;
    let mut n = 0;
    while left > 0 {
        let size = left.min(4 << 20);
        let mut data = Vec::with_capacity(size);
        while data.len() < size {
            // xorshift64: fast, and as incompressible as gzip can tell.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            data.extend_from_slice(&state.to_le_bytes());
        }
        data.truncate(size);
        tar.file(&format!("{dir}/blob{n}"), &data);
        left -= size;
        n += 1;
    }
    tar.finish()
}

async fn timed(what: &str, mut command: Command) -> anyhow::Result<f64> {
    let started = Instant::now();
    let out = command
        .output()
        .await
        .with_context(|| format!("run {what}"))?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if !out.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(ms)
}

pub async fn run(config: ImageConfig) -> anyhow::Result<ImageReport> {
    if !on_path("skopeo") {
        bail!("hangar bench image compares with skopeo: install it (Debian package skopeo)");
    }
    let umoci = on_path("umoci");
    let scratch = match &config.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            tempfile::tempdir_in(d)?
        }
        None => tempfile::tempdir()?,
    };
    eprintln!(
        "bench image: building {} layers of {} MiB and pushing them to a local registry",
        config.layers, config.layer_mib
    );
    let tars: Vec<Vec<u8>> = (0..config.layers)
        .map(|i| layer(i, config.layer_mib))
        .collect();
    // A real image's config names each layer's uncompressed digest; umoci
    // checks them.
    let diff_ids: Vec<String> = tars.iter().map(|t| sha256(t)).collect();
    let layers: Vec<TestLayer> = tars
        .into_iter()
        .map(|t| TestLayer::new(t, Compression::Gzip))
        .collect();
    let compressed: usize = layers.iter().map(|l| l.data.len()).sum();
    let image_config = serde_json::json!({
        "architecture": Platform::host().architecture,
        "os": "linux",
        "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    let image = TestImage {
        config: serde_json::to_vec(&image_config)?,
        layers,
        docker: false,
    };
    let registry = Registry::start().await;
    let (digest, _) = registry.push_image("bench/image", Some("1"), &image).await;
    let source = Source {
        repository: format!("{}/bench/image", registry.addr),
        tag: "1".into(),
        insecure: true,
        ..Source::default()
    };
    let reference = format!("docker://{}/bench/image:1", registry.addr);

    let (mut ours, mut copy, mut unpack) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..config.runs {
        let dest = scratch.path().join(format!("hangar-{run}"));
        std::fs::create_dir_all(&dest)?;
        let started = Instant::now();
        hangar_images::fetch(&source, &digest, &Platform::host(), &dest, |_| {})
            .await
            .context("hangar's pull")?;
        ours.push(started.elapsed().as_secs_f64() * 1000.0);

        let layout = scratch.path().join(format!("oci-{run}"));
        let mut skopeo = Command::new("skopeo");
        skopeo.args(["copy", "--quiet", "--src-tls-verify=false", &reference]);
        skopeo.arg(format!("oci:{}:1", layout.display()));
        copy.push(timed("skopeo copy", skopeo).await?);

        if umoci {
            let layout = scratch.path().join(format!("oci-u-{run}"));
            let bundle = scratch.path().join(format!("rootfs-u-{run}"));
            let mut skopeo = Command::new("skopeo");
            skopeo.args(["copy", "--quiet", "--src-tls-verify=false", &reference]);
            skopeo.arg(format!("oci:{}:1", layout.display()));
            let mut unpacker = Command::new("umoci");
            unpacker
                .args(["raw", "unpack", "--image"])
                .arg(format!("{}:1", layout.display()))
                .arg(&bundle);
            let ms =
                timed("skopeo copy", skopeo).await? + timed("umoci raw unpack", unpacker).await?;
            unpack.push(ms);
        }
        eprintln!(
            "bench image: run {}: hangar {:.0} ms, skopeo copy {:.0} ms{}",
            run + 1,
            ours[run],
            copy[run],
            unpack
                .get(run)
                .map(|ms| format!(", skopeo + umoci {ms:.0} ms"))
                .unwrap_or_default()
        );
        // Each run starts cold: nothing of an earlier pull is reused.
        for dir in [dest, layout] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    drop(registry);
    let (task_start, task_start_skipped) = match (&config.bin, crate::image_start::unavailable()) {
        (None, _) => (None, Some("no hangar binary given".to_string())),
        (Some(_), Some(why)) => (None, Some(why)),
        (Some(bin), None) => {
            eprintln!("bench image: tasks on a cached image, under runc");
            let dir = scratch.path().join("start");
            std::fs::create_dir_all(&dir)?;
            let s = crate::image_start::measure(bin, &dir, config.start_runs).await?;
            (Some(s), None)
        }
    };
    let (task_runtime_started_ms, task_first_output_ms) = match task_start {
        Some(s) => (Some(s.runtime_started), Some(s.first_output)),
        None => (None, None),
    };
    let hangar_ms = Summary::of(&ours);
    let skopeo_copy_ms = Summary::of(&copy);
    let skopeo_umoci_ms = umoci.then(|| Summary::of(&unpack));
    let ratio = |peer: Option<f64>| match (hangar_ms.p50, peer) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    Ok(ImageReport {
        layers: config.layers,
        image_mib: (config.layers * config.layer_mib) as f64,
        compressed_mib: compressed as f64 / (1 << 20) as f64,
        runs: config.runs,
        ratio_to_skopeo_copy: ratio(skopeo_copy_ms.p50),
        ratio_to_skopeo_umoci: ratio(skopeo_umoci_ms.and_then(|s| s.p50)),
        hangar_ms,
        skopeo_copy_ms,
        skopeo_umoci_ms,
        task_runtime_started_ms,
        task_first_output_ms,
        task_start_skipped,
    })
}
