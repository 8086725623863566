//! `hangar execute`: run one task from a laptop, with local directories as
//! its inputs and outputs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};
use futures_util::StreamExt;
use hangar_api::builds::CreateBuild;
use hangar_client::Client;
use hangar_core::task::parse_task_value;
use hangar_core::vars::{find_unresolved, interpolate_with, Lookup, VarLookup, VarRef, Vars};
use indicatif::ProgressBar;

use crate::cmd::progress::{self, Transfer};
use crate::cmd::watch;
use crate::target::Target;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub target: Target,
    /// The task config (Concourse's task.yml).
    #[arg(short = 'c', long = "config")]
    pub config: PathBuf,
    /// An input: NAME=DIR (repeat for each). A task with one input takes the
    /// current directory when none is given.
    #[arg(short = 'i', long = "input", value_parser = parse_pair)]
    pub inputs: Vec<(String, PathBuf)>,
    /// An output to download when the task ends: NAME=DIR.
    #[arg(short = 'o', long = "output", value_parser = parse_pair)]
    pub outputs: Vec<(String, PathBuf)>,
    /// Run on a worker with these tags.
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// A directory holding a root filesystem to run the task in (runc).
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// Run the task privileged, as fly's --privileged: as real root with
    /// all capabilities, on a worker started with --allow-privileged.
    #[arg(short = 'p', long)]
    pub privileged: bool,
    /// Upload what .gitignore excludes too. By default an input in a git
    /// work tree is uploaded as fly does it: the files git tracks (less
    /// deleted ones) and the untracked ones .gitignore does not exclude. A
    /// hangar data dir (quickstart's hangar-data) is never uploaded.
    #[arg(long)]
    pub include_ignored: bool,
    /// Take the inputs not given with -i from a job, as fly's
    /// --inputs-from: each input named as one of the job's gets is fetched
    /// at the version a trigger of the job would fetch now.
    #[arg(short = 'j', long = "inputs-from", value_name = "PIPELINE/JOB")]
    pub inputs_from: Option<String>,
    /// The team the build runs in (and of --inputs-from's pipeline).
    /// Default: the target's, else main.
    #[arg(long, env = "HANGAR_TEAM")]
    pub team: Option<String>,
    #[command(flatten)]
    pub var_flags: VarFlags,
}

/// fly's `-v`, `-y` and `-l`, for every command that fills in `((vars))`
/// (`execute`, `set-pipeline`).
#[derive(clap::Args, Debug)]
pub(crate) struct VarFlags {
    /// A value for a `((var))`, as a string: NAME=VALUE (repeat for each;
    /// `-v creds.user=me` sets a field of `creds`).
    #[arg(short = 'v', long = "var", value_name = "NAME=STRING", value_parser = parse_string_var)]
    pub vars: Vec<(VarRef, serde_json::Value)>,
    /// A value for a `((var))` read as YAML, keeping its type: NAME=YAML
    /// (`-y 'ports=[80, 443]'`, `-y debug=true`). Wins over `-v` on the
    /// same name.
    #[arg(short = 'y', long = "yaml-var", value_name = "NAME=YAML", value_parser = parse_yaml_var)]
    pub yaml_vars: Vec<(VarRef, serde_json::Value)>,
    /// A YAML file of vars (repeatable): a var given with -v or -y wins over
    /// the files, and a later file over an earlier one.
    #[arg(short = 'l', long = "load-vars-from", value_name = "FILE")]
    pub var_files: Vec<PathBuf>,
}

impl VarFlags {
    /// The vars the flags give, in fly's order of precedence: `-v` and
    /// `-y` pairs (a `-y` after every `-v`, a later pair over an earlier
    /// one), then the `-l` files, the last one first.
    pub(crate) fn load(&self) -> anyhow::Result<Vars> {
        vars_from(&self.vars, &self.yaml_vars, &self.var_files)
    }
}

fn parse_pair(s: &str) -> Result<(String, PathBuf), String> {
    let (name, dir) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=DIR"))?;
    if name.is_empty() || dir.is_empty() {
        return Err(format!("{s:?} is not NAME=DIR"));
    }
    Ok((name.to_string(), PathBuf::from(dir)))
}

