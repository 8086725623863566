//! A task's config: Concourse's task config format
//! (<https://concourse-ci.org/tasks.html>), parsed from YAML and validated.
//!
//! Parsing happens in two passes. The first reads the YAML into a JSON
//! value the way Concourse does ([`crate::yaml`]: YAML 1.1 scalars, merge
//! keys, bounded alias expansion). The second maps that value onto
//! [`TaskConfig`] with the path of every field tracked, so errors say where
//! they are (`run.args[1]: invalid type`), and coerces params to text as
//! Concourse does. Then [`TaskConfig::validate`] checks the rules serde
//! cannot express. A plan carries a config as JSON, and web and the engine
//! read it with [`parse_task_value`], the second pass alone.
//!
//! Where hangar is stricter than Concourse (paths with `..` or absolute,
//! artifact names, two artifacts at one path, unknown fields below the top
//! level), the refusal says so and names what Concourse would do;
//! `docs/task-configs.md` lists each difference and why.
use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::names::shorten;

/// The largest task config accepted, in bytes, checked before parsing.
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;

/// The most values (scalars, sequences and mappings, map keys included) a
/// document may hold once its aliases are expanded.
pub const MAX_CONFIG_VALUES: usize = crate::yaml::MAX_VALUES;

/// The kernel's range of CPU shares (cgroup v1 `cpu.shares`): a
/// `container_limits.cpu` outside it is brought into it, as the kernel does
/// with the value Concourse passes on.
pub const MIN_CPU_SHARES: u64 = 2;
pub const MAX_CPU_SHARES: u64 = 262_144;

/// The longest input or output name.
pub const MAX_ARTIFACT_NAME_LEN: usize = 63;

/// A task's config, as Concourse defines it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (the task config)")]
pub struct TaskConfig {
    /// The platform the task runs on (`linux`, …): only workers of that
    /// platform are chosen.
    pub platform: String,
    /// The image the task runs in, as a resource: fetched with the resource
    /// type's `check` and `in` on the task's worker and run under runc,
    /// unless the step gives an image of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_resource: Option<ImageResource>,
    /// The task's root filesystem: `raw:///path` (or a bare path) on the
    /// worker, or `docker://[registry]/repository[#tag]`, fetched as the
    /// built-in `registry-image` would ([`TaskConfig::rootfs_image`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs_uri: Option<String>,
    // A list or mapping given as null (`inputs:` with nothing) is none, as
    // Concourse reads it.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub inputs: Vec<TaskInput>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub outputs: Vec<TaskOutput>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub caches: Vec<TaskCache>,
    /// Environment variables for the task, coerced to text as Concourse
    /// does: numbers and booleans become their text (`true`, `493` for
    /// `0755`, `1.5`), a param with no value the empty string, lists and
    /// mappings their JSON.
    #[serde(
        default,
        deserialize_with = "deserialize_params",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub params: BTreeMap<String, String>,
    /// What the task runs. Left out (or with no `path`), the image's
    /// `ENTRYPOINT`/`CMD` runs, with `args` after them, as in Concourse.
    #[serde(default, deserialize_with = "null_as_default")]
    pub run: RunConfig,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "ContainerLimits::is_empty"
    )]
    pub container_limits: ContainerLimits,
}

/// A field given as null takes its default.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `image_resource`: the resource that provides the task's image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping (type, source, params, version, name, tags)"
)]
pub struct ImageResource {
    /// A label for the image in the build's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(rename = "type")]
    pub type_name: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub source: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<BTreeMap<String, String>>,
    /// Worker tags for the image's check and fetch.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tags: Vec<String>,
}

/// An artifact the task reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (name, path, optional)")]
pub struct TaskInput {
    pub name: String,
    /// Where the input appears, relative to the working directory; the
    /// name when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The task runs even when no artifact of this name is given.
    #[serde(default, skip_serializing_if = "is_false")]
    pub optional: bool,
}

