//! Admitting a worker by its pod's service-account token (Kubernetes
//! TokenReview): which accounts may register workers, and what a review's
//! answer lets a worker register as.
//!
//! Web sends the token the worker presents to the API server's TokenReview
//! and reads the answer here. The token must be one the kubelet bound to a
//! pod (a projected token: the review names the pod), for the audience web
//! expects, of a service account an operator admitted
//! (`--kubernetes-worker-account NAMESPACE:NAME[:TEAM]`). The worker may
//! then register under its pod's name only, and as the account's team's
//! worker (or a shared one): a stolen token draws no other name's work,
//! and stops working when the pod is gone.

use serde::Deserialize;

use crate::names::validate_worker_name;

/// The key of the pod's name in a review's user extras.
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// The prefix of a service account's user name.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// A service account whose pods may register workers, and as whose team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmittedAccount {
    pub namespace: String,
    pub name: String,
    /// `Some`: its pods register as that team's workers only.
    pub team: Option<String>,
}

impl AdmittedAccount {
    /// Reads `NAMESPACE:NAME` or `NAMESPACE:NAME:TEAM`.
    pub fn parse(flag: &str) -> Result<AdmittedAccount, String> {
        let parts: Vec<&str> = flag.split(':').collect();
        let (namespace, name, team) = match parts[..] {
            [ns, name] => (ns, name, None),
            [ns, name, team] => (ns, name, Some(team)),
            _ => {
                return Err(format!(
                    "{flag:?}: expected NAMESPACE:SERVICEACCOUNT or NAMESPACE:SERVICEACCOUNT:TEAM"
                ))
            }
        };
        for (what, value) in [("namespace", namespace), ("service account", name)] {
            let dns = !value.is_empty()
                && value.len() <= 253
                && value.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                });
            if !dns {
                return Err(format!(
                    "{flag:?}: the {what} is not a Kubernetes name (lowercase letters, digits, '-', '.')"
                ));
            }
        }
        if let Some(team) = team {
            crate::names::validate_label(team).map_err(|e| format!("{flag:?}: team: {e}"))?;
        }
        Ok(AdmittedAccount {
            namespace: namespace.into(),
            name: name.into(),
            team: team.map(str::to_string),
        })
    }

    fn user_name(&self) -> String {
        format!("{SERVICE_ACCOUNT_PREFIX}{}:{}", self.namespace, self.name)
    }
}

/// What a review admits: the worker name it may register, and its team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodWorker {
    pub pod: String,
    pub team: Option<String>,
}

/// Why a review admits nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewRefusal {
    /// The API server does not vouch for the token (or not for this
    /// audience): answered as any unknown credential.
    NotAuthenticated(String),
    /// The token is good but may not register a worker.
    NotAdmitted(String),
    /// The answer is not a TokenReview.
    Malformed(String),
}