/// Reads YAML into a generic value: the one place the CLI parses YAML.
pub(crate) fn read_yaml(text: &str) -> anyhow::Result<serde_json::Value> {
    Ok(hangar_core::yaml::from_str(text)?)
}

fn split_var(s: &str) -> Result<(VarRef, &str), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("invalid variable pair {s:?} (must be name=value)"))?;
    let var = VarRef::parse(name)?;
    if let Some(source) = &var.source {
        return Err(format!(
            "{name:?}: a var given here has no source; drop {source:?}: and use the var's name"
        ));
    }
    Ok((var, value))
}

fn parse_string_var(s: &str) -> Result<(VarRef, serde_json::Value), String> {
    let (var, value) = split_var(s)?;
    Ok((var, serde_json::Value::String(value.to_string())))
}

fn parse_yaml_var(s: &str) -> Result<(VarRef, serde_json::Value), String> {
    let (var, value) = split_var(s)?;
    let value = read_yaml(value).map_err(|e| format!("{var}: not YAML: {e:#}"))?;
    Ok((var, value))
}

/// The largest task config or vars file read.
const MAX_CONFIG: u64 = 1024 * 1024;

/// Reads a file of at most [`MAX_CONFIG`] bytes.
fn read_small(path: &Path) -> anyhow::Result<String> {
    let meta = std::fs::metadata(path).with_context(|| format!("read {}", path.display()))?;
    if meta.len() > MAX_CONFIG {
        bail!("{} is larger than 1 MiB", path.display());
    }
    std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))
}

/// [`VarFlags::load`].
fn vars_from(
    vars: &[(VarRef, serde_json::Value)],
    yaml_vars: &[(VarRef, serde_json::Value)],
    var_files: &[PathBuf],
) -> anyhow::Result<Vars> {
    let pairs: Vec<(VarRef, serde_json::Value)> = vars.iter().chain(yaml_vars).cloned().collect();
    let mut sources = vec![Vars::expand(&pairs)];
    for path in var_files.iter().rev() {
        let text = read_small(path)?;
        let value =
            read_yaml(&text).with_context(|| format!("read vars from {}", path.display()))?;
        sources.push(match value {
            serde_json::Value::Object(map) => map,
            serde_json::Value::Null => serde_json::Map::new(),
            _ => bail!(
                "{}: a vars file must be a mapping of names to values",
                path.display()
            ),
        });
    }
    Ok(Vars::new(sources))
}

/// A vars error with what the user can do about each undefined var.
fn explain(e: &hangar_core::vars::VarsError) -> String {
    let mut parts = Vec::new();
    let (sourced, plain): (Vec<&String>, Vec<&String>) = e
        .undefined
        .iter()
        .partition(|name| VarRef::parse(name).is_ok_and(|r| r.source.is_some()));
    if !plain.is_empty() {
        let names: Vec<&str> = plain.iter().map(|s| s.as_str()).collect();
        parts.push(format!(
            "undefined vars: {} (give each with -v NAME=VALUE, -y NAME=YAML or -l FILE)",
            names.join(", ")
        ));
    }
    if !sourced.is_empty() {
        let names: Vec<&str> = sourced.iter().map(|s| s.as_str()).collect();
        parts.push(format!(
            "undefined vars: {} (a var with a source needs a pipeline's var_source; a one-off build has none)",
            names.join(", ")
        ));
    }
    parts.extend(e.problems.iter().cloned());
    parts.join("; ")
}

/// The flags' vars, and, when web has a credential manager, every other
/// var without a source kept as written for web to resolve (as `fly
/// execute` leaves them to Concourse's).
struct FlagVars {
    vars: Vars,
    web_resolves: bool,
    kept: std::cell::RefCell<std::collections::BTreeSet<String>>,
}

impl VarLookup for FlagVars {
    fn lookup(&self, r: &VarRef) -> Lookup<'_> {
        match self.vars.lookup(r) {
            Lookup::Undefined if self.web_resolves && r.source.is_none() => {
                self.kept.borrow_mut().insert(r.to_string());
                Lookup::Found(std::borrow::Cow::Owned(serde_json::Value::String(format!(
                    "(({r}))"
                ))))
            }
            other => other,
        }
    }
}