/// An artifact the task writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (name, path)")]
pub struct TaskOutput {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// A directory kept between runs of the task on one worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (path, ttl)")]
pub struct TaskCache {
    pub path: String,
    /// A cache unused for this long is started afresh (a Go duration such
    /// as `24h` or `90m`, at least `1s`, as Concourse reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

impl TaskCache {
    /// The ttl, once [`TaskConfig::validate`] has accepted it.
    pub fn ttl(&self) -> Option<std::time::Duration> {
        self.ttl.as_deref().and_then(|t| parse_go_duration(t).ok())
    }
}

/// The command the task runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (path, args, dir, user)")]
pub struct RunConfig {
    /// The program; empty for the image's `ENTRYPOINT`/`CMD`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub path: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub args: Vec<String>,
    /// The working directory, relative to the task's build directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// `container_limits`. As in Concourse, 0 (or null) means no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (memory, cpu)")]
pub struct ContainerLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryLimit>,
    /// CPU shares: a weight relative to other containers, not a count of
    /// cores. A number; a fraction is cut to its whole part, as Concourse
    /// does. [`TaskConfig::cpu_shares`] gives what is applied.
    #[serde(
        default,
        deserialize_with = "deserialize_cpu",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu: Option<u64>,
}

impl ContainerLimits {
    pub fn is_empty(&self) -> bool {
        self.memory.is_none() && self.cpu.is_none()
    }
}

/// A memory limit in bytes. In YAML: a number of bytes, or a string of
/// Concourse's form ([`parse_memory_size`]): `"1073741824"`, `"512MB"`,
/// `"1GiB"`, `"64k"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MemoryLimit(pub u64);

fn is_false(b: &bool) -> bool {
    !*b
}

impl TaskInput {
    /// Where the input is mounted: its `path`, or its name when it has none
    /// (an empty `path` is none, as in Concourse).
    pub fn mount_path(&self) -> &str {
        self.path
            .as_deref()
            .filter(|p| !p.is_empty())
            .unwrap_or(&self.name)
    }
}

impl TaskOutput {
    /// Where the output is taken from: its `path`, or its name.
    pub fn mount_path(&self) -> &str {
        self.path
            .as_deref()
            .filter(|p| !p.is_empty())
            .unwrap_or(&self.name)
    }
}

impl TaskConfig {
    /// The path of the input `name` (its `path`, or its name), or `None`
    /// when the task has no such input. An input named twice is mounted at
    /// each of its paths; this is the first.
    pub fn input_path(&self, name: &str) -> Option<&str> {
        self.inputs
            .iter()
            .find(|i| i.name == name)
            .map(TaskInput::mount_path)
    }

    /// The path of the output `name` (its `path`, or its name).
    pub fn output_path(&self, name: &str) -> Option<&str> {
        self.outputs
            .iter()
            .find(|o| o.name == name)
            .map(TaskOutput::mount_path)
    }

    /// The input an output shares its path with, if any: the task changes
    /// that input in place and the output is the changed input.
    pub fn input_at_output_path(&self, output: &TaskOutput) -> Option<&TaskInput> {
        let normal = |p: &str| check_relative_path(p).ok();
        let at = normal(output.mount_path())?;
        self.inputs
            .iter()
            .find(|i| normal(i.mount_path()).as_ref() == Some(&at))
    }

    /// The memory limit in bytes, when one is set (0 is none).
    pub fn memory_limit_bytes(&self) -> Option<u64> {
        self.container_limits.memory.map(|m| m.0).filter(|b| *b > 0)
    }

    /// The user to run as, when one is named (Concourse reads an empty
    /// `run.user` as none: the image's or the worker's default).
    pub fn run_user(&self) -> Option<&str> {
        self.run.user.as_deref().filter(|u| !u.is_empty())
    }

    /// The CPU shares applied, when set (0 is none): brought into the
    /// kernel's range, 2 to 262144, as the kernel brings the value Concourse
    /// passes on (`cpu: 1` runs with 2 shares).
    pub fn cpu_shares(&self) -> Option<u64> {
        self.container_limits
            .cpu
            .filter(|c| *c > 0)
            .map(|c| c.clamp(MIN_CPU_SHARES, MAX_CPU_SHARES))
    }

    /// The image a `docker://` `rootfs_uri` names, as the `image_resource`
    /// that fetches it: the built-in `registry-image` with the URI's
    /// repository (its registry, if it names one, in front) and tag (the
    /// URI's fragment; `latest` when it has none). `None` for any other
    /// `rootfs_uri`, or an invalid one (which [`TaskConfig::validate`]
    /// refuses).
    pub fn rootfs_image(&self) -> Option<ImageResource> {
        let (repository, tag) = parse_docker_uri(self.rootfs_uri.as_deref()?).ok()??;
        let mut source = BTreeMap::new();
        source.insert("repository".to_string(), repository.into());
        if let Some(tag) = tag {
            source.insert("tag".to_string(), tag.into());
        }
        Some(ImageResource {
            name: None,
            type_name: "registry-image".into(),
            source,
            params: None,
            version: None,
            tags: vec![],
        })
    }

    /// Whether the task runs its image's `ENTRYPOINT`/`CMD` (it gives no
    /// `run.path`), as Concourse runs it.
    pub fn runs_image_entrypoint(&self) -> bool {
        self.run.path.is_empty()
    }

