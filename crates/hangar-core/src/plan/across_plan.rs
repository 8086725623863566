//! An `across` whose values are known only when the build runs: a var's
//! `values` is one `((var))` or `((.:var))` giving the whole list
//! (Concourse's multi-branch pattern: `values: ((.:branches))` after a
//! `load_var`). The planner writes every other `across` out when the
//! pipeline is set ([`super::across`]); this one is stored as
//!
//! ```json
//! {"across": [{"var": "b", "values": "((.:branches))", "max_in_flight": 1}],
//!  "fail_fast": false, "step": {…}}
//! ```
//!
//! and the engine, once the values are filled in, writes it out the same
//! way ([`AcrossPlan::expand`]) and runs the `in_parallel` it becomes at
//! the across step's id: a combination's steps have ids of their own, as a
//! planned across's do.

use serde_json::{json, Map, Value};

use super::{PlanError, Step, MAX_STEPS};
use crate::pipeline::AcrossVar;

/// One var: its values as stored (a list, or the `((var))` text giving it).
#[derive(Debug, Clone, PartialEq)]
pub struct AcrossPlanVar {
    pub var: String,
    pub values: Value,
    /// `None`: all at once.
    pub max_in_flight: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AcrossPlan {
    pub vars: Vec<AcrossPlanVar>,
    pub fail_fast: bool,
    /// The step run once per combination, as stored: each copy gets that
    /// combination's `((.:var))`s filled in.
    pub step: Value,
    /// `step` read, so the plan is checked whole before it runs and walks
    /// over it see what each combination runs.
    pub template: Box<Step>,
}

/// Whether `text` is one var reference and nothing else.
pub fn is_one_var(text: &str) -> bool {
    let t = text.trim();
    t.starts_with("((") && t.ends_with("))") && t[2..t.len() - 2].find("((").is_none()
}

/// The stored form of an across (the planner's side).
pub fn stored(vars: &[AcrossVar], fail_fast: bool, step: Value) -> Map<String, Value> {
    let vars: Vec<Value> = vars
        .iter()
        .map(|v| {
            let values = match &v.values_from {
                Some(text) => Value::String(text.clone()),
                None => Value::Array(v.values.clone()),
            };
            match v.max_in_flight {
                Some(n) => json!({"var": v.var, "values": values, "max_in_flight": n}),
                None => json!({"var": v.var, "values": values, "max_in_flight": "all"}),
            }
        })
        .collect();
    let mut o = Map::new();
    o.insert("across".into(), Value::Array(vars));
    if fail_fast {
        o.insert("fail_fast".into(), json!(true));
    }
    o.insert("step".into(), step);
    o
}

pub(super) fn parse(
    obj: &Map<String, Value>,
    at: &str,
    depth: usize,
    count: &mut usize,
) -> Result<Step, PlanError> {
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "across" | "fail_fast" | "step"))
    {
        return Err(PlanError(format!(
            "{at}: unknown field `{k}` of an across, expected across, fail_fast, step"
        )));
    }
    let here = format!("{at}.across");
    let items = obj["across"]
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| PlanError(format!("{here}: expected a list of vars")))?;
    let mut vars = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{here}[{i}]");
        let o = item
            .as_object()
            .ok_or_else(|| PlanError(format!("{at}: expected {{var, values, max_in_flight}}")))?;
        if let Some(k) = o
            .keys()
            .find(|k| !matches!(k.as_str(), "var" | "values" | "max_in_flight"))
        {
            return Err(PlanError(format!("{at}: unknown field `{k}`")));
        }
        let var = o
            .get("var")
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty() && !v.contains(['.', '(', ')']))
            .ok_or_else(|| PlanError(format!("{at}.var: expected a var name")))?;
        if vars.iter().any(|v: &AcrossPlanVar| v.var == var) {
            return Err(PlanError(format!("{at}.var: {var} is named twice")));
        }
        let values = match o.get("values") {
            Some(v @ Value::Array(_)) => v.clone(),
            Some(Value::String(s)) if is_one_var(s) => Value::String(s.clone()),
            _ => {
                return Err(PlanError(format!(
                    "{at}.values: expected a list, or one ((var)) giving it"
                )))
            }
        };
        let max_in_flight = match o.get("max_in_flight") {
            None | Some(Value::Null) => Some(1),
            Some(Value::String(s)) if s == "all" => None,
            Some(v) => match v.as_u64() {
                Some(n) if (1..=MAX_STEPS as u64).contains(&n) => Some(n as u32),
                _ => {
                    return Err(PlanError(format!(
                        "{at}.max_in_flight: {v} is not all or a whole number from 1 to \
                         {MAX_STEPS}"
                    )))
                }
            },
        };
        vars.push(AcrossPlanVar {
            var: var.to_string(),
            values,
            max_in_flight,
        });
    }
    let fail_fast = match obj.get("fail_fast") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(PlanError(format!(
                "{at}.fail_fast: expected true or false, not {v}"
            )))
        }
    };
    let step = obj
        .get("step")
        .ok_or_else(|| PlanError(format!("{at}: missing field `step`")))?;
    let template = super::parse_step(step, &format!("{at}.step"), depth + 1, count)?;
    Ok(Step::Across(Box::new(AcrossPlan {
        vars,
        fail_fast,
        step: step.clone(),
        template: Box::new(template),
    })))
}

impl AcrossPlan {
    /// The values of each var, as stored (a list, or its `((var))`), for
    /// filling in.
    pub fn values(&self) -> Value {
        Value::Array(self.vars.iter().map(|v| v.values.clone()).collect())
    }

    /// The step this across runs once its values are known (`filled`: what
    /// [`AcrossPlan::values`] became with the build's vars in): an
    /// `in_parallel` of every combination, read and checked as a plan's
    /// step is. `at` names the step in errors.
    pub fn expand(&self, filled: &Value, at: &str) -> Result<Step, String> {
        let lists = filled.as_array().filter(|l| l.len() == self.vars.len());
        let Some(lists) = lists else {
            return Err(format!("{at}: the across values did not fill in"));
        };
        let mut vars = Vec::with_capacity(self.vars.len());
        let mut combinations: usize = 1;
        for (var, list) in self.vars.iter().zip(lists) {
            let Value::Array(values) = list else {
                return Err(format!(
                    "{at}: across var {}: its values ({}) are {}, not a list",
                    var.var,
                    var.values,
                    crate::vars::kind(list)
                ));
            };
            if values.is_empty() {
                return Err(format!(
                    "{at}: across var {}: its values ({}) are an empty list",
                    var.var, var.values
                ));
            }
            combinations = combinations.saturating_mul(values.len());
            vars.push(AcrossVar {
                var: var.var.clone(),
                values: values.clone(),
                values_from: None,
                max_in_flight: var.max_in_flight,
            });
        }
        if combinations > MAX_STEPS {
            return Err(format!(
                "{at}: {combinations} combinations of values: across runs at most {MAX_STEPS}"
            ));
        }
        let expanded = super::across::expand(&vars, self.fail_fast, &self.step, at)?;
        let mut count = 0;
        super::parse_step(&Value::Object(expanded), at, 0, &mut count).map_err(|e| e.0)
    }
}

#[cfg(test)]
mod tests;
