//! A team's auth config: which users and groups hold which role.
//!
//! Stored and sent as Concourse stores it: role name → `users` and
//! `groups`, each entry `connector:name` (`local:alice`, `oidc:devs`). It
//! is written by `set-team`, from Concourse's `--config` roles file
//!
//! ```yaml
//! roles:
//! - name: owner
//!   local: {users: [alice]}
//! - name: viewer
//!   oidc: {users: [bob], groups: [auditors]}
//! ```
//!
//! or from its flags (`--local-user`, `--oidc-user`, `--oidc-group`, which
//! make owners). hangar has two connectors, `local` (users web was started
//! with) and `oidc`; a config naming another (github, ldap, …) is refused
//! rather than kept and ignored. A role listing nobody is refused too:
//! Concourse reads it as "every user", which a typo should never mean.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decide::Identity;
use super::roles::Role;

/// The connectors hangar logs users in with.
pub const CONNECTORS: [&str; 2] = ["local", "oidc"];
/// The most users plus groups a team's config names.
pub const MAX_ENTRIES: usize = 1000;
/// The longest user or group name.
pub const MAX_ENTRY_LEN: usize = 256;

/// Who holds one role.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleAuth {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// A team's auth config, by role name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TeamAuth(pub BTreeMap<String, RoleAuth>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamAuthError(pub String);

impl fmt::Display for TeamAuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TeamAuthError {}

fn err(message: impl Into<String>) -> TeamAuthError {
    TeamAuthError(message.into())
}