/// The task config with its `((vars))` interpolated: every var the flags do
/// not give is named in one error, before anything is uploaded, unless web
/// has a credential manager (`web_resolves`) to read it from.
fn task_config(args: &Args, web_resolves: bool) -> anyhow::Result<serde_json::Value> {
    let shown = args.config.display();
    let yaml = read_small(&args.config)?;
    let template = read_yaml(&yaml).with_context(|| format!("read {shown} as data"))?;
    let vars = FlagVars {
        vars: args.var_flags.load()?,
        web_resolves,
        kept: Default::default(),
    };
    let config = interpolate_with(&template, &vars)
        .map_err(|e| anyhow::anyhow!("{shown}: {}", explain(&e)))?;
    // A var's value is never interpolated again, so what is left came in a
    // value (or was kept for web); web would resolve or refuse a var that
    // came in a value, and hangar has no way to escape one.
    let kept = vars.kept.into_inner();
    let left: Vec<String> = find_unresolved(&config)
        .into_iter()
        .filter(|name| !kept.contains(name))
        .collect();
    if !left.is_empty() {
        bail!(
            "{shown}: a var's value holds (({})), which web would take for a var it cannot resolve; hangar cannot escape it yet",
            left.join(")), ((")
        );
    }
    Ok(config)
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    // The build and its uploads are the team's (fly's: the target's).
    let team = args.target.team(args.team.as_deref())?;
    let client = args.target.client()?.in_team(&team);
    // A web with a credential manager resolves the vars the flags leave;
    // one that cannot be asked is taken to have none (the error comes when
    // the build is created).
    let web_resolves = client
        .info()
        .await
        .map(|i| i.credential_manager)
        .unwrap_or(false);
    let template = task_config(&args, web_resolves)?;
    let config = parse_task_value(template)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.config.display()))?;
    config
        .check_runnable(args.image.is_some())
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.config.display()))?;
    // Web gets the config as hangar read it (params already text, YAML 1.1
    // scalars resolved), so it runs what was checked here.
    let config_json = serde_json::to_value(&config).context("encode the task config")?;

    let mut inputs: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (name, dir) in &args.inputs {
        if !config.inputs.iter().any(|i| &i.name == name) {
            let known: Vec<&str> = config.inputs.iter().map(|i| i.name.as_str()).collect();
            bail!(
                "the task has no input named {name} (its inputs: {})",
                known.join(", ")
            );
        }
        if !dir.is_dir() {
            bail!("input {name}: {} is not a directory", dir.display());
        }
        inputs.insert(name.clone(), dir.clone());
    }
    // The job's gets for the inputs -i does not give (fly's -j).
    let (job_gets, job_types) = match &args.inputs_from {
        Some(flag) => job_gets(&client, &team, flag, &config, &inputs).await?,
        None => (Vec::new(), serde_json::Value::Null),
    };
    if args.inputs.is_empty() && args.inputs_from.is_none() && config.inputs.len() == 1 {
        inputs.insert(config.inputs[0].name.clone(), PathBuf::from("."));
    }
    let fetched = |name: &str| job_gets.iter().any(|g| g["get"] == name);
    let missing: Vec<&str> = config
        .inputs
        .iter()
        .filter(|i| !i.optional && !inputs.contains_key(&i.name) && !fetched(&i.name))
        .map(|i| i.name.as_str())
        .collect();
    if !missing.is_empty() {
        bail!(
            "inputs not given: {} (pass -i NAME=DIR for each{})",
            missing.join(", "),
            match &args.inputs_from {
                Some(job) => format!(", or name them as gets of {job}"),
                None => String::new(),
            }
        );
    }
    for (name, _) in &args.outputs {
        if !config.outputs.iter().any(|o| &o.name == name) {
            bail!("the task has no output named {name}");
        }
    }

    let mut uploads: Vec<(String, PathBuf)> = inputs.into_iter().collect();
    if let Some(image) = &args.image {
        uploads.push(("image".to_string(), image.clone()));
    }
    // The inputs go to one worker, together. When that worker fails an
    // upload (web's 5xx), web doubts it and they all go again, elsewhere.
    let mut attempt = 1;
    let artifacts = loop {
        let mut artifacts = BTreeMap::new();
        let mut worker: Option<String> = None;
        let mut failed = None;
        for (name, dir) in &uploads {
            let sent = upload(
                &client,
                name,
                dir,
                args.include_ignored || args.image.as_ref() == Some(dir),
                worker.as_deref(),
                &config.platform,
                &args.tags,
            )
            .await;
            match sent {
                Ok(artifact) => {
                    worker.get_or_insert(artifact.worker);
                    artifacts.insert(name.clone(), artifact.handle);
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        match failed {
            None => break artifacts,
            Some(e) if attempt < UPLOAD_ATTEMPTS && worker_failed(&e) => {
                eprintln!(
                    "hangar: {e:#}; uploading the inputs again on another worker (attempt {} of {UPLOAD_ATTEMPTS})",
                    attempt + 1
                );
                attempt += 1;
            }
            Some(e) => return Err(e),
        }
    };
    let mut step = serde_json::json!({ "task": "one-off", "config": config_json });
    if !args.tags.is_empty() {
        step["tags"] = serde_json::json!(args.tags);
    }
    if args.image.is_some() {
        step["image"] = serde_json::json!("image");
    }
    if args.privileged {
        step["privileged"] = serde_json::json!(true);
    }
    let plan = if job_gets.is_empty() {
        serde_json::json!([step])
    } else {
        serde_json::json!([{ "in_parallel": job_gets }, step])
    };
    let build = client
        .create_build(&CreateBuild {
            resource_types: job_types,
            name: None,
            plan,
            artifacts,
            team: Some(team.clone()),
        })
        .await?;
    eprintln!("hangar: executing build {}", build.id);
    let code = watch::follow(&client, build.id).await?;
    let finished = client.build(build.id).await?;
    if finished.status == hangar_api::builds::BuildStatus::Succeeded {
        for (name, dir) in &args.outputs {
            download(&client, build.id, name, dir).await?;
        }
    }
    Ok(code)
}

/// The gets of the job `flag` (`PIPELINE/JOB`) for the task's inputs that
/// `-i` does not give, each at the version a trigger would fetch now, and
/// the pipeline's resource types.
async fn job_gets(
    client: &Client,
    team: &str,
    flag: &str,
    config: &hangar_core::task::TaskConfig,
    uploaded: &BTreeMap<String, PathBuf>,
) -> anyhow::Result<(Vec<serde_json::Value>, serde_json::Value)> {
    let (pipeline, job) = super::pipelines::split_flag("job", flag)?;
    let found = client
        .job_inputs(team, &pipeline, &job)
        .await
        .with_context(|| format!("read the inputs of {pipeline}/{job}"))?;
    let gets: Vec<serde_json::Value> = found
        .inputs
        .into_iter()
        .filter(|g| {
            let name = g["get"].as_str().unwrap_or_default();
            config.inputs.iter().any(|i| i.name == name) && !uploaded.contains_key(name)
        })
        .collect();
    for get in &gets {
        eprintln!(
            "hangar: input {} from {pipeline}/{job}: version {}",
            get["get"].as_str().unwrap_or_default(),
            get["version"]
        );
    }
    let types = if gets.is_empty() {
        serde_json::Value::Null
    } else {
        found.resource_types
    };
    Ok((gets, types))
}

/// How many times `execute` uploads its inputs when workers fail them.
const UPLOAD_ATTEMPTS: u32 = 3;

/// Whether an upload failed for its worker's fault (web answered 5xx: the
/// worker unreachable, failing, or out of room), so another may take it.
fn worker_failed(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<hangar_client::ClientError>(),
            Some(hangar_client::ClientError::Api { status, .. }) if status.is_server_error()
        )
    })
}

