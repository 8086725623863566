//! Steps that read a file of an artifact when they run, as Concourse's:
//! `load_var` (a local var from a file), a task's `file:` (its config read
//! from an artifact) and `set_pipeline` (a pipeline's config from a file).
//! What they read and how it is read is here, pure; the engine fetches the
//! bytes from the worker holding the artifact.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::pipeline::LoadVarFormat;
use crate::vars::{interpolate_leaving_undefined, Vars};

/// `artifact/path/in/it`: the first segment names an artifact of the
/// build, the rest is a path inside it (Concourse's `file` fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactFile {
    pub artifact: String,
    pub path: String,
}

impl ArtifactFile {
    /// Splits `text` as Concourse does (at the first `/`); both parts must
    /// be there. The path is checked again, and for good, by the worker.
    pub fn parse(text: &str) -> Result<ArtifactFile, String> {
        match text.split_once('/') {
            Some((artifact, path))
                if !artifact.is_empty() && !path.trim_matches('/').is_empty() =>
            {
                crate::names::validate_label(artifact)
                    .map_err(|e| format!("{text:?}: artifact {artifact:?}: {e}"))?;
                Ok(ArtifactFile {
                    artifact: artifact.to_string(),
                    path: path.to_string(),
                })
            }
            _ => Err(format!(
                "{text:?} does not say which artifact the file is in: expected \
                 ARTIFACT/path/to/file"
            )),
        }
    }
}

impl std::fmt::Display for ArtifactFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.artifact, self.path)
    }
}

/// Concourse's `load_var`: the file's content becomes the local var
/// `((.:NAME))` of the steps after it, redacted from the build's output
/// unless `reveal`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadVarStep {
    pub load_var: String,
    pub file: String,
    /// `json`, `yaml`, `yml`, `trim` or `raw`; absent: by the file's
    /// extension, else `trim`.
    #[serde(default)]
    pub format: Option<String>,
    #[serde(default)]
    pub reveal: bool,
}

/// A format by its name (a `format:` field, or a file's extension).
pub fn load_var_format(name: &str) -> Option<LoadVarFormat> {
    Some(match name {
        "json" => LoadVarFormat::Json,
        "yaml" => LoadVarFormat::Yaml,
        "yml" => LoadVarFormat::Yml,
        "trim" => LoadVarFormat::Trim,
        "raw" => LoadVarFormat::Raw,
        _ => return None,
    })
}

impl LoadVarStep {
    /// The file, checked when the plan is read.
    pub fn artifact_file(&self) -> Result<ArtifactFile, String> {
        ArtifactFile::parse(&self.file)
    }

    /// The format the file is read in: the one given, else the one its
    /// extension names, else `trim` (Concourse's `fileFormat`).
    pub fn format(&self) -> Result<LoadVarFormat, String> {
        if let Some(f) = &self.format {
            return load_var_format(f)
                .ok_or_else(|| format!("format: {f:?} is not one of json, yaml, yml, trim, raw"));
        }
        let ext = std::path::Path::new(&self.file)
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("");
        Ok(load_var_format(ext).unwrap_or(LoadVarFormat::Trim))
    }

    /// The var's value from the file's content.
    pub fn parse_value(&self, content: &[u8]) -> Result<Value, String> {
        let format = self.format()?;
        let text = std::str::from_utf8(content)
            .map_err(|e| format!("{} is not UTF-8 text: {e}", self.file))?;
        let parsed = match format {
            LoadVarFormat::Raw => Ok(Value::String(text.to_string())),
            LoadVarFormat::Trim => Ok(Value::String(text.trim().to_string())),
            LoadVarFormat::Json => serde_json::from_str(text).map_err(|e| e.to_string()),
            LoadVarFormat::Yaml | LoadVarFormat::Yml => {
                crate::yaml::from_str(text).map_err(|e| e.to_string())
            }
        };
        parsed.map_err(|e| {
            format!(
                "failed to parse {} in format {}: {e}",
                self.file,
                format.as_str()
            )
        })
    }
}

/// Concourse's `set_pipeline`: a pipeline of the build's team configured
/// from a file (`self`: the build's own pipeline).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetPipelineStep {
    pub set_pipeline: String,
    pub file: String,
    #[serde(default)]
    pub vars: Option<Map<String, Value>>,
    #[serde(default)]
    pub var_files: Vec<String>,
    /// Only the build's own team: checked when the step runs.
    #[serde(default)]
    pub team: Option<String>,
    /// The instance of the pipeline it sets (see `crate::instance_vars`);
    /// they are vars of its config too, before `vars` and `var_files`.
    #[serde(default)]
    pub instance_vars: Option<Map<String, Value>>,
}

