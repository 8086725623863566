//! Who an OIDC login is: the user and groups web reads from an ID token's
//! claims, once the token's signature, issuer, audience, expiry and nonce
//! have been checked. The claims come from a provider an operator trusts,
//! but the names they carry still end up in team configs, logs and pages,
//! so they are held to the rules team configs are.

use serde_json::Value;

use super::team_auth::{check_entry, MAX_ENTRIES};
use super::Identity;

/// Which claims name the user and their groups (Concourse's
/// `--oidc-user-name-key` and `--oidc-groups-key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimKeys {
    pub user_name: String,
    /// `None` ignores groups (Concourse's `--oidc-disable-groups`).
    pub groups: Option<String>,
}

impl Default for ClaimKeys {
    /// Concourse's defaults.
    fn default() -> ClaimKeys {
        ClaimKeys {
            user_name: "username".into(),
            groups: Some("groups".into()),
        }
    }
}

/// The claim read when the configured user name claim is absent: the
/// standard one, which most providers send.
const FALLBACK_USER_NAME: &str = "preferred_username";

/// The identity an ID token's verified `claims` (its payload) make.
pub fn identity_from_claims(claims: &Value, keys: &ClaimKeys) -> Result<Identity, String> {
    let subject = claims
        .get("sub")
        .and_then(Value::as_str)
        .ok_or("the ID token has no subject (sub)")?;
    check_entry("the subject", subject).map_err(|e| e.to_string())?;
    let user_name = match claims
        .get(&keys.user_name)
        .or_else(|| claims.get(FALLBACK_USER_NAME))
    {
        Some(Value::String(name)) => name.as_str(),
        Some(_) => return Err(format!("the ID token's {} is not a string", keys.user_name)),
        None => {
            return Err(format!(
                "the ID token names no user: it has neither {} nor {FALLBACK_USER_NAME} \
                 (set --oidc-user-name-key to the claim that does)",
                keys.user_name
            ))
        }
    };
    check_entry("the user name", user_name).map_err(|e| e.to_string())?;
    let groups = match keys.groups.as_ref().and_then(|k| claims.get(k)) {
        None | Some(Value::Null) => Vec::new(),
        // Some providers send a lone group as a string.
        Some(Value::String(g)) => vec![g.clone()],
        Some(Value::Array(list)) => {
            if list.len() > MAX_ENTRIES {
                return Err(format!(
                    "the ID token lists {} groups; at most {MAX_ENTRIES} are read",
                    list.len()
                ));
            }
            list.iter()
                .map(|g| {
                    g.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| "the ID token's groups are not all strings".to_string())
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        Some(_) => return Err("the ID token's groups are neither a list nor a string".into()),
    };
    for g in &groups {
        check_entry("a group", g).map_err(|e| e.to_string())?;
    }
    Ok(Identity {
        connector: "oidc".into(),
        user_id: subject.to_string(),
        user_name: user_name.to_string(),
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claims_make_an_identity_or_are_refused_saying_why() {
        let keys = ClaimKeys::default();
        let ok = |claims: Value| identity_from_claims(&claims, &keys).unwrap();
        let alice = ok(json!({"sub": "e-1", "username": "alice", "groups": ["devs", "ops"]}));
        assert_eq!(
            (
                alice.connector.as_str(),
                alice.user_id.as_str(),
                alice.user_name.as_str()
            ),
            ("oidc", "e-1", "alice")
        );
        assert_eq!(alice.groups, ["devs", "ops"]);
        // The standard claim when the configured one is absent; no groups.
        let bob = ok(json!({"sub": "e-2", "preferred_username": "bob"}));
        assert_eq!((bob.user_name.as_str(), bob.groups.len()), ("bob", 0));
        assert_eq!(
            ok(json!({"sub": "s", "username": "c", "groups": "g"})).groups,
            ["g"]
        );
        assert!(ok(json!({"sub": "s", "username": "c", "groups": null}))
            .groups
            .is_empty());

        let many: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("g{i}")).collect();
        let refused = [
            (json!({"username": "a"}), "no subject"),
            (json!({"sub": 7, "username": "a"}), "no subject"),
            (json!({"sub": "", "username": "a"}), "empty"),
            (json!({"sub": "s"}), "names no user"),
            (json!({"sub": "s", "username": 5}), "not a string"),
            (json!({"sub": "s", "username": "al\u{202e}ice"}), "U+202E"),
            (json!({"sub": "s", "username": "a\nb"}), "U+000A"),
            (
                json!({"sub": "s", "username": "x".repeat(257)}),
                "at most 256",
            ),
            (
                json!({"sub": "s", "username": "a", "groups": [1]}),
                "not all strings",
            ),
            (
                json!({"sub": "s", "username": "a", "groups": {"a": 1}}),
                "neither a list",
            ),
            (
                json!({"sub": "s", "username": "a", "groups": ["ok", "b\u{200b}ad"]}),
                "U+200B",
            ),
            (
                json!({"sub": "s", "username": "a", "groups": many}),
                "at most 1000",
            ),
        ];
        for (claims, why) in refused {
            let e = identity_from_claims(&claims, &keys).unwrap_err();
            assert!(e.contains(why), "{claims}: {e}");
        }
    }

    #[test]
    fn configured_keys_pick_the_claims_and_groups_can_be_ignored() {
        let keys = ClaimKeys {
            user_name: "email".into(),
            groups: None,
        };
        let claims =
            json!({"sub": "s", "email": "a@example.com", "username": "a", "groups": ["g"]});
        let who = identity_from_claims(&claims, &keys).unwrap();
        assert_eq!(who.user_name, "a@example.com");
        assert!(who.groups.is_empty(), "groups are ignored when disabled");
    }
}
