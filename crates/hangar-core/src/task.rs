//! A task's config: Concourse's task config format
//! (<https://concourse-ci.org/tasks.html>), parsed from YAML and validated.
//!
//! Parsing happens in two passes. The first reads the YAML into a generic
//! value while counting every value it builds, so a document that expands
//! through aliases (a "billion laughs") is refused after a bounded amount of
//! work. The second maps that value onto [`TaskConfig`] with the path of every
//! field tracked, so errors say where they are (`run.path: missing field`).
//! Then [`TaskConfig::validate`] checks the rules serde cannot express.
//!
//! hangar's one extension is `attempts`: how many times a task is tried when
//! the infrastructure (not the task's own command) fails.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// The largest task config accepted, in bytes, checked before parsing.
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;

/// The most values (scalars, sequences and mappings, map keys included) a
/// document may hold once its aliases are expanded.
pub const MAX_CONFIG_VALUES: usize = 100_000;

/// The largest memory limit accepted: 1 TiB.
pub const MAX_MEMORY_BYTES: u64 = 1 << 40;

/// How many times a task is tried when `attempts` is not given.
pub const DEFAULT_ATTEMPTS: u32 = 3;

/// The most attempts a task may ask for.
pub const MAX_ATTEMPTS: u32 = 10;

/// The longest input or output name.
pub const MAX_ARTIFACT_NAME_LEN: usize = 63;

/// A task's config, as Concourse defines it, plus `attempts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (the task config)")]
pub struct TaskConfig {
    /// The platform the task runs on (`linux`, …): only workers of that
    /// platform are chosen.
    pub platform: String,
    /// The image the task runs in, as a resource. Parsed and kept; hangar runs
    /// tasks only from a rootfs path (`rootfs_uri`) for now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_resource: Option<ImageResource>,
    /// The task's root filesystem: a path on the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<TaskInput>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<TaskOutput>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caches: Vec<TaskCache>,
    /// Environment variables for the task. Numbers and booleans in the YAML
    /// become their text (`true`, `42`, `1.5`).
    #[serde(
        default,
        deserialize_with = "deserialize_params",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub params: BTreeMap<String, String>,
    pub run: RunConfig,
    #[serde(default, skip_serializing_if = "ContainerLimits::is_empty")]
    pub container_limits: ContainerLimits,
    /// hangar's extension: infrastructure retries, 1 to 10.
    #[serde(default = "default_attempts")]
    pub attempts: u32,
}

fn default_attempts() -> u32 {
    DEFAULT_ATTEMPTS
}

/// `image_resource`: the resource that provides the task's image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping (type, source, params, version)"
)]
pub struct ImageResource {
    #[serde(rename = "type")]
    pub type_name: String,
    pub source: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<BTreeMap<String, String>>,
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
#[serde(deny_unknown_fields, expecting = "a mapping (path)")]
pub struct TaskCache {
    pub path: String,
}

/// The command the task runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (path, args, dir, user)")]
pub struct RunConfig {
    pub path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// The working directory, relative to the task's build directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// `container_limits`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping (memory, cpu)")]
pub struct ContainerLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryLimit>,
    /// CPU shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u64>,
}

impl ContainerLimits {
    pub fn is_empty(&self) -> bool {
        self.memory.is_none() && self.cpu.is_none()
    }
}

/// A memory limit in bytes. In YAML: an integer of bytes, or a string with a
/// unit (`"512MB"`, `"1GiB"`, `"1G"`, `"1.5g"`). As in Concourse, every unit
/// is a power of 1024 whether or not it is written with an `i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MemoryLimit(pub u64);

fn is_false(b: &bool) -> bool {
    !*b
}

impl TaskConfig {
    /// The path of the input `name` (its `path`, or its name), or `None`
    /// when the task has no such input.
    pub fn input_path(&self, name: &str) -> Option<&str> {
        self.inputs
            .iter()
            .find(|i| i.name == name)
            .map(|i| i.path.as_deref().unwrap_or(&i.name))
    }

    /// The path of the output `name` (its `path`, or its name).
    pub fn output_path(&self, name: &str) -> Option<&str> {
        self.outputs
            .iter()
            .find(|o| o.name == name)
            .map(|o| o.path.as_deref().unwrap_or(&o.name))
    }