    /// Whether a step can run this config: `step_gives_image` when the step
    /// names an image of its own. A task with no `run.path` runs its image's
    /// `ENTRYPOINT`/`CMD`, so it needs an image with a config: the step's,
    /// an `image_resource` or a `docker://` `rootfs_uri` (a raw root
    /// filesystem has none, as in Concourse). Concourse fails such a task
    /// when it runs, with the same words.
    pub fn check_runnable(&self, step_gives_image: bool) -> Result<(), TaskConfigError> {
        let has_image_config =
            step_gives_image || self.image_resource.is_some() || self.rootfs_image().is_some();
        if self.runs_image_entrypoint() && !has_image_config {
            return Err(TaskConfigError::field(
                "run.path",
                format!(
                    "{NO_EXECUTABLE} (this task names no image to take one from: give run.path, \
                     or an image_resource)"
                ),
            ));
        }
        Ok(())
    }

    /// What parsing does after the types have been read: an empty input or
    /// output `path` and an empty `run.dir` are none (Concourse reads them
    /// so), and an input given twice with the same name and path is given
    /// once (required if either is).
    fn normalise(&mut self) {
        for input in &mut self.inputs {
            input.path = input
                .path
                .take()
                .filter(|p| !p.is_empty())
                .map(under_work_dir);
        }
        for output in &mut self.outputs {
            output.path = output
                .path
                .take()
                .filter(|p| !p.is_empty())
                .map(under_work_dir);
        }
        for cache in &mut self.caches {
            cache.path = under_work_dir(std::mem::take(&mut cache.path));
        }
        self.run.dir = self.run.dir.take().filter(|d| !d.is_empty());
        let mut kept: Vec<TaskInput> = Vec::with_capacity(self.inputs.len());
        let mut seen: HashMap<(String, String), usize> = HashMap::new();
        for input in std::mem::take(&mut self.inputs) {
            // A path validate refuses is kept as it is, for validate to name.
            let Ok(at) = check_relative_path(input.mount_path()) else {
                kept.push(input);
                continue;
            };
            match seen.entry((input.name.clone(), at)) {
                std::collections::hash_map::Entry::Occupied(first) => {
                    kept[*first.get()].optional &= input.optional;
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(kept.len());
                    kept.push(input);
                }
            }
        }
        self.inputs = kept;
    }

