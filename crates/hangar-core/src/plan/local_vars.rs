//! A build's local vars (`((.:name))`, Concourse's local build vars): a
//! `load_var` step defines one for the steps after it, and so does a get
//! step (a put's implicit get too), under its name, from the metadata of
//! the version it fetched. The stored plan keeps them as written; a plan
//! whose step uses one that no earlier step defines is refused when it is
//! read, naming it; the engine fills them into each step's values just
//! before the step runs.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{leaf_steps, PlanError, Step};
use crate::vars::{find_refs, interpolate_with, take_fields, Lookup, VarLookup, VarRef};

/// The values of a leaf step that `((vars))` are filled into, as one list
/// (empty for a step that has none, or is not a leaf).
pub fn var_fields(step: &Step) -> Value {
    let maps = |maps: &[Option<&Map<String, Value>>]| -> Vec<Value> {
        maps.iter()
            .flatten()
            .map(|m| Value::Object((*m).clone()))
            .collect()
    };
    Value::Array(match step {
        Step::Get(g) => maps(&[Some(&g.source), g.version.as_ref(), g.params.as_ref()]),
        Step::Put(p) => maps(&[Some(&p.source), p.params.as_ref(), p.get_params.as_ref()]),
        Step::Task(t) => {
            let mut out = maps(&[t.vars.as_ref(), t.params.as_ref()]);
            out.extend(t.config.iter().cloned());
            out.extend(t.container_limits.iter().cloned());
            out
        }
        Step::SetPipeline(s) => maps(&[s.instance_vars.as_ref(), s.vars.as_ref()]),
        Step::Across(a) => vec![a.values()],
        Step::LoadVar(_) | Step::Do(_) | Step::InParallel(_) | Step::Try(_) | Step::Modified(_) => {
            Vec::new()
        }
    })
}

/// The leaf with `f` applied to each of its [`var_fields`].
pub fn map_var_fields<E>(
    step: &Step,
    mut f: impl FnMut(&Value) -> Result<Value, E>,
) -> Result<Step, E> {
    let mut map = |m: &Map<String, Value>| -> Result<Map<String, Value>, E> {
        // Filling vars into a mapping leaves a mapping: only strings change.
        Ok(match f(&Value::Object(m.clone()))? {
            Value::Object(out) => out,
            _ => m.clone(),
        })
    };
    Ok(match step {
        Step::Get(g) => {
            let mut g = g.clone();
            g.source = map(&g.source)?;
            g.version = g.version.as_ref().map(&mut map).transpose()?;
            g.params = g.params.as_ref().map(&mut map).transpose()?;
            Step::Get(g)
        }
        Step::Put(p) => {
            let mut p = p.clone();
            p.source = map(&p.source)?;
            p.params = p.params.as_ref().map(&mut map).transpose()?;
            p.get_params = p.get_params.as_ref().map(&mut map).transpose()?;
            Step::Put(p)
        }
        Step::Task(t) => {
            let mut t = t.clone();
            t.vars = t.vars.as_ref().map(&mut map).transpose()?;
            t.params = t.params.as_ref().map(&mut map).transpose()?;
            t.config = t.config.as_ref().map(&mut f).transpose()?;
            t.container_limits = t.container_limits.as_ref().map(&mut f).transpose()?;
            Step::Task(t)
        }
        Step::SetPipeline(s) => {
            let mut s = s.clone();
            s.instance_vars = s.instance_vars.as_ref().map(&mut map).transpose()?;
            s.vars = s.vars.as_ref().map(&mut map).transpose()?;
            Step::SetPipeline(s)
        }
        Step::Across(a) => {
            let mut a = a.clone();
            if let Value::Array(lists) = f(&a.values())? {
                for (var, values) in a.vars.iter_mut().zip(lists) {
                    var.values = values;
                }
            }
            Step::Across(a)
        }
        other => other.clone(),
    })
}

