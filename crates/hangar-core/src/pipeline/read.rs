//! Reading a config's value into [`PipelineConfig`]: the shape of every
//! field, with every problem collected rather than the first one returned.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::names::show;
use super::{
    BuildLogRetention, CheckEvery, ConfigError, ConfigWarning, Display, GoDuration, Group, Job,
    PipelineConfig, Resource, ResourceType, VarSource, MAX_GROUPS, MAX_JOBS, MAX_RESOURCES,
    MAX_VAR_SOURCES,
};
use crate::resource_types::MAX_RESOURCE_TYPES;

/// What reading found.
pub(super) struct Read {
    pub(super) config: PipelineConfig,
    pub(super) errors: Vec<ConfigError>,
    pub(super) warnings: Vec<ConfigWarning>,
}

#[derive(Default)]
pub(super) struct Reader {
    pub(super) errors: Vec<ConfigError>,
    pub(super) warnings: Vec<ConfigWarning>,
    pub(super) step_count: usize,
}

/// How a value's kind is named in messages.
pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

pub(super) fn read_config(value: &Value) -> Read {
    let mut r = Reader::default();
    let mut config = PipelineConfig::default();
    match value {
        Value::Object(obj) => {
            // Concourse reads the known top-level keys and drops the rest,
            // which is where pipelines keep their YAML anchors.
            if obj.contains_key("prototypes") {
                r.err(
                    "prototypes",
                    "not supported: prototypes are experimental in Concourse and hangar has none",
                );
            }
            config.groups = r.section(obj, "groups", MAX_GROUPS, Reader::group);
            config.var_sources = r.section(obj, "var_sources", MAX_VAR_SOURCES, Reader::var_source);
            config.resources = r.section(obj, "resources", MAX_RESOURCES, Reader::resource);
            config.resource_types = r.section(
                obj,
                "resource_types",
                MAX_RESOURCE_TYPES,
                Reader::resource_type,
            );
            config.jobs = r.section(obj, "jobs", MAX_JOBS, Reader::job);
            config.display = match obj.get("display") {
                None | Some(Value::Null) => None,
                Some(v) => r.display(v),
            };
            config.user_data = obj.get("user_data").filter(|v| !v.is_null()).cloned();
        }
        Value::Null => {}
        other => r.err(
            "",
            format!(
                "expected a pipeline config (a mapping), got {}",
                kind(other)
            ),
        ),
    }
    Read {
        config,
        errors: r.errors,
        warnings: r.warnings,
    }
}

impl Reader {
    pub(super) fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn section<T>(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        max: usize,
        item: fn(&mut Reader, &Map<String, Value>, &str) -> Option<T>,
    ) -> Vec<T> {
        let items = match obj.get(key) {
            None | Some(Value::Null) => return vec![],
            Some(Value::Array(items)) => items,
            Some(other) => {
                self.err(key, format!("expected a list, got {}", kind(other)));
                return vec![];
            }
        };
        if items.len() > max {
            self.err(
                key,
                format!(
                    "{} entries, more than the limit of {max} (Concourse has no limit)",
                    items.len()
                ),
            );
            return vec![];
        }
        let mut out = Vec::with_capacity(items.len());
        for (i, v) in items.iter().enumerate() {
            let index_at = format!("{key}[{i}]");
            let Some(o) = self.object(v, &index_at, "a mapping") else {
                continue;
            };
            // Named like Concourse's locations: by name when it has one.
            let at = match o.get("name") {
                Some(Value::String(n)) if !n.is_empty() => format!("{key}.{}", show(n)),
                _ => index_at,
            };
            if let Some(t) = item(self, o, &at) {
                out.push(t);
            }
        }
        out
    }