    /// Checks the rules the types alone do not: names, paths, ranges.
    /// [`parse_task_config`] calls it; call it on a config built in code.
    pub fn validate(&self) -> Result<(), TaskConfigError> {
        let fail = |field: String, message: String| Err(TaskConfigError::field(field, message));

        if self.platform.trim().is_empty() {
            return fail("platform".into(), "must not be empty".into());
        }
        if let Some(image) = &self.image_resource {
            if let Err(e) = crate::names::validate_label(&image.type_name) {
                return fail(
                    "image_resource.type".into(),
                    format!(
                        "{:?} is not a valid resource type name ({})",
                        e.name, e.reason
                    ),
                );
            }
            for (i, tag) in image.tags.iter().enumerate() {
                if let Err(e) = crate::names::validate_label(tag) {
                    return fail(
                        format!("image_resource.tags[{i}]"),
                        format!("{:?} is not a valid tag ({})", e.name, e.reason),
                    );
                }
            }
        }
        if let Some(uri) = &self.rootfs_uri {
            check_rootfs_uri(uri).map_err(|m| TaskConfigError::field("rootfs_uri", m))?;
        }

        // Names are unique among outputs; an input may be named twice (the
        // artifact is mounted at each of its paths, as Concourse mounts
        // it). An output may share an input's name (it replaces that
        // artifact for later steps) and its path (the task changes the
        // input in place, Concourse's idiom). Any other two artifacts or
        // caches at one path are refused.
        let mut output_names: HashMap<&str, String> = HashMap::new();
        let mut input_paths: HashMap<String, (String, &str)> = HashMap::new();
        let mut other_paths: HashMap<String, String> = HashMap::new();
        for (i, input) in self.inputs.iter().enumerate() {
            let owner = format!("inputs[{i}]");
            check_name(&owner, &input.name)?;
            let (field, path) = artifact_path_field(&owner, &input.name, &input.path);
            let normal =
                check_relative_path(path).map_err(|m| TaskConfigError::field(&field, m))?;
            match input_paths.get(&normal) {
                // The same artifact at the same place: mounted once.
                Some((_, name)) if *name == input.name => {}
                Some((first, _)) => {
                    return fail(
                        field,
                        format!(
                            "{:?} is already the path of {first} (Concourse would mount one \
                             input over the other, and the task would see only the last)",
                            shorten(path)
                        ),
                    )
                }
                None => {
                    input_paths.insert(normal, (owner, &input.name));
                }
            }
        }
        for (i, output) in self.outputs.iter().enumerate() {
            let owner = format!("outputs[{i}]");
            check_name(&owner, &output.name)?;
            if let Some(first) = output_names.insert(&output.name, owner.clone()) {
                return fail(
                    format!("{owner}.name"),
                    format!(
                        "{:?} is already the name of {first} (Concourse would keep only the \
                         last output of that name and drop the other's files)",
                        output.name
                    ),
                );
            }
            let (field, path) = artifact_path_field(&owner, &output.name, &output.path);
            let normal =
                check_relative_path(path).map_err(|m| TaskConfigError::field(&field, m))?;
            if let Some(first) = other_paths.insert(normal, owner) {
                return fail(
                    field,
                    format!("{:?} is already the path of {first}", shorten(path)),
                );
            }
        }
        for (i, cache) in self.caches.iter().enumerate() {
            let owner = format!("caches[{i}]");
            let field = format!("{owner}.path");
            let normal =
                check_cache_path(&cache.path).map_err(|m| TaskConfigError::field(&field, m))?;
            let first = input_paths
                .get(&normal)
                .map(|(owner, _)| owner)
                .or_else(|| other_paths.get(&normal));
            if let Some(first) = first {
                return fail(
                    field,
                    format!("{:?} is already the path of {first}", shorten(&cache.path)),
                );
            }
            other_paths.insert(normal, owner.clone());
            if let Some(ttl) = &cache.ttl {
                match parse_go_duration(ttl) {
                    Ok(d) if d >= std::time::Duration::from_secs(1) => {}
                    Ok(_) => {
                        return fail(
                            format!("{owner}.ttl"),
                            format!("{:?} is less than 1s, as in Concourse", shorten(ttl)),
                        )
                    }
                    Err(m) => return fail(format!("{owner}.ttl"), m),
                }
            }
        }

        for (key, value) in &self.params {
            if key.is_empty() || key.contains(['=', '\0']) {
                return fail(
                    "params".into(),
                    format!(
                        "{:?} cannot be an environment variable name (empty, or holds '=' or NUL)",
                        shorten(key)
                    ),
                );
            }
            if value.contains('\0') {
                return fail(
                    format!("params.{key}"),
                    "must not contain a NUL character".into(),
                );
            }
        }

        if !self.run.path.is_empty() && self.run.path.trim().is_empty() {
            return fail(
                "run.path".into(),
                format!(
                    "{:?} is blank (Concourse would try to run it and fail): leave run.path out \
                     to run the image's ENTRYPOINT/CMD",
                    self.run.path
                ),
            );
        }
        if self.run.path.contains('\0') || self.run.args.iter().any(|a| a.contains('\0')) {
            return fail(
                "run".into(),
                "path and args must not contain a NUL character".into(),
            );
        }
        if let Some(dir) = self.run.dir.as_deref().filter(|d| !d.is_empty()) {
            if let Err(message) = check_dir_path(dir) {
                return fail("run.dir".into(), message);
            }
        }
        if let Some(user) = self.run.user.as_deref().filter(|u| !u.is_empty()) {
            if let Err(message) = crate::users::parse_user(user) {
                return fail("run.user".into(), message);
            }
        }
        Ok(())
    }
}

/// Concourse's words for a task that has neither a `run.path` nor an image
/// command.
pub const NO_EXECUTABLE: &str = "No executable defined for task. Specify an executable to run \
     in either the task config (run.path) or as an ENTRYPOINT/CMD in the container image.";

/// The program and arguments of a task without `run.path`, from its image's
/// `metadata.json` (Concourse's image layout, which `registry-image` writes
/// with the image's `entrypoint` and `cmd`), as Concourse takes them: the
/// entrypoint's first word is the program, then the rest of the entrypoint,
/// then `cmd` (whose first word is the program when there is no
/// entrypoint), then the task's own `args`.
pub fn image_command(metadata: &[u8], args: &[String]) -> Result<(String, Vec<String>), String> {
    #[derive(Deserialize)]
    struct RunConfig {
        #[serde(default, deserialize_with = "null_as_default")]
        entrypoint: Vec<String>,
        #[serde(default, deserialize_with = "null_as_default")]
        cmd: Vec<String>,
    }
    let config: RunConfig = serde_json::from_slice(metadata)
        .map_err(|e| format!("error parsing metadata.json from rootfs: {e}"))?;
    let mut words = config.entrypoint.into_iter().chain(config.cmd);
    let path = words.next().unwrap_or_default();
    if path.is_empty() {
        return Err(NO_EXECUTABLE.into());
    }
    let command: Vec<String> = words.chain(args.iter().cloned()).collect();
    Ok((path, command))
}

/// A `rootfs_uri`: a bare path or `raw:///path` (a root filesystem on the
/// worker), or `docker://…` (an image from a registry).
fn check_rootfs_uri(uri: &str) -> Result<(), String> {
    if uri.is_empty() {
        return Err("must not be empty".into());
    }
    if uri.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    match uri.split_once("://") {
        None => Ok(()),
        Some(("raw", _)) => Ok(()),
        Some(("docker", _)) => parse_docker_uri(uri).map(|_| ()),
        Some((scheme, _)) => Err(format!(
            "{:?}: hangar takes raw:///path (a root filesystem on the worker) or \
             docker://[registry]/repository[#tag] (an image from a registry); Concourse hands \
             a {scheme}:// URI to its Garden backend, which hangar does not have",
            shorten(uri)
        )),
    }
}

/// Garden's `docker://[registry[:port]]/repository[#tag]`: the repository
/// (the registry in front when one is named) and the tag, or `Ok(None)`
/// when `uri` is not a `docker://` URI.
fn parse_docker_uri(uri: &str) -> Result<Option<(String, Option<String>)>, String> {
    let Some(rest) = uri.strip_prefix("docker://") else {
        return Ok(None);
    };
    let bad = |why: &str| {
        format!(
            "{:?} {why}: a docker:// rootfs_uri is docker:///repository[#tag] (Docker Hub) or \
             docker://registry[:port]/repository[#tag]",
            shorten(uri)
        )
    };
    let (location, tag) = match rest.split_once('#') {
        Some((location, tag)) => (location, Some(tag).filter(|t| !t.is_empty())),
        None => (rest, None),
    };
    let (registry, path) = location.split_once('/').unwrap_or((location, ""));
    let path = path.trim_matches('/');
    if path.is_empty() {
        return Err(bad("names no repository"));
    }
    if location.contains(char::is_whitespace)
        || tag.is_some_and(|t| t.contains(char::is_whitespace))
    {
        return Err(bad("holds a space"));
    }
    if path
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(bad("has an empty, '.' or '..' part in its repository"));
    }
    let repository = if registry.is_empty() {
        path.to_string()
    } else {
        format!("{registry}/{path}")
    };
    Ok(Some((repository, tag.map(str::to_string))))
}

/// `[A-Za-z0-9][A-Za-z0-9_.-]{0,62}`: the rule for input and output names.
pub fn is_valid_artifact_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_ARTIFACT_NAME_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn check_name(owner: &str, name: &str) -> Result<(), TaskConfigError> {
    if is_valid_artifact_name(name) {
        return Ok(());
    }
    let hint = if name.contains('/') {
        " To mount an input below a directory, name it plainly and give the directory as its \
         path (`name: repo`, `path: src/repo`)."
    } else {
        ""
    };
    Err(TaskConfigError::field(
        format!("{owner}.name"),
        format!(
            "{:?} is not a valid name: hangar takes 1 to {MAX_ARTIFACT_NAME_LEN} letters, digits, \
             '_', '.' or '-', starting with a letter or digit, because an artifact's name is \
             also a step's name and part of URLs (Concourse takes any non-empty name).{hint}",
            shorten(name)
        ),
    ))
}

/// The field an artifact's path is read from (its `path`, else its name)
/// and that path.
fn artifact_path_field<'a>(
    owner: &str,
    name: &'a str,
    path: &'a Option<String>,
) -> (String, &'a str) {
    match path.as_deref().filter(|p| !p.is_empty()) {
        Some(p) => (format!("{owner}.path"), p),
        None => (format!("{owner}.name"), name),
    }
}