/// Streams `dir` as a tar to web, with its progress shown (see
/// [`progress`]): plain to a web on this host, zstd-compressed to one
/// elsewhere ([`encoding_for`]).
async fn upload(
    client: &Client,
    name: &str,
    dir: &Path,
    include_ignored: bool,
    worker: Option<&str>,
    platform: &str,
    tags: &[String],
) -> anyhow::Result<hangar_api::builds::Artifact> {
    let selection = {
        let root = dir.to_path_buf();
        tokio::task::spawn_blocking(move || super::upload_files::select(&root, include_ignored))
            .await?
            .with_context(|| format!("list input {name} in {}", dir.display()))?
    };
    for skipped in &selection.skipped_data_dirs {
        eprintln!(
            "hangar: input {name}: not uploading {}: it is a hangar data dir (secrets, database)",
            dir.join(skipped).display()
        );
    }
    let entries = Arc::new(selection.entries);
    // The bar's length: what the tar stream will hold, measured only when
    // the bar is drawn.
    let total = if progress::on_terminal() {
        let (root, entries) = (dir.to_path_buf(), entries.clone());
        tokio::task::spawn_blocking(move || tar_size(&root, &entries))
            .await
            .ok()
            .flatten()
    } else {
        None
    };
    let transfer = Transfer::start(
        &format!("uploading {name}"),
        &format!("uploaded {name}"),
        total,
    );
    // Headers and small files gathered into large chunks handed straight
    // to the body: a few on the wire rather than three per file, and no
    // pipe copying every byte twice more.
    let (writer, chunks) = hangar_client::chunks::chunked();
    let root = dir.to_path_buf();
    let counter = transfer.counter();
    let encoding = encoding_for(client);
    let packing = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let mut counting = Counting {
            inner: Packed::new(writer, encoding)?,
            counter,
        };
        // Parents come before their children; a dir adds its own entry
        // only, links are packed as links, each file opened by name in its
        // open parent (as a worker's stream-out does).
        hangar_volumes::write_entries(&mut counting, &root, &entries).map_err(|e| {
            // The kind stays: a broken pipe says web stopped reading.
            let kind = match &e {
                hangar_volumes::VolumeError::Io { source, .. } => source.kind(),
                _ => std::io::ErrorKind::Other,
            };
            std::io::Error::new(kind, e)
        })?;
        let mut writer = counting.inner.finish()?;
        std::io::Write::flush(&mut writer)
    });
    let sent = Arc::new(AtomicU64::new(0));
    let stream = chunks.map({
        let sent = sent.clone();
        move |chunk| {
            if let Ok(c) = &chunk {
                sent.fetch_add(c.len() as u64, Ordering::Relaxed);
            }
            chunk
        }
    });
    let result = client
        .upload_artifact_encoded(
            worker,
            platform,
            tags,
            encoding,
            reqwest::Body::wrap_stream(stream),
        )
        .await;
    let packed = packing.await?;
    let artifact = settle_upload(result, packed, name, dir)?;
    let sent = hangar_core::build::human_bytes(sent.load(Ordering::Relaxed));
    transfer.finish(&match encoding {
        "none" => format!(" ({sent})"),
        _ => format!(" ({sent} compressed)"),
    });
    Ok(artifact)
}