/// Refuses a plan whose step uses a local var that no `load_var`, get or
/// put (with its implicit get) before it (in plan order, a step's hooks
/// after it) defines, naming the var and the step.
pub fn check_defined(steps: &[Step]) -> Result<(), PlanError> {
    let mut defined: BTreeSet<&str> = BTreeSet::new();
    // The vars of each across whose values come when the build runs, by
    // the id prefix of what its combinations run.
    let mut across: Vec<(String, Vec<&str>)> = Vec::new();
    for (id, step) in leaf_steps(steps) {
        // Vars that do not parse are refused where the plan's vars are
        // resolved; here only the local ones matter.
        let refs = find_refs(&var_fields(step)).unwrap_or_default();
        let in_across = |name: &str| {
            across.iter().any(|(prefix, vars)| {
                (id == *prefix || id.starts_with(&format!("{prefix}."))) && vars.contains(&name)
            })
        };
        let unknown: Vec<String> = refs
            .iter()
            .filter(|r| r.is_local() && !defined.contains(r.path.as_str()) && !in_across(&r.path))
            .map(|r| format!("(({r}))"))
            .collect();
        if !unknown.is_empty() {
            return Err(PlanError(format!(
                "plan step {id}: local var {} is not defined before it (by a load_var \
                 step, or a get or put step of that name)",
                unknown.join(", ")
            )));
        }
        match step {
            Step::LoadVar(l) => {
                defined.insert(&l.load_var);
            }
            // Concourse's get step sets `((.:NAME))` to its version's
            // metadata; a put's implicit get is a get of the put's name.
            Step::Get(g) => {
                defined.insert(&g.get);
            }
            Step::Put(p) if !p.no_get => {
                defined.insert(&p.put);
            }
            Step::Across(a) => across.push((
                format!("{id}.*"),
                a.vars.iter().map(|v| v.var.as_str()).collect(),
            )),
            _ => {}
        }
    }
    Ok(())
}

/// The local vars a build defined so far. Only `((.:name))` is answered:
/// any other var left in a step when it runs is undefined.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalVars {
    values: BTreeMap<String, Value>,
}

impl LocalVars {
    pub fn set(&mut self, name: &str, value: Value) {
        self.values.insert(name.to_string(), value);
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }

    /// `step` with its local vars filled in; an error names every var it
    /// uses that is not defined.
    pub fn fill(&self, step: &Step) -> Result<Step, String> {
        map_var_fields(step, |v| {
            interpolate_with(v, self).map_err(|e| e.to_string())
        })
    }
}

