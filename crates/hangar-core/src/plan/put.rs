//! Concourse's `put` step in a plan: `out` of a resource with the build's
//! artifacts as inputs, then (unless `no_get`) the implicit get of the new
//! version into the artifact named like the put.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::{Map, Value};

/// The most string values `inputs: detect` looks at: params past that are
/// refused rather than walked (a plan body is bounded, this bounds the
/// work on it).
pub const MAX_DETECT_VALUES: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutStep {
    /// The artifact the implicit get fetches the new version into.
    pub put: String,
    #[serde(rename = "type")]
    pub resource_type: String,
    pub source: Map<String, Value>,
    #[serde(default)]
    pub params: Option<Map<String, Value>>,
    #[serde(default)]
    pub inputs: PutInputs,
    /// The params of the implicit get.
    #[serde(default)]
    pub get_params: Option<Map<String, Value>>,
    /// No implicit get.
    #[serde(default)]
    pub no_get: bool,
    #[serde(default)]
    pub tags: Vec<String>,
    /// hangar's infrastructure attempts (not Concourse's `attempts`).
    #[serde(default)]
    pub infrastructure_attempts: Option<u32>,
    /// The pipeline resource put to, in a job build's plan (set by the
    /// planner, as a get's): the version `out` made is recorded as the
    /// build's output.
    #[serde(default)]
    pub resource: Option<String>,
}

/// Which artifacts a put is given: `"all"`, `"detect"` (Concourse's
/// default) or a list of names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PutInputs {
    All,
    #[default]
    Detect,
    Names(Vec<String>),
}

impl<'de> Deserialize<'de> for PutInputs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Word(String),
            Names(Vec<String>),
        }
        match Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom("expected \"all\", \"detect\" or a list of artifact names")
        })? {
            Raw::Word(w) if w == "all" => Ok(PutInputs::All),
            Raw::Word(w) if w == "detect" => Ok(PutInputs::Detect),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "{w:?}: expected \"all\", \"detect\" or a list of artifact names"
            ))),
            Raw::Names(n) => Ok(PutInputs::Names(n)),
        }
    }
}

impl PutStep {
    pub fn infrastructure_attempts(&self) -> u32 {
        self.infrastructure_attempts
            .unwrap_or(super::DEFAULT_ATTEMPTS)
    }

    /// The artifacts the put is given, of those the build has: all of
    /// them, the ones named (a name the build lacks is an error, as in
    /// Concourse), or those whose name is the first path segment of a
    /// string in `params`.
    pub fn input_names(&self, artifacts: &BTreeSet<String>) -> Result<BTreeSet<String>, String> {
        match &self.inputs {
            PutInputs::All => Ok(artifacts.clone()),
            PutInputs::Names(names) => names
                .iter()
                .map(|n| {
                    if artifacts.contains(n) {
                        Ok(n.clone())
                    } else {
                        Err(format!("inputs: no artifact {n:?} in the build"))
                    }
                })
                .collect(),
            PutInputs::Detect => {
                let params = self
                    .params
                    .clone()
                    .map(Value::Object)
                    .unwrap_or(Value::Null);
                detect_inputs(&params, artifacts)
            }
        }
    }
}

/// Concourse's `inputs: detect`: the artifacts named by the first path
/// segment of any string value in `params` (keys are not looked at).
/// Walks without recursion and stops past [`MAX_DETECT_VALUES`] values.
pub fn detect_inputs(
    params: &Value,
    artifacts: &BTreeSet<String>,
) -> Result<BTreeSet<String>, String> {
    let mut found = BTreeSet::new();
    let mut stack = vec![params];
    let mut seen = 0usize;
    while let Some(v) = stack.pop() {
        seen += 1;
        if seen > MAX_DETECT_VALUES {
            return Err(format!(
                "inputs: detect looks at {MAX_DETECT_VALUES} values of params at most; \
                 list the inputs instead"
            ));
        }
        match v {
            Value::String(s) => {
                let first = s
                    .trim_start_matches("./")
                    .split('/')
                    .next()
                    .unwrap_or_default();
                if artifacts.contains(first) {
                    found.insert(first.to_string());
                }
            }
            Value::Array(items) => stack.extend(items.iter()),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn detect_finds_artifacts_named_by_string_values() {
        let artifacts = names(&["ci", "repo", "version"]);
        let cases = [
            (json!({"file": "ci/version.txt"}), vec!["ci"]),
            (json!({"repository": "repo"}), vec!["repo"]),
            (
                json!({"a": ["x/y", {"deep": "version/number"}], "n": 1, "b": true}),
                vec!["version"],
            ),
            (json!({"repo": "nothing/here"}), vec![]),
            (json!({"file": "./ci/v"}), vec!["ci"]),
            (json!(null), vec![]),
        ];
        for (params, expected) in cases {
            let got = detect_inputs(&params, &artifacts).unwrap();
            assert_eq!(got, names(&expected), "{params}");
        }
    }

    #[test]
    fn detect_over_huge_params_is_bounded() {
        let huge = Value::Array(vec![json!("repo/x"); MAX_DETECT_VALUES + 1]);
        let err = detect_inputs(&json!({"p": huge}), &names(&["repo"])).unwrap_err();
        assert!(err.contains("at most"), "{err}");
    }

    #[test]
    fn inputs_all_names_and_detect() {
        let artifacts = names(&["a", "b"]);
        let step = |inputs: Value| -> PutStep {
            serde_json::from_value(json!({"put": "r", "type": "mock", "source": {},
                "params": {"file": "b/x"}, "inputs": inputs}))
            .unwrap()
        };
        assert_eq!(
            step(json!("all")).input_names(&artifacts).unwrap(),
            artifacts
        );
        assert_eq!(
            step(json!("detect")).input_names(&artifacts).unwrap(),
            names(&["b"])
        );
        assert_eq!(
            step(json!(["a"])).input_names(&artifacts).unwrap(),
            names(&["a"])
        );
        assert_eq!(
            step(json!(["zz"])).input_names(&artifacts).unwrap_err(),
            "inputs: no artifact \"zz\" in the build"
        );
        let bad: Result<PutStep, _> = serde_json::from_value(
            json!({"put": "r", "type": "mock", "source": {}, "inputs": "some"}),
        );
        assert!(bad.unwrap_err().to_string().contains("\"some\": expected"));
    }
}