    /// The memory limit in bytes, when one is set.
    pub fn memory_limit_bytes(&self) -> Option<u64> {
        self.container_limits.memory.map(|m| m.0)
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
        }
        if let Some(uri) = &self.rootfs_uri {
            if uri.is_empty() {
                return fail("rootfs_uri".into(), "must not be empty".into());
            }
            if uri.chars().any(char::is_control) {
                return fail(
                    "rootfs_uri".into(),
                    "must not contain control characters".into(),
                );
            }
        }

        // Names are unique across inputs and outputs; paths across inputs,
        // outputs and caches. Each map remembers who took the key first.
        let mut names: HashMap<&str, String> = HashMap::new();
        let mut paths: HashMap<String, String> = HashMap::new();
        let mut claim_path = |field: String, owner: String, path: &str| {
            let normal =
                check_artifact_path(path).map_err(|m| TaskConfigError::field(&field, m))?;
            if let Some(first) = paths.get(&normal) {
                return Err(TaskConfigError::field(
                    field,
                    format!("{:?} is already the path of {first}", shorten(path)),
                ));
            }
            paths.insert(normal, owner);
            Ok(())
        };
        let artifacts = self
            .inputs
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("inputs[{i}]"), &a.name, &a.path))
            .chain(
                self.outputs
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (format!("outputs[{i}]"), &a.name, &a.path)),
            );
        for (owner, name, path) in artifacts {
            if !is_valid_artifact_name(name) {
                return fail(
                    format!("{owner}.name"),
                    format!(
                        "{:?} is not a valid name (1 to {MAX_ARTIFACT_NAME_LEN} letters, digits, \
                         '_', '.' or '-', starting with a letter or digit)",
                        shorten(name)
                    ),
                );
            }
            if let Some(first) = names.get(name.as_str()) {
                return fail(
                    format!("{owner}.name"),
                    format!("{name:?} is already the name of {first}"),
                );
            }
            names.insert(name, owner.clone());
            match path {
                Some(path) => claim_path(format!("{owner}.path"), owner, path)?,
                // The name stands in for the path: a valid name is a valid
                // path, but it may clash with another artifact's path.
                None => claim_path(format!("{owner}.name"), owner, name)?,
            }
        }
        for (i, cache) in self.caches.iter().enumerate() {
            claim_path(
                format!("caches[{i}].path"),
                format!("caches[{i}]"),
                &cache.path,
            )?;
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

        if self.run.path.trim().is_empty() {
            return fail("run.path".into(), "must not be empty".into());
        }
        if self.run.path.contains('\0') || self.run.args.iter().any(|a| a.contains('\0')) {
            return fail(
                "run".into(),
                "path and args must not contain a NUL character".into(),
            );
        }
        if let Some(dir) = &self.run.dir {
            if let Err(message) = check_relative_path(dir) {
                return fail("run.dir".into(), message);
            }
        }
        if let Some(user) = &self.run.user {
            if let Err(message) = crate::users::parse_user(user) {
                return fail("run.user".into(), message);
            }
        }

        if let Some(MemoryLimit(bytes)) = self.container_limits.memory {
            if bytes == 0 {
                return fail(
                    "container_limits.memory".into(),
                    "must be greater than 0 (leave it out for no limit)".into(),
                );
            }
            if bytes > MAX_MEMORY_BYTES {
                return fail(
                    "container_limits.memory".into(),
                    format!("{bytes} bytes is more than the limit of 1 TiB"),
                );
            }
        }

        if !(1..=MAX_ATTEMPTS).contains(&self.attempts) {
            return fail(
                "attempts".into(),
                format!("{} is out of range (1 to {MAX_ATTEMPTS})", self.attempts),
            );
        }
        Ok(())
    }
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

/// A relative path with no `..`: returns it normalised (no `.` components,
/// no repeated or trailing `/`), which may be empty for `.`.
fn check_relative_path(path: &str) -> Result<String, String> {
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
            "{:?} is absolute; it must be relative to the task's working directory",
            shorten(path)
        ));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            ".." => return Err(format!("{:?} must not contain \"..\"", shorten(path))),
            "" | "." => {}
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

/// An input, output or cache path: relative, no `..`, and naming a directory
/// below the working directory (not `.` itself).
fn check_artifact_path(path: &str) -> Result<String, String> {
    let normal = check_relative_path(path)?;
    if normal.is_empty() {
        return Err(format!(
            "{path:?} must name a directory below the working directory"
        ));
    }
    Ok(normal)
}

