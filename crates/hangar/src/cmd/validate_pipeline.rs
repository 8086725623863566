//! `hangar validate-pipeline`: fly's verb. Checks a pipeline file the way
//! `set-pipeline` and web would, without a target: its YAML, its vars
//! (those given with -v/-y/-l are filled in; the rest stay `((…))` for a
//! credential manager), and every rule of the config. Warnings are shown
//! and, with `--strict`, fail it too. `-o` prints the config with the
//! given vars filled in.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use hangar_core::pipeline::parse_pipeline_value;
use hangar_core::vars::interpolate_leaving_undefined;

use crate::cmd::execute::{read_yaml, VarFlags};
use crate::cmd::set_pipeline::read_config;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The pipeline config (YAML).
    #[arg(short = 'c', long = "config")]
    pub config: PathBuf,
    /// Fail on warnings too.
    #[arg(short = 's', long)]
    pub strict: bool,
    /// Print the config with the given vars filled in.
    #[arg(short = 'o', long)]
    pub output: bool,
    #[command(flatten)]
    pub var_flags: VarFlags,
}

/// What the check found, as it is printed; and whether it passes.
pub(crate) fn report(file: &str, value: &serde_json::Value, strict: bool) -> (String, bool) {
    let (errors, warnings) = match parse_pipeline_value(value) {
        Ok(ok) => (Vec::new(), ok.warnings),
        Err(e) => (e.errors, e.warnings),
    };
    let mut out = String::new();
    for w in &warnings {
        out.push_str(&format!("WARNING: {}: {}\n", w.kind, w.message));
    }
    for e in &errors {
        out.push_str(&format!("ERROR: {e}\n"));
    }
    let passes = errors.is_empty() && (!strict || warnings.is_empty());
    if passes {
        out.push_str("looks good\n");
    } else if errors.is_empty() {
        out.push_str(&format!(
            "{file}: {} warning{}, which --strict makes fail\n",
            warnings.len(),
            if warnings.len() == 1 { "" } else { "s" }
        ));
    } else {
        out.push_str(&format!(
            "{file} is not a valid pipeline config: {} error{}\n",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" }
        ));
    }
    (out, passes)
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let file = args.config.display().to_string();
    let text = read_config(&args.config)?;
    let template = read_yaml(&text).with_context(|| format!("read {file}"))?;
    let vars = args.var_flags.load()?;
    let value = interpolate_leaving_undefined(&template, &vars)
        .map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let (said, passes) = report(&file, &value, args.strict);
    if args.output && passes {
        crate::format::emit(&hangar_core::yaml_write::to_yaml(&value))?;
        eprint!("{said}");
    } else if passes {
        crate::format::emit(&said)?;
    } else {
        eprint!("{said}");
    }
    Ok(if passes {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod format_tests {
    use hangar_core::pipeline::{parse_pipeline, to_yaml as to_yaml_ordered};

    #[test]
    fn a_config_is_formatted_in_concourse_s_order_and_reads_back_the_same() {
        let messy = "jobs:\n- plan:\n  - {trigger: true, get: repo}\n  name: build\nresources:\n- {source: {uri: x}, type: git, name: repo}\n";
        let config = parse_pipeline(messy).unwrap().config;
        let formatted = to_yaml_ordered(&config);
        assert_eq!(
            formatted,
            "resources:\n- name: repo\n  type: git\n  source:\n    uri: x\njobs:\n- name: build\n  plan:\n  - get: repo\n    trigger: true\n"
        );
        assert_eq!(parse_pipeline(&formatted).unwrap().config, config);
        // Formatting is idempotent.
        assert_eq!(
            to_yaml_ordered(&parse_pipeline(&formatted).unwrap().config),
            formatted
        );
    }
}

#[cfg(test)]
mod tests {
    use super::report;
    use serde_json::json;

    #[test]
    fn errors_fail_and_warnings_fail_only_when_strict() {
        let good = json!({"jobs": [{"name": "j", "plan": [{"task": "t",
            "config": {"platform": "linux", "run": {"path": "true"}}}]}]});
        assert_eq!(report("p.yml", &good, true), ("looks good\n".into(), true));
        let bad = json!({"jobs": [{"name": "j", "plan": [{"get": "nowhere"}]}]});
        let (said, passes) = report("p.yml", &bad, false);
        assert!(!passes);
        assert!(
            said.contains("ERROR: ") && said.contains("nowhere"),
            "{said}"
        );
        assert!(
            said.ends_with("p.yml is not a valid pipeline config: 1 error\n"),
            "{said}"
        );
        // A name that is not a valid identifier is a warning, as in
        // Concourse.
        let warned = json!({"jobs": [{"name": "Build_It", "plan": [{"task": "t",
            "config": {"platform": "linux", "run": {"path": "true"}}}]}]});
        let (said, passes) = report("p.yml", &warned, false);
        assert!(passes, "{said}");
        assert!(said.starts_with("WARNING: "), "{said}");
        let (said, passes) = report("p.yml", &warned, true);
        assert!(!passes);
        assert!(said.contains("which --strict makes fail"), "{said}");
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct FormatArgs {
    /// The pipeline config (YAML).
    #[arg(short = 'c', long = "config")]
    pub config: PathBuf,
    /// Write the formatted config back to the file instead of printing it.
    #[arg(short = 'w', long)]
    pub write: bool,
}

/// `hangar format-pipeline`: fly's verb. The config as Concourse writes it
/// back: its keys in Concourse's order, defaults and empty fields left
/// out, block YAML; `((vars))` stay as they are. A config that does not
/// validate is refused, saying why, and the file is left alone.
pub(crate) async fn format(args: FormatArgs) -> anyhow::Result<ExitCode> {
    let file = args.config.display().to_string();
    let text = read_config(&args.config)?;
    let value = read_yaml(&text).with_context(|| format!("read {file}"))?;
    let formatted = match parse_pipeline_value(&value) {
        Ok(parsed) => hangar_core::pipeline::to_yaml(&parsed.config),
        Err(e) => {
            let (said, _) = report(&file, &value, false);
            eprint!("{said}");
            anyhow::bail!("{file} is not formatted: {} error(s)", e.errors.len());
        }
    };
    if args.write {
        // Whole or not at all: a temporary file beside it, renamed over it.
        let tmp = args.config.with_extension("format-tmp");
        std::fs::write(&tmp, &formatted).with_context(|| format!("write {}", tmp.display()))?;
        std::fs::rename(&tmp, &args.config).with_context(|| format!("replace {file}"))?;
    } else {
        crate::format::emit(&formatted)?;
    }
    Ok(ExitCode::SUCCESS)
}