/// The name that makes a `set_pipeline` configure the build's own pipeline.
pub const SET_SELF: &str = "self";

impl SetPipelineStep {
    pub fn is_self(&self) -> bool {
        self.set_pipeline == SET_SELF
    }

    /// The config of the pipeline: `template` (the file's text) with the
    /// step's `instance_vars`, its `vars` and then each of `var_files` (name, content), the
    /// first that has a var answering, as Concourse's; a var none of them
    /// has stays for the credential manager, as `fly set-pipeline` leaves
    /// it. The result is validated by the caller as any config is.
    pub fn render(
        &self,
        template: &[u8],
        var_files: &[(String, Vec<u8>)],
    ) -> Result<Value, String> {
        let text = std::str::from_utf8(template)
            .map_err(|e| format!("{} is not UTF-8 text: {e}", self.file))?;
        let template = crate::yaml::from_str(text).map_err(|e| format!("{}: {e}", self.file))?;
        let mut sources = Vec::new();
        if let Some(v) = &self.instance_vars {
            sources.push(v.clone());
        }
        if let Some(v) = &self.vars {
            sources.push(v.clone());
        }
        for (name, content) in var_files {
            let text = std::str::from_utf8(content)
                .map_err(|e| format!("{name} is not UTF-8 text: {e}"))?;
            match crate::yaml::from_str(text).map_err(|e| format!("{name}: {e}"))? {
                Value::Object(m) => sources.push(m),
                Value::Null => {}
                other => {
                    return Err(format!(
                        "{name}: a var file is a mapping of vars, not {}",
                        crate::vars::kind(&other)
                    ))
                }
            }
        }
        interpolate_leaving_undefined(&template, &Vars::new(sources))
            .map_err(|e| format!("{}: {e}", self.file))
    }
}

/// A task config read from its file: the step's `vars` filled in (a var
/// they do not define stays, for the build's vars), then the step's
/// `params` and `container_limits` over the file's (Concourse's
/// `InterpolateTemplateConfigSource` then its override sources).
pub fn task_config_from_file(
    file: &str,
    content: &[u8],
    vars: Option<&Map<String, Value>>,
    params: Option<&Map<String, Value>>,
    container_limits: Option<&Value>,
) -> Result<Value, String> {
    let text =
        std::str::from_utf8(content).map_err(|e| format!("{file} is not UTF-8 text: {e}"))?;
    let template = crate::yaml::from_str(text).map_err(|e| format!("{file}: {e}"))?;
    let sources = vars.cloned().into_iter().collect();
    let mut config = interpolate_leaving_undefined(&template, &Vars::new(sources))
        .map_err(|e| format!("{file}: {e}"))?;
    if !config.is_object() {
        return Err(format!(
            "{file}: a task config is a mapping, not {}",
            crate::vars::kind(&config)
        ));
    }
    apply_task_overrides(&mut config, params, container_limits);
    Ok(config)
}

