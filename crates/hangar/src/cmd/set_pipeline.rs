//! `hangar set-pipeline`: fly's verb. Local vars are interpolated here; vars
//! not given stay `((…))` for a credential manager when builds run. The
//! change is shown as a diff against what web holds, confirmed, and sent
//! with the version it was made from, so a concurrent change is refused.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use hangar_client::ClientError;
use hangar_core::pipeline::{self, parse_pipeline_value, PipelineConfig};
use hangar_core::vars::interpolate_leaving_undefined;

use crate::cmd::execute::{read_yaml, VarFlags};
use crate::cmd::pipelines::{check_name, confirm, TeamArgs};

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The pipeline's name.
    #[arg(short = 'p', long = "pipeline")]
    pub pipeline: String,
    /// The pipeline config (YAML).
    #[arg(short = 'c', long = "config")]
    pub config: PathBuf,
    #[command(flatten)]
    pub var_flags: VarFlags,
    /// Apply without asking. Off a terminal it is required: there is no one
    /// to ask.
    #[arg(short = 'n', long = "non-interactive")]
    pub non_interactive: bool,
}

/// Reads the config file, at most the size web accepts.
fn read_config(path: &Path) -> anyhow::Result<String> {
    let file = std::fs::File::open(path).with_context(|| format!("read {}", path.display()))?;
    let mut text = String::new();
    file.take(pipeline::MAX_CONFIG_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("read {}", path.display()))?;
    if text.len() > pipeline::MAX_CONFIG_BYTES {
        bail!(
            "{} is larger than {} bytes, the most web accepts",
            path.display(),
            pipeline::MAX_CONFIG_BYTES
        );
    }
    Ok(text)
}

/// fly's colours: added lines green, removed red, on a terminal only.
fn colour(diff: &str) -> String {
    diff.lines()
        .map(|l| {
            if l.starts_with("  + ") {
                format!("\x1b[32m{l}\x1b[0m\n")
            } else if l.starts_with("  - ") {
                format!("\x1b[31m{l}\x1b[0m\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    check_name("pipeline", &args.pipeline)?;
    let team = args.team.team.as_str();
    let client = args.team.target.client()?;
    let text = read_config(&args.config)?;
    let template = read_yaml(&text).with_context(|| format!("read {}", args.config.display()))?;
    let vars = args.var_flags.load()?;
    let value = interpolate_leaving_undefined(&template, &vars)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.config.display()))?;
    let new = match parse_pipeline_value(&value) {
        Ok(v) => v.config,
        Err(errs) => {
            let lines: Vec<String> = errs.errors.iter().map(|e| format!("  {e}")).collect();
            bail!(
                "{} is not a valid pipeline config:\n{}",
                args.config.display(),
                lines.join("\n")
            );
        }
    };

    let current = client.pipeline_config(team, &args.pipeline).await?;
    let (old, version) = match &current {
        Some(c) => (
            parse_pipeline_value(&c.config)
                .map(|v| v.config)
                .map_err(|e| anyhow::anyhow!("the stored config does not read back: {e}"))?,
            c.version,
        ),
        None => (PipelineConfig::default(), 0),
    };
    let diff = pipeline::diff(&old, &new);
    if current.is_some() && diff.is_empty() {
        println!("no changes to apply");
        return Ok(ExitCode::SUCCESS);
    }
    let rendered = diff.render();
    if std::io::stdout().is_terminal() {
        crate::format::emit(&colour(&rendered))?;
    } else {
        crate::format::emit(&rendered)?;
    }
    if !args.non_interactive && !confirm("apply configuration?").await? {
        println!("bailing out");
        return Ok(ExitCode::FAILURE);
    }

    let body = serde_json::to_string(&value)?;
    let saved = match client
        .set_pipeline(team, &args.pipeline, &body, Some(version))
        .await
    {
        Err(ClientError::Api {
            status, message, ..
        }) if status == reqwest::StatusCode::CONFLICT => {
            bail!("{message}\n(run set-pipeline again to see the diff against the new version)")
        }
        other => other?,
    };
    for w in &saved.warnings {
        println!("WARNING: {}: {}", w.kind, w.message);
    }
    if saved.created {
        println!("pipeline created!");
    } else {
        println!("configuration updated");
    }
    if saved.pipeline.paused {
        println!(
            "\nthe pipeline is currently paused. to unpause, run:\n    hangar unpause-pipeline -p {}{}",
            saved.pipeline.name,
            if team == "main" {
                String::new()
            } else {
                format!(" --team {team}")
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::colour;

    #[test]
    fn only_added_and_removed_lines_are_coloured() {
        let plain = "jobs:\n  job a has changed:\n    name: a\n  - plan: []\n  + plan: [x]\n";
        assert_eq!(
            colour(plain),
            "jobs:\n  job a has changed:\n    name: a\n\x1b[31m  - plan: []\x1b[0m\n\x1b[32m  + plan: [x]\x1b[0m\n"
        );
    }
}