#[derive(Deserialize)]
struct Review {
    status: Option<Status>,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    authenticated: bool,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    audiences: Vec<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct User {
    #[serde(default)]
    username: String,
    #[serde(default)]
    extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// What the TokenReview answer `body` admits, for a review that asked for
/// `audience`, given the `admitted` accounts.
pub fn admit(
    body: &[u8],
    audience: &str,
    admitted: &[AdmittedAccount],
) -> Result<PodWorker, ReviewRefusal> {
    let review: Review = serde_json::from_slice(body)
        .map_err(|e| ReviewRefusal::Malformed(format!("not a TokenReview: {e}")))?;
    let status = review
        .status
        .ok_or_else(|| ReviewRefusal::Malformed("a TokenReview without a status".into()))?;
    if !status.authenticated {
        let why = status.error.unwrap_or_default();
        return Err(ReviewRefusal::NotAuthenticated(format!(
            "the API server does not vouch for this token{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(": {}", crate::names::shorten(&why))
            }
        )));
    }
    // A token for another audience (the API server's own, another
    // program's) is not one for web.
    if !status.audiences.iter().any(|a| a == audience) {
        return Err(ReviewRefusal::NotAuthenticated(format!(
            "the token is not for the audience {audience:?}: mount a projected service account \
             token with that audience"
        )));
    }
    let user = status
        .user
        .ok_or_else(|| ReviewRefusal::Malformed("an authenticated review without a user".into()))?;
    let account = admitted
        .iter()
        .find(|a| a.user_name() == user.username)
        .ok_or_else(|| {
            ReviewRefusal::NotAdmitted(format!(
                "{} may not register workers (see --kubernetes-worker-account)",
                crate::names::shorten(&user.username)
            ))
        })?;
    let pod = match user.extra.get(POD_NAME_EXTRA).map(Vec::as_slice) {
        Some([pod]) => pod.clone(),
        _ => {
            return Err(ReviewRefusal::NotAdmitted(
                "the token is not bound to a pod: mount a projected service account token".into(),
            ))
        }
    };
    validate_worker_name(&pod).map_err(|e| {
        ReviewRefusal::NotAdmitted(format!("the pod's name is no worker name: {e}"))
    })?;
    Ok(PodWorker {
        pod,
        team: account.team.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn review(authenticated: bool, user: &str, pods: &[&str], audiences: &[&str]) -> Vec<u8> {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "status": {"authenticated": authenticated, "audiences": audiences,
                "user": {"username": user, "groups": ["system:serviceaccounts"],
                    "extra": {POD_NAME_EXTRA: pods}}}})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn accounts_are_read_from_their_flags_or_refused() {
        assert_eq!(
            AdmittedAccount::parse("ci:hangar-worker").unwrap(),
            AdmittedAccount {
                namespace: "ci".into(),
                name: "hangar-worker".into(),
                team: None
            }
        );
        assert_eq!(
            AdmittedAccount::parse("ci:team-a-worker:a")
                .unwrap()
                .team
                .as_deref(),
            Some("a")
        );
        for bad in [
            "ci",
            "ci:",
            ":w",
            "ci:w:a:b",
            "Ci:w",
            "ci:w w",
            "ci:w:bad team",
            "ci:w\u{202e}",
        ] {
            assert!(AdmittedAccount::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_review_admits_its_pod_s_name_and_its_account_s_team_or_says_why_not() {
        let admitted = [
            AdmittedAccount::parse("ci:shared").unwrap(),
            AdmittedAccount::parse("ci:team-a:a").unwrap(),
        ];
        let shared = "system:serviceaccount:ci:shared";
        assert_eq!(
            admit(
                &review(true, shared, &["worker-0"], &["hangar"]),
                "hangar",
                &admitted
            ),
            Ok(PodWorker {
                pod: "worker-0".into(),
                team: None
            })
        );
        assert_eq!(
            admit(
                &review(
                    true,
                    "system:serviceaccount:ci:team-a",
                    &["a-0"],
                    &["hangar"]
                ),
                "hangar",
                &admitted
            )
            .unwrap()
            .team
            .as_deref(),
            Some("a")
        );
        let refused: [(Vec<u8>, &str); 9] = [
            (review(false, shared, &["w"], &["hangar"]), "does not vouch"),
            (
                review(true, shared, &["w"], &["https://kubernetes.default.svc"]),
                "audience",
            ),
            (review(true, shared, &["w"], &[]), "audience"),
            (
                review(
                    true,
                    "system:serviceaccount:other:shared",
                    &["w"],
                    &["hangar"],
                ),
                "may not register",
            ),
            (
                review(
                    true,
                    "system:serviceaccount:ci:shared:x",
                    &["w"],
                    &["hangar"],
                ),
                "may not register",
            ),
            (review(true, shared, &[], &["hangar"]), "not bound to a pod"),
            (
                review(true, shared, &["a", "b"], &["hangar"]),
                "not bound to a pod",
            ),
            (
                review(true, shared, &["bad/name"], &["hangar"]),
                "no worker name",
            ),
            (b"{\"kind\":\"Status\"}".to_vec(), "without a status"),
        ];
        for (body, why) in refused {
            let e = admit(&body, "hangar", &admitted).unwrap_err();
            let text = format!("{e:?}");
            assert!(
                text.contains(why),
                "{}: {text}",
                String::from_utf8_lossy(&body)
            );
        }
        assert!(matches!(
            admit(b"<html>", "hangar", &admitted),
            Err(ReviewRefusal::Malformed(_))
        ));
    }
}