/// A task step's `params` and `container_limits` over its config's: each
/// param given replaces the config's, each limit given (`cpu`, `memory`)
/// replaces the config's, as Concourse's override sources do.
pub fn apply_task_overrides(
    config: &mut Value,
    params: Option<&Map<String, Value>>,
    container_limits: Option<&Value>,
) {
    let Some(base) = config.as_object_mut() else {
        return;
    };
    if let Some(params) = params {
        let merged = base
            .entry("params")
            .or_insert_with(|| Value::Object(Map::new()));
        if merged.is_null() {
            *merged = Value::Object(Map::new());
        }
        if let Some(merged) = merged.as_object_mut() {
            for (k, v) in params {
                merged.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(Value::Object(limits)) = container_limits {
        let merged = base
            .entry("container_limits")
            .or_insert_with(|| Value::Object(Map::new()));
        if merged.is_null() {
            *merged = Value::Object(Map::new());
        }
        if let Some(merged) = merged.as_object_mut() {
            for (k, v) in limits {
                if !v.is_null() {
                    merged.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn load_var(file: &str, format: Option<&str>) -> LoadVarStep {
        LoadVarStep {
            load_var: "v".into(),
            file: file.into(),
            format: format.map(String::from),
            reveal: false,
        }
    }

    #[test]
    fn artifact_files_name_an_artifact_and_a_path() {
        let ok = ArtifactFile::parse("out/dir/task.yml").unwrap();
        assert_eq!(
            (ok.artifact.as_str(), ok.path.as_str()),
            ("out", "dir/task.yml")
        );
        for bad in ["task.yml", "/task.yml", "out/", "out//", "", "bad name/x"] {
            assert!(ArtifactFile::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn load_var_formats_follow_the_field_then_the_extension_then_trim() {
        let cases = [
            ("a/v.json", None, &b"{\"a\": 1}"[..], json!({"a": 1})),
            ("a/v.yml", None, b"a: yes\n", json!({"a": true})),
            ("a/v.yaml", None, b"- 1\n", json!([1])),
            ("a/v.txt", None, b"  2.6.0\n", json!("2.6.0")),
            ("a/v", None, b"x\n", json!("x")),
            ("a/v.json", Some("raw"), b" {}\n", json!(" {}\n")),
            ("a/v.txt", Some("yaml"), b"k: v", json!({"k": "v"})),
            ("a/v.yml", Some("trim"), b"\tk: v\n", json!("k: v")),
        ];
        for (file, format, content, expected) in cases {
            let got = load_var(file, format).parse_value(content).unwrap();
            assert_eq!(got, expected, "{file} {format:?}");
        }
    }

    #[test]
    fn load_var_errors_name_the_file_and_format() {
        let cases = [
            (
                "a/v.json",
                None,
                &b"{"[..],
                "failed to parse a/v.json in format json",
            ),
            (
                "a/v.yml",
                None,
                b"a: [",
                "failed to parse a/v.yml in format yml",
            ),
            ("a/v", Some("toml"), b"", "format: \"toml\" is not one of"),
            ("a/v", None, b"\xff", "a/v is not UTF-8 text"),
        ];
        for (file, format, content, expected) in cases {
            let got = load_var(file, format).parse_value(content).unwrap_err();
            assert!(got.contains(expected), "{file}: {got}");
        }
    }

    #[test]
    fn a_task_file_takes_the_step_vars_and_overrides() {
        let file = b"platform: linux\nparams: {A: ((a)), B: file}\n\
                     run: {path: ((cmd))}\ncontainer_limits: {cpu: 1, memory: 5}\n";
        let vars = json!({"cmd": "echo"}).as_object().cloned();
        let params = json!({"B": "step"}).as_object().cloned();
        let got = task_config_from_file(
            "out/t.yml",
            file,
            vars.as_ref(),
            params.as_ref(),
            Some(&json!({"memory": 9})),
        )
        .unwrap();
        assert_eq!(
            got,
            json!({"platform": "linux", "params": {"A": "((a))", "B": "step"},
                   "run": {"path": "echo"}, "container_limits": {"cpu": 1, "memory": 9}})
        );
        let err = task_config_from_file("out/t.yml", b"- 1", None, None, None).unwrap_err();
        assert!(
            err.contains("out/t.yml: a task config is a mapping"),
            "{err}"
        );
        let err = task_config_from_file("out/t.yml", b"a: [", None, None, None).unwrap_err();
        assert!(err.starts_with("out/t.yml: "), "{err}");
    }

    #[test]
    fn set_pipeline_vars_come_first_then_var_files_in_order() {
        let step = SetPipelineStep {
            set_pipeline: "p".into(),
            file: "out/p.yml".into(),
            vars: json!({"a": "from-vars"}).as_object().cloned(),
            var_files: vec!["out/1.yml".into(), "out/2.yml".into()],
            team: None,
            instance_vars: None,
        };
        let files = vec![
            ("out/1.yml".to_string(), b"a: one\nb: one\n".to_vec()),
            ("out/2.yml".to_string(), b"b: two\nc: two\n".to_vec()),
        ];
        let got = step
            .render(b"x: [((a)), ((b)), ((c)), ((d))]\n", &files)
            .unwrap();
        assert_eq!(got, json!({"x": ["from-vars", "one", "two", "((d))"]}));
        let bad = vec![("out/1.yml".to_string(), b"- 1".to_vec())];
        let err = step.render(b"x: 1", &bad).unwrap_err();
        assert!(err.contains("out/1.yml: a var file is a mapping"), "{err}");
    }

    #[test]
    fn set_pipeline_instance_vars_come_before_its_vars() {
        let step = SetPipelineStep {
            set_pipeline: "p".into(),
            file: "out/p.yml".into(),
            vars: json!({"branch": "from-vars", "other": 1})
                .as_object()
                .cloned(),
            var_files: vec![],
            team: None,
            instance_vars: json!({"branch": "main"}).as_object().cloned(),
        };
        let got = step.render(b"x: [((branch)), ((other))]\n", &[]).unwrap();
        assert_eq!(got, json!({"x": ["main", 1]}));
    }

    #[test]
    fn step_overrides_replace_what_they_name_only() {
        let mut config = json!({"params": null, "container_limits": {"cpu": 2}});
        apply_task_overrides(
            &mut config,
            json!({"P": 1}).as_object(),
            Some(&json!({"cpu": null, "memory": 3})),
        );
        assert_eq!(
            config,
            json!({"params": {"P": 1}, "container_limits": {"cpu": 2, "memory": 3}})
        );
    }
}
