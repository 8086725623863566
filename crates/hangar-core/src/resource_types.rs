//! A build's custom resource types, Concourse's `resource_types`: each names
//! an image, fetched with its own `type` (a base type or another custom
//! type), whose `/opt/resource/{check,in}` speak the resource protocol.
//!
//! Resolution follows Concourse: a get step's `type` names a custom type if
//! one has that name, else a base type. A custom type's own `type` is looked
//! up among the custom types other than itself, so `{name: registry-image,
//! type: registry-image}` overrides the base type with an image fetched by
//! the base type. Any other chain that comes back to a name already in it is
//! a cycle and refused; chains are bounded by [`MAX_CHAIN`].

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::names::validate_label;
use crate::plan::PlanError;

/// The most custom types one build may declare.
pub const MAX_RESOURCE_TYPES: usize = 64;
/// The longest chain of custom types from a step to a base type.
pub const MAX_CHAIN: usize = 4;

/// Fields of Concourse's `resource_type` schema hangar does not support
/// yet, with why: refused, never accepted and ignored.
const UNSUPPORTED: &[(&str, &str)] = &[(
    "check_every",
    "hangar has no periodic checking yet; a get step checks when it runs",
)];

/// One custom resource type.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceType {
    pub name: String,
    /// The type that fetches this type's image.
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The source of the image's resource.
    pub source: Map<String, Value>,
    /// What the get of the image is given.
    #[serde(default)]
    pub params: Option<Map<String, Value>>,
    /// Workers that may run this type (with the step's own tags).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Merged under the `source` of every resource of this type; the
    /// resource's own keys win, as in Concourse.
    #[serde(default)]
    pub defaults: Option<Map<String, Value>>,
    /// The type's actions (`check`, `in`, `out` in a container of its
    /// image) run privileged: only on workers started with
    /// `--allow-privileged`. The image itself is fetched by the type
    /// below, privileged only if that type is.
    #[serde(default)]
    pub privileged: bool,
}

impl ResourceType {
    /// `source` with this type's `defaults` under it.
    pub fn apply_defaults(&self, source: &Map<String, Value>) -> Map<String, Value> {
        let mut merged = self.defaults.clone().unwrap_or_default();
        for (k, v) in source {
            merged.insert(k.clone(), v.clone());
        }
        merged
    }
}

/// Parses and checks a build's `resource_types` (`Null` for none): each
/// entry's fields, unique names, and every chain resolvable, acyclic and
/// bounded.
pub fn parse_resource_types(value: &Value) -> Result<Vec<ResourceType>, PlanError> {
    let items = match value {
        Value::Null => return Ok(vec![]),
        Value::Array(items) => items,
        _ => {
            return Err(PlanError(
                "resource_types: expected a list of resource types".into(),
            ))
        }
    };
    if items.len() > MAX_RESOURCE_TYPES {
        return Err(PlanError(format!(
            "resource_types: at most {MAX_RESOURCE_TYPES} resource types"
        )));
    }
    let mut types: Vec<ResourceType> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("resource_types[{i}]");
        let obj = item
            .as_object()
            .ok_or_else(|| PlanError(format!("{at}: expected a resource type (an object)")))?;
        for (field, why) in UNSUPPORTED {
            if obj.contains_key(*field) {
                return Err(PlanError(format!("{at}.{field}: not supported: {why}")));
            }
        }
        let rt: ResourceType = serde_path_to_error::deserialize(item).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            let inner = inner.split(" at line").next().unwrap_or(&inner).to_string();
            if path == "." {
                PlanError(format!("{at}: {inner}"))
            } else {
                PlanError(format!("{at}.{path}: {inner}"))
            }
        })?;
        let label = |s: &str, field: &str| {
            validate_label(s).map_err(|e| PlanError(format!("{at}.{field}: {e}")))
        };
        label(&rt.name, "name")?;
        label(&rt.resource_type, "type")?;
        for t in &rt.tags {
            label(t, "tags")?;
        }
        if types.iter().any(|t| t.name == rt.name) {
            return Err(PlanError(format!(
                "{at}.name: {:?} is declared twice",
                rt.name
            )));
        }
        types.push(rt);
    }
    for t in &types {
        chain(&types, &t.name)?;
    }
    Ok(types)
}

/// The custom types a resource of type `name` goes through, outermost
/// first (the type `name` itself, then the type of its image, …); empty
/// when `name` is a base type. The last one's `type` is the base type that
/// fetches the innermost image.
pub fn chain<'a>(
    types: &'a [ResourceType],
    name: &str,
) -> Result<Vec<&'a ResourceType>, PlanError> {
    let mut out: Vec<&ResourceType> = Vec::new();
    let mut current = name;
    while let Some(t) = types.iter().find(|t| t.name == current) {
        if out.iter().any(|seen| seen.name == t.name) {
            let names: Vec<&str> = out.iter().map(|t| t.name.as_str()).collect();
            return Err(PlanError(format!(
                "resource type {name:?}: its types form a cycle ({} -> {})",
                names.join(" -> "),
                t.name
            )));
        }
        out.push(t);
        if out.len() > MAX_CHAIN {
            return Err(PlanError(format!(
                "resource type {name:?}: a chain of more than {MAX_CHAIN} custom types"
            )));
        }
        if t.resource_type == t.name {
            // Overrides the base type of the same name.
            break;
        }
        current = &t.resource_type;
    }
    Ok(out)
}