impl VarLookup for LocalVars {
    fn lookup(&self, r: &VarRef) -> Lookup<'_> {
        if !r.is_local() {
            return Lookup::Undefined;
        }
        match self.values.get(&r.path) {
            None => Lookup::Undefined,
            Some(v) => match take_fields(v, r) {
                Ok(v) => Lookup::Found(Cow::Borrowed(v)),
                Err(e) => Lookup::Invalid(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::parse_plan;
    use serde_json::json;

    fn check(plan: Value) -> Result<(), String> {
        check_defined(&parse_plan(&plan).unwrap()).map_err(|e| e.to_string())
    }

    fn load(name: &str) -> Value {
        json!({"load_var": name, "file": "out/v.txt"})
    }

    fn task_using(var: &str) -> Value {
        json!({"task": "t", "config": {"platform": "linux", "run": {"path": "x"},
               "params": {"V": var}}})
    }

    #[test]
    fn local_vars_must_be_defined_by_an_earlier_load_var() {
        let cases = [
            (json!([load("v"), task_using("((.:v))")]), Ok(())),
            (json!([load("v"), task_using("a-((.:v.field))-b")]), Ok(())),
            (
                json!([{"do": [load("v")]}, {"in_parallel": [task_using("((.:v))")]}]),
                Ok(()),
            ),
            (
                json!([{"load_var": "v", "file": "o/v", "ensure": task_using("((.:v))")}]),
                Ok(()),
            ),
            (
                json!([task_using("((.:v))"), load("v")]),
                Err("plan step 0: local var ((.:v)) is not defined before it (by a load_var step, or a get or put step of that name)"),
            ),
            (
                json!([load("v"), task_using("((.:w)) ((.:v))")]),
                Err("plan step 1: local var ((.:w)) is not defined"),
            ),
            (
                json!([load("v"), {"get": "g", "type": "git", "source": {"uri": "((.:nope))"}}]),
                Err("plan step 1: local var ((.:nope))"),
            ),
            (
                json!([load("v"), {"set_pipeline": "p", "file": "o/p.yml",
                                   "vars": {"a": "((.:x))"}}]),
                Err("plan step 1: local var ((.:x))"),
            ),
            // A get step defines its name for the steps after it, its
            // hooks included, as does a put unless `no_get`; not for
            // itself, nor for the steps before it.
            (
                json!([{"get": "r", "type": "mock", "source": {}},
                       task_using("((.:r.field))")]),
                Ok(()),
            ),
            (
                json!([{"get": "r", "type": "mock", "source": {},
                        "on_success": task_using("((.:r))")}]),
                Ok(()),
            ),
            (
                json!([{"put": "p", "type": "mock", "source": {}},
                       task_using("((.:p.field))")]),
                Ok(()),
            ),
            (
                json!([{"get": "r", "type": "mock", "source": {"a": "((.:r))"}}]),
                Err("plan step 0: local var ((.:r)) is not defined before it"),
            ),
            (
                json!([task_using("((.:r.field))"), {"get": "r", "type": "mock", "source": {}}]),
                Err("plan step 0: local var ((.:r.field)) is not defined"),
            ),
            (
                json!([{"get": "r", "type": "mock", "source": {}}, task_using("((.:s))")]),
                Err("plan step 1: local var ((.:s)) is not defined"),
            ),
            (
                json!([{"put": "p", "type": "mock", "source": {}, "no_get": true},
                       task_using("((.:p))")]),
                Err("plan step 1: local var ((.:p)) is not defined"),
            ),
            // A var of another source is not a local var.
            (
                json!([task_using("((v))"), task_using("((src:v))")]),
                Ok(()),
            ),
        ];
        for (plan, expected) in cases {
            let got = check(plan.clone());
            match expected {
                Ok(()) => assert_eq!(got, Ok(()), "{plan}"),
                Err(e) => assert!(got.as_ref().unwrap_err().contains(e), "{plan}: {got:?}"),
            }
        }
    }

    #[test]
    fn filling_a_step_takes_local_vars_only() {
        let mut vars = LocalVars::default();
        vars.set("v", json!({"n": 3, "s": "text"}));
        vars.set("plain", json!("2.6.0"));
        let plan = json!([
            task_using("((.:plain))-((.:v.n))"),
            task_using("((.:v))"),
            task_using("((.:v.missing))"),
            task_using("((other))"),
            task_using("((.:undefined))")
        ]);
        let steps = parse_plan(&plan).unwrap();
        let params = |s: &Step| match s {
            Step::Task(t) => t.config.as_ref().unwrap()["params"]["V"].clone(),
            _ => unreachable!(),
        };
        assert_eq!(params(&vars.fill(&steps[0]).unwrap()), json!("2.6.0-3"));
        assert_eq!(
            params(&vars.fill(&steps[1]).unwrap()),
            json!({"n": 3, "s": "text"})
        );
        assert!(vars
            .fill(&steps[2])
            .unwrap_err()
            .contains("missing field 'missing'"));
        assert_eq!(vars.fill(&steps[3]).unwrap_err(), "undefined vars: other");
        assert_eq!(
            vars.fill(&steps[4]).unwrap_err(),
            "undefined vars: .:undefined"
        );
    }
}
