//! Pinning a resource and enabling or disabling its versions (fly's
//! `pin-resource`, `unpin-resource`, `enable-resource-version`,
//! `disable-resource-version`). A version is named by some of its fields:
//! the newest version having those values is meant, as `fly -v k:v` does.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The most fields a version named in a request may have.
pub const MAX_VERSION_FIELDS: usize = 32;
/// The longest field name or value, and the longest pin comment.
pub const MAX_FIELD_BYTES: usize = 1024;

/// `PUT …/resources/{resource}/pin`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinRequest {
    pub version: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// `PUT …/resources/{resource}/versions/enable` and `…/disable`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionRequest {
    pub version: Map<String, Value>,
}

/// `GET …/resources/{resource}/pin`: the resource's pin, if any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourcePin {
    pub version: Value,
    /// Set by the config's `version:`: the API cannot change it.
    pub from_config: bool,
    #[serde(default)]
    pub comment: Option<String>,
}

/// Why a version named in a request is refused: empty, too many fields,
/// a value that is not a string, or a field too long.
pub fn check_version_fields(version: &Map<String, Value>) -> Result<(), String> {
    if version.is_empty() {
        return Err("version: name at least one field (key:value)".into());
    }
    if version.len() > MAX_VERSION_FIELDS {
        return Err(format!(
            "version: {} fields, at most {MAX_VERSION_FIELDS}",
            version.len()
        ));
    }
    for (k, v) in version {
        let Value::String(s) = v else {
            return Err(format!("version: field {k:?} must be a string"));
        };
        if k.is_empty() || k.len() > MAX_FIELD_BYTES || s.len() > MAX_FIELD_BYTES {
            return Err(format!(
                "version: field names must be 1 to {MAX_FIELD_BYTES} bytes and values at most {MAX_FIELD_BYTES}"
            ));
        }
    }
    Ok(())
}

/// `key:value` pairs (fly's `-v`) as a version's fields.
pub fn parse_version_flags(flags: &[String]) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for f in flags {
        let Some((k, v)) = f.split_once(':') else {
            return Err(format!("version {f:?} is not KEY:VALUE"));
        };
        out.insert(k.to_string(), Value::String(v.to_string()));
    }
    check_version_fields(&out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn version_fields_are_checked() {
        let ok = |v: Value| check_version_fields(v.as_object().unwrap());
        assert!(ok(json!({"ref": "abc"})).is_ok());
        assert!(ok(json!({})).is_err());
        assert!(ok(json!({"ref": 1})).is_err());
        assert!(ok(json!({"": "x"})).is_err());
        assert!(ok(json!({"ref": "x".repeat(MAX_FIELD_BYTES + 1)})).is_err());
        let many: Map<String, Value> = (0..=MAX_VERSION_FIELDS)
            .map(|i| (format!("k{i}"), json!("v")))
            .collect();
        assert!(check_version_fields(&many).is_err());
    }

    #[test]
    fn flags_parse_as_fly_does() {
        let flags =
            |f: &[&str]| parse_version_flags(&f.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            flags(&["ref:a:b", "branch:main"]).unwrap(),
            *json!({"ref": "a:b", "branch": "main"}).as_object().unwrap()
        );
        assert!(flags(&["nocolon"]).is_err());
        assert!(flags(&[]).is_err());
    }
}