/// Checks one user or group name (without its connector).
pub(crate) fn check_entry(what: &str, name: &str) -> Result<(), TeamAuthError> {
    if name.is_empty() {
        return Err(err(format!("{what}: an empty name")));
    }
    if name.len() > MAX_ENTRY_LEN {
        return Err(err(format!(
            "{what}: a name of {} bytes; at most {MAX_ENTRY_LEN}",
            name.len()
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_control() || crate::pipeline::is_bidi_or_invisible(*c))
    {
        return Err(err(format!(
            "{what}: {:?} holds the character U+{:04X}, a control, bidirectional or invisible \
             character",
            crate::names::shorten(name),
            c as u32
        )));
    }
    Ok(())
}

impl TeamAuth {
    /// The auth of `set-team`'s flags: the users and groups given, as owners.
    pub fn owners(
        local_users: &[String],
        oidc_users: &[String],
        oidc_groups: &[String],
    ) -> Result<TeamAuth, TeamAuthError> {
        let mut owner = RoleAuth::default();
        owner
            .users
            .extend(local_users.iter().map(|u| format!("local:{u}")));
        owner
            .users
            .extend(oidc_users.iter().map(|u| format!("oidc:{u}")));
        owner
            .groups
            .extend(oidc_groups.iter().map(|g| format!("oidc:{g}")));
        let auth = TeamAuth(BTreeMap::from([(Role::Owner.as_str().to_string(), owner)]));
        auth.validate()?;
        Ok(auth)
    }

    /// Reads Concourse's `set-team --config` file, already parsed from
    /// YAML (or JSON) into a value.
    pub fn from_config(config: &Value) -> Result<TeamAuth, TeamAuthError> {
        let object = config
            .as_object()
            .ok_or_else(|| err("the config is not a mapping with a roles: list"))?;
        if let Some(key) = object.keys().find(|k| *k != "roles") {
            return Err(err(format!(
                "unknown key {:?}: the config holds only roles:",
                crate::names::shorten(key)
            )));
        }
        let roles = object
            .get("roles")
            .and_then(Value::as_array)
            .ok_or_else(|| err("roles: expected a list of roles"))?;
        let mut auth = TeamAuth::default();
        for (i, role) in roles.iter().enumerate() {
            let at = format!("roles[{i}]");
            let role = role
                .as_object()
                .ok_or_else(|| err(format!("{at}: expected a mapping")))?;
            let name = role
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| err(format!("{at}.name: expected a role name")))?;
            if Role::parse(name).is_none() {
                return Err(err(format!(
                    "{at}.name: unknown role {:?}; the roles are owner, member, pipeline-operator \
                     and viewer",
                    crate::names::shorten(name)
                )));
            }
            if auth.0.contains_key(name) {
                return Err(err(format!("{at}.name: role {name} is given twice")));
            }
            let mut holders = RoleAuth::default();
            for (connector, by) in role.iter().filter(|(k, _)| *k != "name") {
                if !CONNECTORS.contains(&connector.as_str()) {
                    return Err(err(format!(
                        "{at}.{}: hangar has no such connector; it logs users in as local users \
                         or through OIDC (local:, oidc:)",
                        crate::names::shorten(connector)
                    )));
                }
                let by = by
                    .as_object()
                    .ok_or_else(|| err(format!("{at}.{connector}: expected users: and groups:")))?;
                for (kind, names) in by {
                    let list = match kind.as_str() {
                        "users" => &mut holders.users,
                        "groups" if connector == "oidc" => &mut holders.groups,
                        "groups" => {
                            return Err(err(format!(
                                "{at}.{connector}.groups: local users have no groups"
                            )))
                        }
                        other => {
                            return Err(err(format!(
                                "{at}.{connector}: unknown key {:?}; expected users: or groups:",
                                crate::names::shorten(other)
                            )))
                        }
                    };
                    let names = names.as_array().ok_or_else(|| {
                        err(format!("{at}.{connector}.{kind}: expected a list of names"))
                    })?;
                    for n in names {
                        let n = n.as_str().ok_or_else(|| {
                            err(format!(
                                "{at}.{connector}.{kind}: expected names as strings"
                            ))
                        })?;
                        list.push(format!("{connector}:{n}"));
                    }
                }
            }
            auth.0.insert(name.to_string(), holders);
        }
        auth.validate()?;
        Ok(auth)
    }

    /// Checks a config from anywhere (a file, the API, the database): known
    /// roles and connectors, sane names, nobody-roles refused, bounded.
    pub fn validate(&self) -> Result<(), TeamAuthError> {
        if self.0.is_empty() {
            return Err(err(
                "the team gives no role to anyone: name at least one user or group",
            ));
        }
        let mut total = 0;
        for (role, holders) in &self.0 {
            if Role::parse(role).is_none() {
                return Err(err(format!(
                    "unknown role {:?}",
                    crate::names::shorten(role)
                )));
            }
            if holders.users.is_empty() && holders.groups.is_empty() {
                return Err(err(format!(
                    "role {role} names no user and no group; hangar refuses it where Concourse \
                     would give it to every user who can log in"
                )));
            }
            total += holders.users.len() + holders.groups.len();
            if total > MAX_ENTRIES {
                return Err(err(format!(
                    "more than {MAX_ENTRIES} users and groups in one team"
                )));
            }
            for (kind, entries) in [("users", &holders.users), ("groups", &holders.groups)] {
                for entry in entries {
                    let what = format!("{role} {kind}");
                    let (connector, name) = entry.split_once(':').ok_or_else(|| {
                        err(format!(
                            "{what}: {:?} names no connector (local:NAME or oidc:NAME)",
                            crate::names::shorten(entry)
                        ))
                    })?;
                    if !CONNECTORS.contains(&connector) {
                        return Err(err(format!(
                            "{what}: connector {:?} is not one hangar has (local, oidc)",
                            crate::names::shorten(connector)
                        )));
                    }
                    if kind == "groups" && connector == "local" {
                        return Err(err(format!("{what}: local users have no groups")));
                    }
                    check_entry(&what, name)?;
                }
            }
        }
        Ok(())
    }

    /// The highest role this config gives `who`, if any. Names compare
    /// without case, as Concourse compares them.
    pub fn role_of(&self, who: &Identity) -> Option<Role> {
        let connector = who.connector.as_str();
        let named = |entry: &str| {
            entry.split_once(':').is_some_and(|(c, n)| {
                c == connector
                    && (n.eq_ignore_ascii_case(&who.user_name)
                        || (!who.user_id.is_empty() && n.eq_ignore_ascii_case(&who.user_id)))
            })
        };
        let in_group = |entry: &str| {
            entry.split_once(':').is_some_and(|(c, n)| {
                c == connector && who.groups.iter().any(|g| g.eq_ignore_ascii_case(n))
            })
        };
        self.0
            .iter()
            .filter(|(_, holders)| {
                holders.users.iter().any(|u| named(u)) || holders.groups.iter().any(|g| in_group(g))
            })
            .filter_map(|(role, _)| Role::parse(role))
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn local(name: &str) -> Identity {
        Identity {
            connector: "local".into(),
            user_id: name.into(),
            user_name: name.into(),
            groups: vec![],
        }
    }

    fn oidc(name: &str, groups: &[&str]) -> Identity {
        Identity {
            connector: "oidc".into(),
            user_id: format!("sub-{name}"),
            user_name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn a_config_file_gives_each_identity_its_highest_role() {
        let auth = TeamAuth::from_config(&json!({"roles": [
            {"name": "owner", "local": {"users": ["alice"]}},
            {"name": "member", "oidc": {"users": ["carol"], "groups": ["devs"]}},
            {"name": "viewer", "local": {"users": ["bob", "Alice"]}, "oidc": {"groups": ["auditors"]}},
        ]}))
        .unwrap();
        let cases = [
            (local("alice"), Some(Role::Owner)),
            (local("ALICE"), Some(Role::Owner)),
            (local("bob"), Some(Role::Viewer)),
            (local("carol"), None),
            (oidc("carol", &[]), Some(Role::Member)),
            (oidc("dave", &["devs"]), Some(Role::Member)),
            (oidc("erin", &["auditors", "devs"]), Some(Role::Member)),
            (oidc("frank", &["auditors"]), Some(Role::Viewer)),
            (oidc("alice", &[]), None),
            (oidc("gina", &["others"]), None),
        ];
        for (who, role) in cases {
            assert_eq!(auth.role_of(&who), role, "{who:?}");
        }
    }

    #[test]
    fn an_oidc_user_is_matched_by_subject_too() {
        let auth = TeamAuth::owners(&[], &["sub-zed".into()], &[]).unwrap();
        assert_eq!(auth.role_of(&oidc("zed", &[])), Some(Role::Owner));
        assert_eq!(auth.role_of(&local("sub-zed")), None);
    }

    #[test]
    fn flags_make_owners() {
        let auth = TeamAuth::owners(&["alice".into()], &["bob".into()], &["devs".into()]).unwrap();
        let owner = &auth.0["owner"];
        assert_eq!(owner.users, ["local:alice", "oidc:bob"]);
        assert_eq!(owner.groups, ["oidc:devs"]);
        assert_eq!(
            TeamAuth::owners(&[], &[], &[]).unwrap_err().0,
            "role owner names no user and no group; hangar refuses it where Concourse would give \
             it to every user who can log in"
        );
    }

    #[test]
    fn hostile_and_malformed_configs_are_refused_saying_why() {
        let long = "x".repeat(MAX_ENTRY_LEN + 1);
        let many: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("u{i}")).collect();
        let cases = [
            (json!([]), "the config is not a mapping"),
            (json!({"roles": {}}), "roles: expected a list"),
            (json!({"roles": [], "teams": 1}), "unknown key \"teams\""),
            (json!({"roles": []}), "the team gives no role to anyone"),
            (
                json!({"roles": [{"name": "admin", "local": {"users": ["a"]}}]}),
                "unknown role \"admin\"",
            ),
            (
                json!({"roles": [{"local": {"users": ["a"]}}]}),
                "roles[0].name: expected",
            ),
            (
                json!({"roles": [{"name": "owner", "github": {"users": ["a"]}}]}),
                "roles[0].github: hangar has no such connector",
            ),
            (
                json!({"roles": [{"name": "owner", "local": {"groups": ["g"]}}]}),
                "local users have no groups",
            ),
            (
                json!({"roles": [{"name": "owner", "local": {"teams": ["g"]}}]}),
                "unknown key \"teams\"",
            ),
            (
                json!({"roles": [{"name": "owner", "local": {"users": "a"}}]}),
                "expected a list of names",
            ),
            (
                json!({"roles": [{"name": "owner", "local": {"users": [1]}}]}),
                "expected names as strings",
            ),
            (
                json!({"roles": [{"name": "owner", "local": {"users": []}}]}),
                "role owner names no user",
            ),
            (
                json!({"roles": [{"name": "owner", "local": {"users": ["a"]}}, {"name": "owner", "local": {"users": ["b"]}}]}),
                "role owner is given twice",
            ),
            (
                json!({"roles": [{"name": "owner", "local": {"users": [""]}}]}),
                "an empty name",
            ),
            (
                json!({"roles": [{"name": "owner", "local": {"users": [long]}}]}),
                "at most 256",
            ),
            (
                json!({"roles": [{"name": "owner", "local": {"users": ["a\u{202e}b"]}}]}),
                "U+202E",
            ),
            (
                json!({"roles": [{"name": "owner", "local": {"users": ["a\nb"]}}]}),
                "U+000A",
            ),
            (
                json!({"roles": [{"name": "owner", "local": {"users": many}}]}),
                "more than 1000",
            ),
        ];
        for (config, expected) in cases {
            let e = TeamAuth::from_config(&config).unwrap_err();
            assert!(e.0.contains(expected), "{config}: {e}");
        }
    }

    #[test]
    fn stored_auth_is_checked_as_strictly_as_a_file() {
        let cases = [
            (json!({}), "gives no role"),
            (json!({"owner": {"users": ["alice"]}}), "names no connector"),
            (
                json!({"owner": {"users": ["ldap:alice"]}}),
                "connector \"ldap\"",
            ),
            (
                json!({"owner": {"groups": ["local:g"]}}),
                "local users have no groups",
            ),
            (json!({"root": {"users": ["local:a"]}}), "unknown role"),
        ];
        for (stored, expected) in cases {
            let auth: TeamAuth = serde_json::from_value(stored.clone()).unwrap();
            let e = auth.validate().unwrap_err();
            assert!(e.0.contains(expected), "{stored}: {e}");
        }
    }

    #[test]
    fn the_stored_form_is_concourse_s() {
        let auth = TeamAuth::from_config(&json!({"roles": [
            {"name": "owner", "local": {"users": ["alice"]}, "oidc": {"groups": ["devs"]}},
        ]}))
        .unwrap();
        assert_eq!(
            serde_json::to_value(&auth).unwrap(),
            json!({"owner": {"users": ["local:alice"], "groups": ["oidc:devs"]}})
        );
    }
}