/// The base type at the root of `name`'s chain: what a worker must have.
pub fn base_type(types: &[ResourceType], name: &str) -> Result<String, PlanError> {
    Ok(chain(types, name)?
        .last()
        .map_or_else(|| name.to_string(), |t| t.resource_type.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        parse_resource_types(&v).unwrap_err().to_string()
    }

    #[test]
    fn a_chain_resolves_outermost_first_to_a_base_type() {
        let types = parse_resource_types(&json!([
            {"name": "slack", "type": "mirror", "source": {"repository": "slack"}},
            {"name": "mirror", "type": "registry-image", "source": {"repository": "m"},
             "params": {"format": "rootfs"}, "tags": ["gpu"], "defaults": {"a": 1}},
        ]))
        .unwrap();
        let names: Vec<&str> = chain(&types, "slack")
            .unwrap()
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(names, ["slack", "mirror"]);
        assert_eq!(base_type(&types, "slack").unwrap(), "registry-image");
        assert_eq!(base_type(&types, "git").unwrap(), "git");
        assert!(chain(&types, "git").unwrap().is_empty());
    }

    #[test]
    fn a_type_named_as_its_own_type_overrides_the_base_type() {
        let types = parse_resource_types(&json!([
            {"name": "registry-image", "type": "registry-image", "source": {}},
        ]))
        .unwrap();
        assert_eq!(chain(&types, "registry-image").unwrap().len(), 1);
        assert_eq!(
            base_type(&types, "registry-image").unwrap(),
            "registry-image"
        );
    }

    #[test]
    fn privileged_is_taken_per_type_and_defaults_to_false() {
        let types = parse_resource_types(&json!([
            {"name": "dind", "type": "registry-image", "source": {}, "privileged": true},
            {"name": "plain", "type": "registry-image", "source": {}},
        ]))
        .unwrap();
        assert!(types[0].privileged);
        assert!(!types[1].privileged);
    }

    #[test]
    fn defaults_go_under_the_source() {
        let types = parse_resource_types(&json!([
            {"name": "s3", "type": "registry-image", "source": {},
             "defaults": {"region": "eu", "bucket": "b"}},
        ]))
        .unwrap();
        let source = json!({"bucket": "mine"});
        let merged = types[0].apply_defaults(source.as_object().unwrap());
        assert_eq!(
            Value::Object(merged),
            json!({"region": "eu", "bucket": "mine"})
        );
    }

    #[test]
    fn bad_resource_types_get_messages_that_say_where() {
        let ok = json!({"name": "a", "type": "registry-image", "source": {}});
        let cases = [
            (json!({}), "plan: resource_types: expected a list"),
            (
                json!([1]),
                "plan: resource_types[0]: expected a resource type",
            ),
            (
                json!([{"name": "a", "type": "registry-image"}]),
                "plan: resource_types[0]: missing field `source`",
            ),
            (
                json!([{"type": "registry-image", "source": {}}]),
                "plan: resource_types[0]: missing field `name`",
            ),
            (
                json!([{"name": "a", "type": "registry-image", "source": {}, "privileged": "yes"}]),
                "plan: resource_types[0].privileged: invalid type: string \"yes\", expected a boolean",
            ),
            (
                json!([{"name": "a", "type": "registry-image", "source": {}, "check_every": "1m"}]),
                "plan: resource_types[0].check_every: not supported",
            ),
            (
                json!([{"name": "a", "type": "registry-image", "source": {}, "sauce": 1}]),
                "plan: resource_types[0].sauce: unknown field `sauce`",
            ),
            (
                json!([{"name": "a b", "type": "registry-image", "source": {}}]),
                "plan: resource_types[0].name: invalid name",
            ),
            (
                json!([{"name": "a", "type": "", "source": {}}]),
                "plan: resource_types[0].type: invalid name",
            ),
            (
                json!([{"name": "a", "type": "x", "source": {}, "tags": ["a b"]}]),
                "plan: resource_types[0].tags: invalid name",
            ),
            (
                json!([ok.clone(), ok.clone()]),
                "plan: resource_types[1].name: \"a\" is declared twice",
            ),
            (
                json!([{"name": "a", "type": "b", "source": {}},
                       {"name": "b", "type": "a", "source": {}}]),
                "plan: resource type \"a\": its types form a cycle (a -> b -> a)",
            ),
        ];
        for (value, expected) in cases {
            let got = err(value.clone());
            assert!(got.starts_with(expected), "{value}: {got}");
        }
    }

    #[test]
    fn chains_and_lists_are_bounded() {
        let deep: Vec<Value> = (0..=MAX_CHAIN)
            .map(|i| json!({"name": format!("t{i}"), "type": format!("t{}", i + 1), "source": {}}))
            .collect();
        assert!(err(Value::Array(deep)).contains("a chain of more than 4 custom types"));
        let ok: Vec<Value> = (0..MAX_CHAIN)
            .map(|i| json!({"name": format!("t{i}"), "type": format!("t{}", i + 1), "source": {}}))
            .collect();
        assert!(parse_resource_types(&Value::Array(ok)).is_ok());
        let many: Vec<Value> = (0..=MAX_RESOURCE_TYPES)
            .map(|i| json!({"name": format!("t{i}"), "type": "registry-image", "source": {}}))
            .collect();
        assert!(err(Value::Array(many)).contains("at most 64 resource types"));
    }
}