/// An artifact's or cache's path as Concourse places it: joined onto the
/// working directory, so an absolute `/go/src/x` is `go/src/x` below it
/// (and `/` the directory itself).
fn under_work_dir(path: String) -> String {
    if !path.starts_with('/') {
        return path;
    }
    match path.trim_start_matches('/') {
        "" => ".".to_string(),
        rest => rest.to_string(),
    }
}

/// A relative path with no `..`: returns it normalised (no `.` components,
/// no repeated or trailing `/`), which may be empty for `.`. `what` is what
/// the path places, for the message about an absolute path.
fn check_relative_path_of(path: &str, what: &str) -> Result<String, String> {
    if path.is_empty() {
        return Err("must not be empty".into());
    }
    if path.chars().any(char::is_control) {
        return Err(format!(
            "{:?} must not contain control characters",
            shorten(path)
        ));
    }
    if path.starts_with('/') {
        return Err(format!(
            "{:?} is absolute: hangar places {what} only below the task's working directory, \
             so the path must be relative to it (Concourse would use the absolute path as it \
             is; a process task has no container of its own, where that path would be the \
             worker's)",
            shorten(path)
        ));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            ".." => {
                return Err(format!(
                    "{:?} must not contain \"..\": Concourse silently deletes every \"..\" \
                     from a path (so \"../x\" would be \"x\"), hangar refuses so a path means \
                     what it says",
                    shorten(path)
                ))
            }
            "" | "." => {}
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

/// An input's, output's or cache's path (an absolute one was made relative
/// by [`under_work_dir`] when the config was read).
fn check_relative_path(path: &str) -> Result<String, String> {
    check_relative_path_of(path, "artifacts and caches")
}

/// `run.dir`: a relative path with no `..`; `.` is the working directory.
fn check_dir_path(path: &str) -> Result<String, String> {
    check_relative_path_of(path, "the task's working directory")
}

/// An input, output or cache path: relative, no `..`, and naming a directory
/// below the working directory (not `.` itself).
/// A cache's path: below the working directory, not the directory itself
/// (an input or output may be at `.`, as in Concourse: the working
/// directory is then that artifact, the others mounted inside it).
fn check_cache_path(path: &str) -> Result<String, String> {
    let normal = check_relative_path(path)?;
    if normal.is_empty() {
        return Err(format!(
            "{path:?} must name a directory below the working directory: a cache at the \
             working directory itself would keep every input and output inside it"
        ));
    }
    Ok(normal)
}

/// Why a task config was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskConfigError {
    place: Place,
    message: String,
}

/// Where in the document a [`TaskConfigError`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The document as a whole (too large, empty, …).
    Document,
    /// A field, as a path: `run.path`, `inputs[1].name`.
    Field(String),
    /// A position in the text, for YAML syntax errors (1-based).
    Position { line: usize, column: usize },
}

