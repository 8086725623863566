//! Reading the `across` modifier: the vars, their values and how many run
//! at once, and the step they run, read as any other step.

use serde_json::{Map, Value};

use super::names::show;
use super::read::{kind, Reader};
use super::steps::{AcrossStep, AcrossVar, Action, Step};
use super::{ConfigError, PipelineConfig};

/// The most combinations an `across` may have (the product of its vars'
/// value counts): as many as a build's plan may hold steps, since each is
/// one step of it at least.
pub const MAX_ACROSS_COMBINATIONS: usize = crate::plan::MAX_STEPS;

/// Why a job holding an `across` cannot be planned.
pub type AcrossPlanError = ConfigError;

/// A job whose plan holds an `across` is planned when its pipeline is
/// set, every combination written out, so that one whose build plan would
/// be too large or too deep ([`crate::plan::MAX_STEPS`],
/// [`crate::plan::MAX_DEPTH`]) is refused then rather than when it runs.
pub(super) fn check_planned(config: &PipelineConfig, errors: &mut Vec<ConfigError>) {
    for job in &config.jobs {
        let mut has_across = false;
        let hooks = [
            &job.on_success,
            &job.on_failure,
            &job.on_abort,
            &job.on_error,
            &job.ensure,
        ];
        for s in job
            .plan
            .iter()
            .chain(hooks.into_iter().flatten().map(|b| &**b))
        {
            s.walk("", &mut |_, s| {
                has_across |= matches!(s.action, Action::Across(_))
            });
        }
        if !has_across {
            continue;
        }
        if let Err(e) = crate::plan::planner::plan_job(config, job) {
            errors.push(ConfigError {
                path: format!("jobs.{}", job.name),
                message: format!(
                    "its across steps, every combination written out, make a build plan \
                     hangar cannot run: {}",
                    e.0
                ),
            });
        }
    }
}

/// Keys that stay with the step holding `across`: its hooks run once,
/// after every combination. Attempts, timeout and tags go with the step
/// run per combination, as in Concourse.
const OUTER: &[&str] = &["on_success", "on_failure", "on_abort", "on_error", "ensure"];

/// Whether `name` is a var name `((.:name))` can refer to: a letter or
/// `_`, then letters, digits, `_` or `-`.
fn identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl Reader {
    pub(super) fn across_step(
        &mut self,
        obj: &Map<String, Value>,
        at: &str,
        depth: usize,
    ) -> Option<Step> {
        let errors_before = self.errors.len();
        let here = format!("{at}.across");
        let vars = self.across_vars(&obj["across"], &here);
        let fail_fast = self.boolean(obj, "fail_fast", at);
        let mut inner = obj.clone();
        inner.remove("across");
        inner.remove("fail_fast");
        for key in OUTER {
            inner.remove(*key);
        }
        let step = self.step(&Value::Object(inner), at, depth + 1);
        let hook = |r: &mut Reader, key: &str| {
            obj.get(key)
                .filter(|v| !v.is_null())
                .and_then(|v| r.step(v, &format!("{at}.{key}"), depth + 1))
                .map(Box::new)
        };
        let on_success = hook(self, "on_success");
        let on_failure = hook(self, "on_failure");
        let on_abort = hook(self, "on_abort");
        let on_error = hook(self, "on_error");
        let ensure = hook(self, "ensure");
        let step = step?;
        (self.errors.len() == errors_before).then(|| Step {
            action: Action::Across(AcrossStep {
                vars,
                fail_fast,
                step: Box::new(step),
            }),
            attempts: None,
            timeout: None,
            tags: vec![],
            on_success,
            on_failure,
            on_abort,
            on_error,
            ensure,
        })
    }

    fn across_vars(&mut self, value: &Value, at: &str) -> Vec<AcrossVar> {
        let Some(items) = value.as_array() else {
            self.err(
                at,
                format!(
                    "expected a list of vars ({{var, values, max_in_flight}}), got {}",
                    kind(value)
                ),
            );
            return vec![];
        };
        if items.is_empty() {
            self.err(at, "no vars: across needs at least one var");
        }
        let mut out: Vec<AcrossVar> = Vec::new();
        let mut combinations: usize = 1;
        for (i, item) in items.iter().enumerate() {
            let here = format!("{at}[{i}]");
            let Some(o) = self.object(item, &here, "a var (a mapping)") else {
                continue;
            };
            self.unknown_fields(o, &["var", "values", "max_in_flight"], &here);
            let var = match o.get("var") {
                Some(Value::String(s)) if identifier(s) => s.clone(),
                Some(Value::String(s)) => {
                    self.err(
                        format!("{here}.var"),
                        format!(
                            "'{}' is not a var name (a letter or _, then letters, digits, _ or -)",
                            show(s)
                        ),
                    );
                    continue;
                }
                None | Some(Value::Null) => {
                    self.err(&here, "no var: each entry of across names its var");
                    continue;
                }
                Some(other) => {
                    self.err(
                        format!("{here}.var"),
                        format!("expected a var name (a string), got {}", kind(other)),
                    );
                    continue;
                }
            };
            if out.iter().any(|v| v.var == var) {
                self.err(
                    format!("{here}.var"),
                    format!("'{}' is named twice in this across", show(&var)),
                );
                continue;
            }
            let mut values_from = None;
            let values = match o.get("values") {
                Some(Value::Array(v)) => v.clone(),
                // The list comes when the build runs: from the build's vars
                // or a local var (Concourse's multi-branch pattern).
                Some(Value::String(s)) if crate::plan::across_plan::is_one_var(s) => {
                    values_from = Some(s.trim().to_string());
                    vec![]
                }
                Some(Value::String(s)) if s.contains("((") => {
                    self.err(
                        format!("{here}.values"),
                        "a string of values must be exactly one ((var)) giving the whole list",
                    );
                    continue;
                }
                None | Some(Value::Null) => {
                    self.err(&here, "no values: each var of across lists its values");
                    continue;
                }
                Some(other) => {
                    self.err(
                        format!("{here}.values"),
                        format!("expected a list of values, got {}", kind(other)),
                    );
                    continue;
                }
            };
            let max_in_flight = match o.get("max_in_flight") {
                None | Some(Value::Null) => Some(1),
                Some(Value::String(s)) if s == "all" => None,
                Some(v) => match v.as_i64() {
                    Some(n) if n > 0 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
                    Some(_) => {
                        self.err(
                            format!("{here}.max_in_flight"),
                            "must be greater than 0 (or all)",
                        );
                        continue;
                    }
                    None => {
                        self.err(
                            format!("{here}.max_in_flight"),
                            format!("expected a whole number or all, got {}", kind(v)),
                        );
                        continue;
                    }
                },
            };
            if values_from.is_none() {
                combinations = combinations.saturating_mul(values.len());
            }
            out.push(AcrossVar {
                var,
                values,
                values_from,
                max_in_flight,
            });
        }
        if combinations > MAX_ACROSS_COMBINATIONS {
            self.err(
                at,
                format!(
                    "{combinations} combinations of values: across runs at most \
                     {MAX_ACROSS_COMBINATIONS}"
                ),
            );
        }
        out
    }
}
