//! The CLI's share of `hangar bench artifacts`: what `hangar execute`
//! adds to a build to upload an input (`-i`) or download an output (`-o`),
//! run as a user runs it (the real binary, its own packing and
//! unpacking), against the same floors as the copy between workers.
//!
//! An `execute` also creates a build, starts a process and waits for it;
//! that part is the same with and without the bytes, so each timed run is
//! a pair, turn about: the same `execute` with the tree (or with `-o`)
//! and without it (an empty input, no `-o`), and the figure is the
//! difference.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::procs::ADMIN_TOKEN;

/// Which transfer a pair of runs times.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Transfer {
    /// `-i in=DATA` against `-i in=EMPTY`.
    Upload,
    /// `-o out=DIR` of a task that copies DATA into `out`, against the
    /// same task without `-o`.
    Download,
}

pub(crate) struct Cli<'a> {
    pub bin: &'a Path,
    pub url: &'a str,
    /// Scratch for task files, empty inputs and download targets.
    pub dir: &'a Path,
    /// The worker tag the task runs on.
    pub tag: &'a str,
}

impl Cli<'_> {
    /// One pair of runs: the time the transfer of `data` added, ms, and
    /// the transfer's own time as the CLI reports it (without the rest of
    /// the build, whose rounds swing with the disk).
    pub(crate) async fn transfer_ms(
        &self,
        transfer: Transfer,
        data: &Path,
        label: &str,
        i: usize,
    ) -> anyhow::Result<(f64, Option<f64>)> {
        let (with, said) = self.execute(transfer, data, true, i).await?;
        let (without, _) = self.execute(transfer, data, false, i).await?;
        let ms = (with - without).max(0.0);
        let what = match transfer {
            Transfer::Upload => "execute -i",
            Transfer::Download => "execute -o",
        };
        eprintln!(
            "bench artifacts: {label}: {what} run {}: {ms:.0} ms ({with:.0} with the bytes, {without:.0} without; the CLI: {said})",
            i + 1
        );
        Ok((ms, cli_seconds(&said).map(|s| s * 1000.0)))
    }

    async fn execute(
        &self,
        transfer: Transfer,
        data: &Path,
        with_bytes: bool,
        i: usize,
    ) -> anyhow::Result<(f64, String)> {
        let scratch = self.dir.join(format!("cli-{i}-{with_bytes}"));
        std::fs::create_dir_all(&scratch)?;
        let task = scratch.join("task.yml");
        let mut cmd = tokio::process::Command::new(self.bin);
        cmd.arg("execute")
            .arg("-c")
            .arg(&task)
            .args(["--tag", self.tag])
            .env("HANGAR_URL", self.url)
            .env("HANGAR_TOKEN", ADMIN_TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        match transfer {
            Transfer::Upload => {
                std::fs::write(&task, task_yaml(&["in"], &[], None, "true"))?;
                let input = if with_bytes {
                    data.to_path_buf()
                } else {
                    let empty = scratch.join("empty");
                    std::fs::create_dir_all(&empty)?;
                    empty
                };
                cmd.arg("-i").arg(pair("in", &input));
            }
            Transfer::Download => {
                std::fs::write(
                    &task,
                    task_yaml(&[], &["out"], Some(data), "cp -a \"$DATA/.\" out/"),
                )?;
                if with_bytes {
                    let out = scratch.join("out");
                    std::fs::create_dir_all(&out)?;
                    cmd.arg("-o").arg(pair("out", &out));
                }
            }
        }
        let t0 = Instant::now();
        let run = cmd.output().await.context("run hangar execute")?;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        if !run.status.success() {
            bail!(
                "hangar execute failed ({}): {}",
                run.status,
                String::from_utf8_lossy(&run.stderr)
            );
        }
        std::fs::remove_dir_all(&scratch)?;
        // What the CLI says the transfer itself took (`uploaded in: … in
        // 0.6s`), beside the pair's difference, which also holds whatever
        // else the bytes cost the build.
        let stderr = String::from_utf8_lossy(&run.stderr);
        let said = stderr
            .lines()
            .filter(|l| l.contains("uploaded ") || l.contains("downloaded "))
            .map(|l| l.trim_start_matches("hangar: ").trim())
            .collect::<Vec<_>>()
            .join("; ");
        Ok((ms, said))
    }
}

/// The seconds in the CLI's `…: 29.4 MiB in 0.37s …`.
fn cli_seconds(said: &str) -> Option<f64> {
    let after = &said[said.find(" in ")? + 4..];
    after[..after.find('s')?].parse().ok()
}

fn pair(name: &str, dir: &Path) -> String {
    format!("{name}={}", dir.display())
}

/// A task file: JSON is YAML, and quoting stays serde's job.
fn task_yaml(inputs: &[&str], outputs: &[&str], data: Option<&Path>, script: &str) -> String {
    let names = |list: &[&str]| {
        list.iter()
            .map(|n| serde_json::json!({ "name": n }))
            .collect::<Vec<_>>()
    };
    let params = data
        .map(|d| serde_json::json!({ "DATA": PathBuf::from(d).display().to_string() }))
        .unwrap_or_else(|| serde_json::json!({}));
    serde_json::json!({
        "platform": "linux",
        "inputs": names(inputs),
        "outputs": names(outputs),
        "params": params,
        "run": { "path": "sh", "args": ["-c", script] },
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clis_own_time_is_read_from_its_line() {
        for (said, secs) in [
            ("uploaded in: 29.4 MiB in 0.37s (29.4 MiB)", Some(0.37)),
            ("downloaded out: 512.0 MiB in 1.3s", Some(1.3)),
            ("", None),
            ("downloaded out: 1 KiB in soon", None),
        ] {
            assert_eq!(cli_seconds(said), secs, "{said}");
        }
    }

    #[test]
    fn the_task_file_names_its_inputs_outputs_and_data() {
        let t: serde_json::Value = serde_json::from_str(&task_yaml(
            &["in"],
            &["out"],
            Some(Path::new("/d a\"ta")),
            "cp -a \"$DATA/.\" out/",
        ))
        .unwrap();
        assert_eq!(t["inputs"][0]["name"], "in");
        assert_eq!(t["outputs"][0]["name"], "out");
        assert_eq!(t["params"]["DATA"], "/d a\"ta");
        assert_eq!(t["run"]["args"][1], "cp -a \"$DATA/.\" out/");
    }
}