impl TaskConfigError {
    fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        let field = field.into();
        let place = if field.is_empty() || field == "." {
            Place::Document
        } else {
            Place::Field(field)
        };
        TaskConfigError {
            place,
            message: message.into(),
        }
    }

    pub(crate) fn document(message: impl Into<String>) -> Self {
        TaskConfigError {
            place: Place::Document,
            message: message.into(),
        }
    }

    pub fn place(&self) -> &Place {
        &self.place
    }

    /// The field path the error is about, when it is about one.
    pub fn field_path(&self) -> Option<&str> {
        match &self.place {
            Place::Field(f) => Some(f),
            _ => None,
        }
    }

    /// What is wrong, without the place.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for TaskConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("task config: ")?;
        match &self.place {
            Place::Document => {}
            Place::Field(field) => write!(f, "{field}: ")?,
            Place::Position { line, column } => write!(f, "line {line} column {column}: ")?,
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for TaskConfigError {}

/// Parses and validates a task config from its YAML (or JSON) text.
pub fn parse_task_config(yaml: &str) -> Result<TaskConfig, TaskConfigError> {
    if yaml.len() > MAX_CONFIG_BYTES {
        return Err(TaskConfigError::document(format!(
            "the document is {} bytes, more than the limit of {MAX_CONFIG_BYTES}",
            yaml.len()
        )));
    }
    let value = crate::yaml::from_str(yaml).map_err(|e| TaskConfigError {
        place: match e.position {
            Some((line, column)) => Place::Position { line, column },
            None => Place::Document,
        },
        message: e.message,
    })?;
    parse_task_value(value)
}

/// Parses and validates a task config already read into a value (a plan's
/// JSON, or YAML read by [`crate::yaml::from_str`] and interpolated).
pub fn parse_task_value(value: serde_json::Value) -> Result<TaskConfig, TaskConfigError> {
    if value.is_null() {
        return Err(TaskConfigError::document("the document is empty"));
    }
    refuse_lists_for_mappings(&value)?;
    let mut config: TaskConfig = serde_path_to_error::deserialize(value).map_err(|e| {
        let message = e.inner().to_string();
        let segments: Vec<_> = e.path().iter().collect();
        // An unknown field's path ends with the unknown key itself: the
        // error is about the mapping that holds it.
        let segments = match segments.split_last() {
            Some((serde_path_to_error::Segment::Map { .. }, parent))
                if message.starts_with("unknown field `") =>
            {
                parent
            }
            _ => &segments[..],
        };
        tidy_serde_error(&render_path(segments), &message)
    })?;
    config.normalise();
    config.validate()?;
    Ok(config)
}

/// Refuses a list where a mapping belongs, as Concourse's JSON reader does:
/// serde would read a list into a struct field by field, so that `run:
/// [echo]` would run `echo`.
fn refuse_lists_for_mappings(value: &serde_json::Value) -> Result<(), TaskConfigError> {
    use serde_json::Value;
    let refuse = |path: String, expected: &str| {
        Err(TaskConfigError::field(
            path,
            format!("invalid type: sequence, expected a mapping{expected}"),
        ))
    };
    if value.is_array() {
        return refuse(".".into(), " (the task config)");
    }
    for (field, expected) in [
        ("run", " (path, args, dir, user)"),
        (
            "image_resource",
            " (type, source, params, version, name, tags)",
        ),
        ("container_limits", " (memory, cpu)"),
    ] {
        if value.get(field).is_some_and(Value::is_array) {
            return refuse(field.into(), expected);
        }
    }
    for (field, expected) in [
        ("inputs", " (name, path, optional)"),
        ("outputs", " (name, path)"),
        ("caches", " (path, ttl)"),
    ] {
        if let Some(Value::Array(items)) = value.get(field) {
            if let Some(i) = items.iter().position(Value::is_array) {
                return refuse(format!("{field}[{i}]"), expected);
            }
        }
    }
    Ok(())
}

/// A field path as serde_path_to_error writes one (`inputs[1].name`), `.`
/// for the top.
fn render_path(segments: &[&serde_path_to_error::Segment]) -> String {
    use serde_path_to_error::Segment;
    let mut path = String::new();
    for segment in segments {
        if !path.is_empty() && !matches!(segment, Segment::Seq { .. }) {
            path.push('.');
        }
        path.push_str(&segment.to_string());
    }
    if path.is_empty() {
        path.push('.');
    }
    path
}

/// Rewrites serde's messages into this module's style: field names are not
/// quoted with backticks, the field a `missing field` is about goes into the
/// path, and YAML's null is called null.
fn tidy_serde_error(path: &str, message: &str) -> TaskConfigError {
    let join = |name: &str| {
        if path == "." {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    if let Some(name) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        return TaskConfigError::field(join(name), "missing field");
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        // The expected list is last and made of our own field names, so the
        // last separator is the real one even if the unknown name holds one.
        let split = ["`, expected ", "`, there are no fields"]
            .iter()
            .filter_map(|sep| rest.rfind(sep))
            .max();
        if let Some(at) = split {
            let name = &rest[..at];
            let unknown = shorten(name);
            let tail = rest[at + 1..].replace('`', "");
            let why = match (path, name) {
                (".", "attempts" | "privileged") => format!(
                    " ({name} is a field of the task step in Concourse, not of its config: put \
                     it on the step)"
                ),
                // Concourse refuses an unknown field at the top, as hangar does.
                (".", _) => String::new(),
                _ => " (Concourse ignores an unknown field below the top level; hangar refuses \
                      it so a misspelt field is not silently dropped)"
                    .into(),
            };
            return TaskConfigError::field(path, format!("unknown field {unknown:?}{tail}{why}"));
        }
    }
    let message = message.replace("invalid type: unit value", "invalid type: null");
    TaskConfigError::field(path, message)
}

fn deserialize_params<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct ParamsVisitor;

    impl<'de> Visitor<'de> for ParamsVisitor {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a mapping of names to values")
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut params = BTreeMap::new();
            // next_entry goes through the path-tracking wrapper, so an error
            // in a value is reported as `params.NAME`.
            while let Some((key, value)) = map.next_entry::<String, serde_json::Value>()? {
                params.insert(key, param_text(&value));
            }
            Ok(params)
        }
    }

    deserializer.deserialize_any(ParamsVisitor)
}