/// At most 64 characters of a hostile string, for messages.
fn shorten(s: &str) -> String {
    const MAX: usize = 64;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut short: String = s.chars().take(MAX).collect();
        short.push('…');
        short
    }
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

    fn document(message: impl Into<String>) -> Self {
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

/// Parses and validates a task config.
pub fn parse_task_config(yaml: &str) -> Result<TaskConfig, TaskConfigError> {
    if yaml.len() > MAX_CONFIG_BYTES {
        return Err(TaskConfigError::document(format!(
            "the document is {} bytes, more than the limit of {MAX_CONFIG_BYTES}",
            yaml.len()
        )));
    }
    let value = read_bounded_value(yaml)?;
    if value.is_null() {
        return Err(TaskConfigError::document("the document is empty"));
    }
    let config: TaskConfig = serde_path_to_error::deserialize(value).map_err(|e| {
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
    config.validate()?;
    Ok(config)
}

/// Pass one: the YAML as a generic value, refused past [`MAX_CONFIG_VALUES`].
fn read_bounded_value(yaml: &str) -> Result<serde_yaml::Value, TaskConfigError> {
    let budget = Budget {
        left: Cell::new(MAX_CONFIG_VALUES),
        refusal: RefCell::new(None),
    };
    let result = BoundedValue(&budget).deserialize(serde_yaml::Deserializer::from_str(yaml));
    result.map_err(|e| {
        // serde_yaml renders its own path and position into messages that
        // came from our visitor; ours are kept aside to be shown plainly.
        let ours = budget.refusal.borrow_mut().take();
        let position = e.location().map(|l| (l.line(), l.column()));
        let message = match ours {
            Some(message) => message,
            None => {
                let text = e.to_string();
                match position {
                    Some((line, column)) => text
                        .replacen(&format!(" at line {line} column {column}"), "", 1)
                        .to_string(),
                    None => text,
                }
            }
        };
        match position {
            Some((line, column)) => TaskConfigError {
                place: Place::Position { line, column },
                message,
            },
            None => TaskConfigError::document(message),
        }
    })
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
            let unknown = shorten(&rest[..at]);
            let tail = rest[at + 1..].replace('`', "");
            return TaskConfigError::field(path, format!("unknown field {unknown:?}{tail}"));
        }
    }
    let message = message.replace("invalid type: unit value", "invalid type: null");
    TaskConfigError::field(path, message)
}

struct Budget {
    left: Cell<usize>,
    refusal: RefCell<Option<String>>,
}

impl Budget {
    fn spend<E: de::Error>(&self) -> Result<(), E> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => self.refuse(format!(
                "the document holds more than {MAX_CONFIG_VALUES} values once its aliases \
                 are expanded"
            )),
        }
    }

    fn refuse<T, E: de::Error>(&self, message: String) -> Result<T, E> {
        let error = E::custom(&message);
        *self.refusal.borrow_mut() = Some(message);
        Err(error)
    }
}

