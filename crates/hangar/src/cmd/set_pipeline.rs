//! `hangar set-pipeline`: fly's verb. Local vars are interpolated here; vars
//! not given stay `((…))` for a credential manager when builds run. The
//! change is shown as a diff against what web holds, confirmed, and sent
//! with the version it was made from, so a concurrent change is refused.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use hangar_client::ClientError;
use hangar_core::instance_vars::{InstanceVars, PipelineRef};
use hangar_core::pipeline::{self, parse_pipeline_value, PipelineConfig};
use hangar_core::vars::interpolate_leaving_undefined;

use crate::cmd::execute::{read_yaml, VarFlags};
use crate::cmd::pipelines::{confirm, TeamArgs};

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub team: TeamArgs,
    /// The pipeline: NAME, or NAME/KEY:VALUE,… for an instance.
    #[arg(short = 'p', long = "pipeline")]
    pub pipeline: String,
    /// The pipeline config (YAML).
    #[arg(short = 'c', long = "config")]
    pub config: PathBuf,
    #[command(flatten)]
    pub var_flags: VarFlags,
    /// An instance var: NAME=YAML (repeat for each; `-i a.b=x` sets a field
    /// of `a`). The pipeline set is the instance of NAME with these vars,
    /// and they fill the config's `((vars))` before every other var.
    #[arg(short = 'i', long = "instance-var", value_name = "NAME=YAML")]
    pub instance_vars: Vec<String>,
    /// Apply without asking. Off a terminal it is required: there is no one
    /// to ask.
    #[arg(short = 'n', long = "non-interactive")]
    pub non_interactive: bool,
}

/// Reads the config file, at most the size web accepts.
pub(crate) fn read_config(path: &Path) -> anyhow::Result<String> {
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

/// The pipeline `-p` and `-i` name together.
fn reference(pipeline: &str, instance_flags: &[String]) -> anyhow::Result<PipelineRef> {
    let mut reference = PipelineRef::parse_checked(pipeline).map_err(anyhow::Error::msg)?;
    if !instance_flags.is_empty() {
        if !reference.instance_vars.is_empty() {
            bail!(
                "give an instance's vars either in -p NAME/KEY:VALUE or with -i KEY=VALUE, \
                 not both"
            );
        }
        reference.instance_vars =
            InstanceVars::from_flags(instance_flags).map_err(anyhow::Error::msg)?;
    }
    Ok(reference)
}

/// `text` as one word for `sh`.
fn shell_word(text: &str) -> String {
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.:,/".contains(c))
    {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let reference = reference(&args.pipeline, &args.instance_vars)?;
    let instance_vars = reference.instance_vars.as_map().clone();
    let reference = reference.to_string();
    let team = args.team.name()?;
    let team = team.as_str();
    let client = args.team.target.client()?;
    let text = read_config(&args.config)?;
    let template = read_yaml(&text).with_context(|| format!("read {}", args.config.display()))?;
    let vars = args.var_flags.load()?.with_first(instance_vars);
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

    let current = client.pipeline_config(team, &reference).await?;
    // An archived pipeline's config is the empty one, which no set would
    // accept: the change is shown against nothing.
    let archived = serde_json::to_value(PipelineConfig::default())?;
    let (old, version) = match &current {
        Some(c) if c.config == archived => (PipelineConfig::default(), c.version),
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
        .set_pipeline(team, &reference, &body, Some(version))
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
            shell_word(&saved.pipeline.reference()),
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
    use super::{colour, reference, shell_word};

    #[test]
    fn the_instance_comes_from_p_or_from_i_flags() {
        let flags = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let table: &[(&str, &[&str], &str)] = &[
            ("p", &[], "p"),
            ("p", &["branch=main"], "p/branch:main"),
            ("p", &["a.b=1", "c=x y"], "p/a.b:1,c:x y"),
            ("p/branch:main", &[], "p/branch:main"),
        ];
        for (p, i, want) in table {
            assert_eq!(
                reference(p, &flags(i)).unwrap().to_string(),
                *want,
                "{p} {i:?}"
            );
        }
        for (p, i, why) in [
            ("p/branch:main", &["x=1"][..], "not both"),
            ("p", &["novalue"][..], "="),
            ("..", &[][..], "pipeline"),
            ("p", &["a,b=1"][..], "not allowed"),
        ] {
            let e = reference(p, &flags(i)).expect_err(p).to_string();
            assert!(e.contains(why), "{p} {i:?}: {e}");
        }
    }

    #[test]
    fn a_reference_is_one_shell_word() {
        assert_eq!(shell_word("p/branch:main"), "p/branch:main");
        assert_eq!(shell_word("p/a:x y"), "'p/a:x y'");
        assert_eq!(shell_word("p/a:it's"), "'p/a:it'\\''s'");
    }

    #[test]
    fn only_added_and_removed_lines_are_coloured() {
        let plain = "jobs:\n  job a has changed:\n    name: a\n  - plan: []\n  + plan: [x]\n";
        assert_eq!(
            colour(plain),
            "jobs:\n  job a has changed:\n    name: a\n\x1b[31m  - plan: []\x1b[0m\n\x1b[32m  + plan: [x]\x1b[0m\n"
        );
    }
}