/// A param's value as the task's environment gets it, by Concourse's rule
/// (`CoercedString`): a string as it is, a number as Go writes it, null as
/// the empty string, anything else as Go's JSON of it.
pub fn param_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        serde_json::Value::Number(n) => crate::yaml::go_number_text(n),
        other => crate::yaml::go_json(other),
    }
}

/// `container_limits.cpu`: a number, cut to its whole part as Concourse
/// does; null is no limit.
fn deserialize_cpu<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    struct CpuVisitor;

    impl Visitor<'_> for CpuVisitor {
        type Value = Option<u64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number of CPU shares")
        }

        fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
            Ok(None)
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<u64>, E> {
            Ok(Some(v))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<u64>, E> {
            u64::try_from(v)
                .map(Some)
                .map_err(|_| E::custom(format!("{v} is negative")))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<u64>, E> {
            if v < 0.0 || !v.is_finite() || v >= u64::MAX as f64 {
                return Err(E::custom(format!("{v} is not a number of CPU shares")));
            }
            Ok(Some(v.trunc() as u64))
        }
    }

    deserializer.deserialize_any(CpuVisitor)
}

/// Go's `time.ParseDuration`: a sequence of decimal numbers with units
/// (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), such as `1h30m` or `1.5s`; `0`
/// alone; a sign in front.
pub fn parse_go_duration(text: &str) -> Result<std::time::Duration, String> {
    let bad = || {
        format!(
            "{:?} is not a duration (a number with a unit ns, us, ms, s, m or h, such as \
             \"24h\" or \"1h30m\")",
            shorten(text)
        )
    };
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(number_end);
        if number.is_empty() || number == "." {
            return Err(bad());
        }
        let value: f64 = number.parse().map_err(|_| bad())?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        nanos += value * scale;
        rest = next;
    }
    if negative && nanos > 0.0 {
        return Ok(std::time::Duration::ZERO);
    }
    if nanos > u64::MAX as f64 {
        return Err(format!("{:?} is too long", shorten(text)));
    }
    Ok(std::time::Duration::from_nanos(nanos as u64))
}