/// Builds a `serde_yaml::Value`, spending one unit of the budget per value.
struct BoundedValue<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for BoundedValue<'_> {
    type Value = serde_yaml::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BoundedValue<'_> {
    type Value = serde_yaml::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        self.0.spend()?;
        Ok(serde_yaml::Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.0.spend()?;
        Ok(serde_yaml::Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        self.0.spend()?;
        Ok(serde_yaml::Value::Number(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Self::Value, E> {
        match i64::try_from(v) {
            Ok(v) => self.visit_i64(v),
            Err(_) => self.0.refuse(format!("the integer {v} is too large")),
        }
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Self::Value, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => self.0.refuse(format!("the integer {v} is too large")),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        self.0.spend()?;
        Ok(serde_yaml::Value::Number(v.into()))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        self.0.spend()?;
        Ok(serde_yaml::Value::String(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        self.0.spend()?;
        Ok(serde_yaml::Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.spend()?;
        Ok(serde_yaml::Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        self.0.spend()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(BoundedValue(self.0))? {
            items.push(item);
        }
        Ok(serde_yaml::Value::Sequence(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        self.0.spend()?;
        let mut mapping = serde_yaml::Mapping::new();
        while let Some(key) = map.next_key_seed(BoundedValue(self.0))? {
            if mapping.contains_key(&key) {
                let shown = match &key {
                    serde_yaml::Value::String(s) => format!("{:?}", shorten(s)),
                    _ => "(not a string)".into(),
                };
                return self
                    .0
                    .refuse(format!("the mapping here has the key {shown} twice"));
            }
            let value = map.next_value_seed(BoundedValue(self.0))?;
            mapping.insert(key, value);
        }
        Ok(serde_yaml::Value::Mapping(mapping))
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, _data: A) -> Result<Self::Value, A::Error> {
        self.0.refuse("YAML tags (!name) are not supported".into())
    }
}

fn deserialize_params<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct ParamsVisitor;

    impl<'de> Visitor<'de> for ParamsVisitor {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a mapping of names to strings, numbers or booleans")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut params = BTreeMap::new();
            // next_entry goes through the path-tracking wrapper, so an error
            // in a value is reported as `params.NAME`.
            while let Some((key, ParamValue(value))) = map.next_entry::<String, ParamValue>()? {
                params.insert(key, value);
            }
            Ok(params)
        }
    }

    deserializer.deserialize_map(ParamsVisitor)
}

/// One param: a scalar, kept as its text.
struct ParamValue(String);

impl<'de> Deserialize<'de> for ParamValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;

        const NESTED: &str =
            "nested values are not allowed: a param is a string, number or boolean";

        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = ParamValue;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<ParamValue, E> {
                Ok(ParamValue(v.to_string()))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<ParamValue, E> {
                Ok(ParamValue(v))
            }

            fn visit_unit<E: de::Error>(self) -> Result<ParamValue, E> {
                Err(E::custom("has no value: write \"\" for an empty string"))
            }

            fn visit_none<E: de::Error>(self) -> Result<ParamValue, E> {
                self.visit_unit()
            }

            fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<ParamValue, A::Error> {
                Err(de::Error::custom(NESTED))
            }

            fn visit_map<A: MapAccess<'de>>(self, _map: A) -> Result<ParamValue, A::Error> {
                Err(de::Error::custom(NESTED))
            }
        }

        deserializer.deserialize_any(ScalarVisitor)
    }
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

            fn visit_str<E: de::Error>(self, v: &str) -> Result<MemoryLimit, E> {
                parse_memory_size(v).map(MemoryLimit).map_err(E::custom)
            }
        }

        deserializer.deserialize_any(MemoryVisitor)
    }
}

/// Parses a memory size: digits with an optional fraction, an optional space,
/// then an optional unit `K`, `M`, `G`, `T` or `P` (any case, optionally
/// followed by `i` and/or `B`), or just `B`. Units are powers of 1024.
pub fn parse_memory_size(text: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "{:?} is not a memory size (bytes, or a number with a unit K, M, G or T, \
             e.g. \"512MB\" or \"1GiB\"; units are powers of 1024)",
            shorten(text)
        )
    };
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_end);
    let unit = match unit.strip_prefix(' ') {
        Some("") => return Err(bad()),
        Some(unit) => unit,
        None => unit,
    };
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    let digits_ok = |s: &str, max: usize| s.len() <= max && s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !digits_ok(whole, 20)
        || !digits_ok(fraction, 9)
        || (number.contains('.') && fraction.is_empty())
    {
        return Err(bad());
    }
    let lower = unit.to_ascii_lowercase();
    let (power, rest) = match lower.chars().next() {
        None => (0, ""),
        Some('k') => (1, &lower[1..]),
        Some('m') => (2, &lower[1..]),
        Some('g') => (3, &lower[1..]),
        Some('t') => (4, &lower[1..]),
        Some('p') => (5, &lower[1..]),
        Some('b') => (0, &lower[..]),
        Some(_) => return Err(bad()),
    };
    let rest_ok = match power {
        0 => matches!(rest, "" | "b"),
        _ => matches!(rest, "" | "b" | "i" | "ib"),
    };
    if !rest_ok {
        return Err(bad());
    }
    let multiplier: u128 = 1024u128.pow(power);
    let whole: u128 = whole.parse().map_err(|_| bad())?;
    let mut bytes = whole * multiplier;
    if !fraction.is_empty() {
        let numerator: u128 = fraction.parse().map_err(|_| bad())?;
        let denominator = 10u128.pow(fraction.len() as u32);
        bytes += numerator * multiplier / denominator;
    }
    u64::try_from(bytes).map_err(|_| format!("{:?} is too large", shorten(text)))
}

#[cfg(test)]
mod tests;