    pub(super) fn object<'v>(
        &mut self,
        v: &'v Value,
        at: &str,
        what: &str,
    ) -> Option<&'v Map<String, Value>> {
        match v {
            Value::Object(o) => Some(o),
            other => {
                self.err(at, format!("expected {what}, got {}", kind(other)));
                None
            }
        }
    }

    pub(super) fn unknown_fields(&mut self, obj: &Map<String, Value>, allowed: &[&str], at: &str) {
        for k in obj.keys().filter(|k| !allowed.contains(&k.as_str())) {
            self.err(at, format!("unknown field \"{}\"", show(k)));
        }
    }

    /// A string field; absent and null are None.
    pub(super) fn string(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Option<String> {
        match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.err(
                    format!("{at}.{key}"),
                    format!("expected a string, got {}", kind(other)),
                );
                None
            }
        }
    }

    fn required(&mut self, obj: &Map<String, Value>, key: &str, at: &str, missing: &str) -> String {
        match self.string(obj, key, at) {
            Some(s) if !s.is_empty() => s,
            Some(_) | None => {
                if !matches!(obj.get(key), Some(v) if !v.is_string() && !v.is_null()) {
                    self.err(at, missing);
                }
                String::new()
            }
        }
    }

    pub(super) fn boolean(&mut self, obj: &Map<String, Value>, key: &str, at: &str) -> bool {
        match obj.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.err(
                    format!("{at}.{key}"),
                    format!("expected true or false, got {}", kind(other)),
                );
                false
            }
        }
    }

    /// A whole number that may be negative, for the fields whose negative
    /// values Concourse refuses in words of its own.
    fn integer(&mut self, obj: &Map<String, Value>, key: &str, at: &str) -> Option<i64> {
        match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_i64() {
                Some(n) if i32::try_from(n).is_ok() => Some(n),
                _ => {
                    self.err(
                        format!("{at}.{key}"),
                        format!("expected a whole number, got {}", describe(v)),
                    );
                    None
                }
            },
        }
    }

    /// A whole number, 0 or more.
    pub(super) fn count(&mut self, obj: &Map<String, Value>, key: &str, at: &str) -> Option<u32> {
        let n = self.integer(obj, key, at)?;
        match u32::try_from(n) {
            Ok(n) => Some(n),
            Err(_) => {
                self.err(format!("{at}.{key}"), format!("{n} is negative"));
                None
            }
        }
    }

    pub(super) fn map(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Option<Map<String, Value>> {
        match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m.clone()),
            Some(other) => {
                self.err(
                    format!("{at}.{key}"),
                    format!("expected a mapping, got {}", kind(other)),
                );
                None
            }
        }
    }

    pub(super) fn string_map(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        at: &str,
    ) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (k, v) in self.map(obj, key, at).unwrap_or_default() {
            match v {
                Value::String(s) => {
                    out.insert(k, s);
                }
                other => self.err(
                    format!("{at}.{key}.{}", show(&k)),
                    format!("expected a string, got {}", kind(&other)),
                ),
            }
        }
        out
    }

    pub(super) fn strings(&mut self, obj: &Map<String, Value>, key: &str, at: &str) -> Vec<String> {
        match obj.get(key) {
            None | Some(Value::Null) => vec![],
            Some(Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(s) => out.push(s.clone()),
                        other => self.err(
                            format!("{at}.{key}[{i}]"),
                            format!("expected a string, got {}", kind(other)),
                        ),
                    }
                }
                out
            }
            Some(other) => {
                self.err(
                    format!("{at}.{key}"),
                    format!("expected a list of strings, got {}", kind(other)),
                );
                vec![]
            }
        }
    }

    /// Worker tags: labels, as a build's are.
    pub(super) fn labels(&mut self, obj: &Map<String, Value>, key: &str, at: &str) -> Vec<String> {
        let tags = self.strings(obj, key, at);
        for (i, t) in tags.iter().enumerate() {
            if let Err(e) = crate::names::validate_label(t) {
                self.err(format!("{at}.{key}[{i}]"), e.to_string());
            }
        }
        tags
    }

    fn label(&mut self, value: &str, field: &str, at: &str) {
        if !value.is_empty() {
            if let Err(e) = crate::names::validate_label(value) {
                self.err(format!("{at}.{field}"), e.to_string());
            }
        }
    }

    fn duration(&mut self, obj: &Map<String, Value>, key: &str, at: &str) -> Option<GoDuration> {
        let text = self.string(obj, key, at)?;
        match GoDuration::parse(&text) {
            Ok(d) => Some(d),
            Err(e) => {
                self.err(format!("{at}.{key}"), e);
                None
            }
        }
    }

    fn check_every(&mut self, obj: &Map<String, Value>, at: &str) -> Option<CheckEvery> {
        match obj.get("check_every") {
            Some(Value::String(s)) if s == "never" => Some(CheckEvery::Never),
            Some(Value::String(s)) if s.is_empty() => None,
            _ => self
                .duration(obj, "check_every", at)
                .map(CheckEvery::Interval),
        }
    }

    /// A version's values are strings, as Concourse requires.
    pub(super) fn version_values(&mut self, version: &Map<String, Value>, at: &str) {
        for (k, v) in version {
            if !v.is_string() {
                self.err(
                    format!("{at}.{}", show(k)),
                    format!("the value of a version is a string, got {}", kind(v)),
                );
            }
        }
    }

    fn group(&mut self, obj: &Map<String, Value>, at: &str) -> Option<Group> {
        self.unknown_fields(obj, &["name", "jobs", "resources"], at);
        Some(Group {
            name: self.required(obj, "name", at, "has no name"),
            jobs: self.strings(obj, "jobs", at),
            resources: self.strings(obj, "resources", at),
        })
    }

    fn var_source(&mut self, obj: &Map<String, Value>, at: &str) -> Option<VarSource> {
        self.unknown_fields(obj, &["name", "type", "config"], at);
        Some(VarSource {
            name: self.required(obj, "name", at, "has no name"),
            source_type: self.required(obj, "type", at, "has no type"),
            config: obj.get("config").cloned().unwrap_or(Value::Null),
        })
    }

    fn resource(&mut self, obj: &Map<String, Value>, at: &str) -> Option<Resource> {
        self.unknown_fields(
            obj,
            &[
                "name",
                "old_name",
                "public",
                "webhook_token",
                "type",
                "source",
                "check_every",
                "check_timeout",
                "tags",
                "version",
                "icon",
                "expose_build_created_by",
            ],
            at,
        );
        let version = self.map(obj, "version", at);
        if let Some(v) = &version {
            self.version_values(v, &format!("{at}.version"));
        }
        let resource = Resource {
            name: self.required(obj, "name", at, "has no name"),
            old_name: self.string(obj, "old_name", at),
            public: self.boolean(obj, "public", at),
            webhook_token: self.string(obj, "webhook_token", at),
            resource_type: self.required(obj, "type", at, "has no type"),
            source: self.map(obj, "source", at).unwrap_or_default(),
            check_every: self.check_every(obj, at),
            check_timeout: self.duration(obj, "check_timeout", at),
            tags: self.labels(obj, "tags", at),
            version,
            icon: self.string(obj, "icon", at),
            expose_build_created_by: self.boolean(obj, "expose_build_created_by", at),
        };
        self.label(&resource.resource_type, "type", at);
        Some(resource)
    }

    fn resource_type(&mut self, obj: &Map<String, Value>, at: &str) -> Option<ResourceType> {
        self.unknown_fields(
            obj,
            &[
                "name",
                "type",
                "source",
                "defaults",
                "privileged",
                "check_every",
                "tags",
                "params",
            ],
            at,
        );
        let t = ResourceType {
            name: self.required(obj, "name", at, "has no name"),
            resource_type: self.required(obj, "type", at, "has no type"),
            source: self.map(obj, "source", at).unwrap_or_default(),
            defaults: self.map(obj, "defaults", at),
            privileged: self.boolean(obj, "privileged", at),
            check_every: self.check_every(obj, at),
            tags: self.labels(obj, "tags", at),
            params: self.map(obj, "params", at),
        };
        self.label(&t.name, "name", at);
        self.label(&t.resource_type, "type", at);
        Some(t)
    }

    fn job(&mut self, obj: &Map<String, Value>, at: &str) -> Option<Job> {
        self.unknown_fields(
            obj,
            &[
                "name",
                "old_name",
                "public",
                "disable_manual_trigger",
                "disable_reruns",
                "serial",
                "interruptible",
                "serial_groups",
                "max_in_flight",
                "tags",
                "build_logs_to_retain",
                "build_log_retention",
                "on_success",
                "on_failure",
                "on_abort",
                "on_error",
                "ensure",
                "plan",
            ],
            at,
        );
        let name = self.required(obj, "name", at, "has no name");
        let build_logs_to_retain = match self.integer(obj, "build_logs_to_retain", at) {
            Some(n) if n < 0 => {
                self.err(at, format!("has negative build_logs_to_retain: {n}"));
                None
            }
            Some(0) | None => None,
            Some(n) => u32::try_from(n).ok(),
        };
        let build_log_retention = match obj.get("build_log_retention") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let here = format!("{at}.build_log_retention");
                let o = self.object(
                    v,
                    &here,
                    "a mapping (builds, days, minimum_succeeded_builds)",
                )?;
                self.unknown_fields(o, &["builds", "minimum_succeeded_builds", "days"], &here);
                let field = |r: &mut Reader, key: &str| match r.integer(o, key, &here) {
                    Some(n) if n < 0 => {
                        r.err(at, format!("has negative build_log_retention.{key}: {n}"));
                        0
                    }
                    Some(n) => u32::try_from(n).unwrap_or(0),
                    None => 0,
                };
                Some(BuildLogRetention {
                    builds: field(self, "builds"),
                    minimum_succeeded_builds: field(self, "minimum_succeeded_builds"),
                    days: field(self, "days"),
                })
            }
        };
        let plan_at = format!("{at}.plan");
        let plan = match obj.get("plan") {
            None | Some(Value::Null) => vec![],
            Some(v) => self.steps(v, &format!("{plan_at}.do"), 1),
        };
        let hook = |r: &mut Reader, key: &str| {
            obj.get(key)
                .filter(|v| !v.is_null())
                .and_then(|v| r.step(v, &format!("{plan_at}.{key}"), 1))
                .map(Box::new)
        };
        Some(Job {
            old_name: self.string(obj, "old_name", at),
            public: self.boolean(obj, "public", at),
            disable_manual_trigger: self.boolean(obj, "disable_manual_trigger", at),
            disable_reruns: self.boolean(obj, "disable_reruns", at),
            serial: self.boolean(obj, "serial", at),
            interruptible: self.boolean(obj, "interruptible", at),
            serial_groups: self.strings(obj, "serial_groups", at),
            max_in_flight: self.count(obj, "max_in_flight", at).filter(|n| *n != 0),
            tags: self.labels(obj, "tags", at),
            build_logs_to_retain,
            build_log_retention,
            on_success: hook(self, "on_success"),
            on_failure: hook(self, "on_failure"),
            on_abort: hook(self, "on_abort"),
            on_error: hook(self, "on_error"),
            ensure: hook(self, "ensure"),
            plan,
            name,
        })
    }

    fn display(&mut self, v: &Value) -> Option<Display> {
        let o = self.object(
            v,
            "display",
            "a mapping (background_image, background_filter)",
        )?;
        self.unknown_fields(o, &["background_image", "background_filter"], "display");
        Some(Display {
            background_image: self.string(o, "background_image", "display"),
            background_filter: self.string(o, "background_filter", "display"),
        })
    }
}

/// A value named for a message: numbers as they are, other kinds by kind.
fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        other => kind(other).to_string(),
    }
}