/// A writer that advances a progress counter by what it passes on: the
/// tar stream before compression, so the bar moves against [`tar_size`].
struct Counting<W> {
    inner: W,
    counter: ProgressBar,
}

impl<W: std::io::Write> std::io::Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.counter.inc(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// About how many bytes `entries` of `root` make as a tar stream (headers,
/// padding and the long-name entries of paths over 100 bytes included);
/// None when one cannot be read (packing will then say why).
fn tar_size(root: &Path, entries: &[PathBuf]) -> Option<u64> {
    let block = |n: u64| n.div_ceil(512) * 512;
    // The root's own entry and the two blocks that end an archive.
    let mut total = 512 + 1024;
    for entry in entries {
        // Not followed: links are packed as links.
        let meta = std::fs::symlink_metadata(root.join(entry)).ok()?;
        let name_len = entry.as_os_str().len() as u64;
        total += 512;
        if name_len > 100 {
            total += 512 + block(name_len + 1);
        }
        if meta.is_file() {
            total += block(meta.len());
        }
    }
    Some(total)
}

/// Which error an upload reports. The request's own error comes first: when
/// web refuses the upload (a wrong token) or the connection fails, the
/// packer's writes fail with a broken pipe only because nobody reads them
/// any more. A packer that failed on its own (a file it cannot read) is the
/// cause, whatever web answered to the shortened stream.
fn settle_upload<T>(
    result: Result<T, hangar_client::ClientError>,
    packed: std::io::Result<()>,
    name: &str,
    dir: &Path,
) -> anyhow::Result<T> {
    let pack_context = || format!("pack input {name} from {}", dir.display());
    match (result, packed) {
        (Ok(artifact), Ok(())) => Ok(artifact),
        (Err(e), Ok(())) => Err(e).with_context(|| format!("upload input {name}")),
        (Err(e), Err(p)) if p.kind() == std::io::ErrorKind::BrokenPipe => {
            Err(e).with_context(|| format!("upload input {name}"))
        }
        (Err(e), Err(p)) => {
            Err(anyhow::Error::new(p)
                .context(format!("{} (web then answered: {e})", pack_context())))
        }
        (Ok(_), Err(p)) => Err(anyhow::Error::new(p).context(pack_context())),
    }
}

/// Downloads an output into `dir`, refusing anything that would land
/// outside it, with its progress shown (see [`progress`]).
async fn download(client: &Client, id: i64, name: &str, dir: &Path) -> anyhow::Result<()> {
    let encoding = encoding_for(client);
    let resp = client
        .download_artifact_encoded(id, name, encoding)
        .await
        .with_context(|| format!("download output {name}"))?;
    let transfer = Transfer::start(
        &format!("downloading {name}"),
        &format!("downloaded {name}"),
        resp.content_length(),
    );
    let counter = transfer.counter();
    let stream = resp.bytes_stream().map(move |c| {
        if let Ok(bytes) = &c {
            counter.inc(bytes.len() as u64);
        }
        c.map_err(std::io::Error::other)
    });
    let reader = hangar_client::blocking_body_reader(stream);
    let dir = dir.to_path_buf();
    let shown = dir.display().to_string();
    let report = tokio::task::spawn_blocking(move || {
        hangar_volumes::extract_into_dir(
            &dir,
            reader,
            match encoding {
                "none" => hangar_volumes::Compression::None,
                _ => hangar_volumes::Compression::Zstd,
            },
            &hangar_volumes::Limits::default(),
        )
    })
    .await?
    .with_context(|| format!("extract output {name} into {shown}"))?;
    transfer.finish(if encoding == "none" {
        ""
    } else {
        " (compressed)"
    });
    eprintln!("hangar: output {name}: {} files into {shown}", report.files);
    Ok(())
}

/// How an input or output travels between this CLI and web: uncompressed
/// to a web on this host (compressing costs more than it saves in memory),
/// zstd to one elsewhere, as between workers
/// (`hangar_core::volumes::transfer::copy_encoding`).
fn encoding_for(client: &Client) -> &'static str {
    let web = client.base_url().host_str().unwrap_or_default();
    hangar_core::volumes::transfer::copy_encoding("localhost", web)
}

/// A tar stream's compression on the way out.
enum Packed<W: std::io::Write> {
    Plain(W),
    Zstd(zstd::stream::write::Encoder<'static, W>),
}

impl<W: std::io::Write> Packed<W> {
    fn new(writer: W, encoding: &str) -> std::io::Result<Packed<W>> {
        Ok(match encoding {
            "none" => Packed::Plain(writer),
            _ => Packed::Zstd(zstd::stream::write::Encoder::new(writer, 1)?),
        })
    }

    fn finish(self) -> std::io::Result<W> {
        match self {
            Packed::Plain(w) => Ok(w),
            Packed::Zstd(z) => z.finish(),
        }
    }
}

impl<W: std::io::Write> std::io::Write for Packed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Packed::Plain(w) => w.write(buf),
            Packed::Zstd(z) => z.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Packed::Plain(w) => w.flush(),
            Packed::Zstd(z) => z.flush(),
        }
    }
}