impl Serialize for MemoryLimit {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for MemoryLimit {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MemoryVisitor;

        impl Visitor<'_> for MemoryVisitor {
            type Value = MemoryLimit;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of bytes or a size like \"512MB\"")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<MemoryLimit, E> {
                Ok(MemoryLimit(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MemoryLimit, E> {
                u64::try_from(v)
                    .map(MemoryLimit)
                    .map_err(|_| E::custom(format!("{v} is negative")))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<MemoryLimit, E> {
                // Concourse reads a number as a float and cuts it.
                if v < 0.0 || !v.is_finite() || v >= u64::MAX as f64 {
                    return Err(E::custom(format!("{v} is not a number of bytes")));
                }
                Ok(MemoryLimit(v.trunc() as u64))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<MemoryLimit, E> {
                parse_memory_size(v).map(MemoryLimit).map_err(E::custom)
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<MemoryLimit, E> {
                Err(E::custom(format!(
                    "{v} is not a memory size (Concourse would read it as no limit; hangar \
                     refuses it so a limit is never silently dropped)"
                )))
            }
        }

        deserializer.deserialize_any(MemoryVisitor)
    }
}

/// Parses a memory size as Concourse does (`atc.ParseMemoryLimit`): a whole
/// number of bytes, or one followed by the unit `K`, `M` or `G` in any case,
/// optionally followed by `i` and/or `B` (`512MB`, `1GiB`, `64k`, `1Gi`);
/// every unit is a power of 1024. Anything else is refused, as Concourse
/// refuses it: `T`, a fraction, a space, a sign, `B` alone. A size beyond
/// 2^64 - 1 bytes is refused too (Concourse's arithmetic would wrap it
/// round to a small limit).
pub fn parse_memory_size(text: &str) -> Result<u64, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    let lower = unit.to_ascii_lowercase();
    let power = match lower.as_str() {
        "" => Some(0),
        "k" | "kb" | "ki" | "kib" => Some(1),
        "m" | "mb" | "mi" | "mib" => Some(2),
        "g" | "gb" | "gi" | "gib" => Some(3),
        _ => None,
    };
    let (Some(power), false) = (power, digits.is_empty()) else {
        let hint = if lower.starts_with(['t', 'p']) && !digits.is_empty() {
            " (Concourse has no T or P: 1024G is 1T)"
        } else if lower.starts_with('.') && !digits.is_empty() {
            " (no fractions: 1536M is 1.5G)"
        } else if lower.starts_with(' ') {
            " (no space before the unit)"
        } else {
            ""
        };
        return Err(format!(
            "{:?} is not a memory size: Concourse takes a whole number of bytes, or one with the \
             unit K, M or G in any case, optionally followed by i and/or B, all powers of 1024 \
             (\"512MB\", \"1GiB\", \"64k\"){hint}",
            shorten(text)
        ));
    };
    let too_large = || format!("{:?} is too large", shorten(text));
    let value: u64 = digits.parse().map_err(|_| too_large())?;
    value
        .checked_mul(1u64 << (10 * power))
        .ok_or_else(too_large)
}

#[cfg(test)]
mod tests;
