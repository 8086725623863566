//! The Vault backend against a real OpenBao dev server (see `bao.rs`), and
//! against a hostile HTTP server for what Vault itself never answers.

use std::collections::BTreeMap;
use std::time::Duration;

use hangar_core::vars::interpolate_with;
use hangar_creds::cache::Cache;
use hangar_creds::vault::{Auth, VaultConfig, VaultSecrets};
use hangar_creds::{Credentials, CredsError, Manager};
use serde_json::{json, Value};

use hangar_testkit::openbao::Bao;

fn creds(vault: &VaultSecrets) -> Credentials {
    Credentials::new(Manager::Vault(vault.clone()), Cache::off())
}

fn start(config: VaultConfig) -> VaultSecrets {
    VaultSecrets::start(config).unwrap()
}

/// `template` resolved for `team`/`pipeline` and interpolated.
async fn get(
    c: &Credentials,
    template: Value,
    team: &str,
    pipeline: Option<&str>,
) -> Result<Value, String> {
    let resolved = c
        .resolve(&template, team, pipeline)
        .await
        .map_err(|e| e.to_string())?;
    interpolate_with(&template, &resolved).map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_kv1_secret_is_read_at_the_pipeline_path_before_the_team_path() {
    let bao = Bao::start().await;
    bao.mount_kv("concourse", 1).await;
    bao.post(
        "concourse/main/deploy/token",
        json!({"value": "pipe-token"}),
    )
    .await;
    bao.post("concourse/main/token", json!({"value": "team-token"}))
        .await;
    bao.post(
        "concourse/main/db",
        json!({"user": "admin", "password": "pw"}),
    )
    .await;
    let vault = start(VaultConfig::new(&bao.url, Auth::Token(bao.root.clone())));
    let c = creds(&vault);
    let template = json!({"t": "((token))", "u": "((db.user)):((db.password))"});
    assert_eq!(
        get(&c, template.clone(), "main", Some("deploy"))
            .await
            .unwrap(),
        json!({"t": "pipe-token", "u": "admin:pw"})
    );
    // Another pipeline, and a one-off build: the team's.
    assert_eq!(
        get(&c, json!("((token))"), "main", Some("other"))
            .await
            .unwrap(),
        json!("team-token")
    );
    assert_eq!(
        get(&c, json!("((token))"), "main", None).await.unwrap(),
        json!("team-token")
    );
    // Another team sees none of main's.
    assert_eq!(
        get(&c, json!("((token))"), "other", Some("deploy"))
            .await
            .unwrap_err(),
        "undefined vars: token"
    );
    let resolved = c.resolve(&template, "main", Some("deploy")).await.unwrap();
    let mut secrets = resolved.secret_values();
    secrets.sort();
    assert_eq!(secrets, ["admin", "pipe-token", "pw"]);
}

#[tokio::test]
async fn a_kv2_secret_is_read_at_the_team_path_when_the_pipeline_path_has_none() {
    let bao = Bao::start().await;
    bao.mount_kv("ci", 2).await;
    bao.post(
        "ci/data/main/db",
        json!({"data": {"user": "admin", "password": "pw", "port": 5432}}),
    )
    .await;
    bao.post(
        "ci/data/main/deploy/token",
        json!({"data": {"value": "v2-pipe"}}),
    )
    .await;
    let mut config = VaultConfig::new(&bao.url, Auth::Token(bao.root.clone()));
    config.path_prefix = "/ci".into();
    let vault = start(config);
    let c = creds(&vault);
    assert_eq!(
        get(
            &c,
            json!({"u": "((db.user))", "p": "((db.port))", "all": "((db))", "t": "((token))"}),
            "main",
            Some("deploy")
        )
        .await
        .unwrap(),
        json!({"u": "admin", "p": 5432, "all": {"user": "admin", "password": "pw", "port": 5432}, "t": "v2-pipe"})
    );
    // A token whose policy names only the v2 data paths (the usual policy
    // for a KV v2 mount) may still ask which mount holds a path.
    bao.read_policy("v2-data", &["ci/data/*"]).await;
    let token = bao
        .post("auth/token/create", json!({"policies": ["v2-data"]}))
        .await["auth"]["client_token"]
        .as_str()
        .unwrap()
        .to_string();
    let mut config = VaultConfig::new(&bao.url, Auth::Token(token));
    config.path_prefix = "/ci".into();
    let c = creds(&start(config));
    assert_eq!(
        get(&c, json!("((db.user))"), "main", Some("deploy"))
            .await
            .unwrap(),
        json!("admin")
    );
}

#[tokio::test]
async fn the_shared_path_is_read_after_the_team_paths_and_custom_templates_replace_the_defaults() {
    let bao = Bao::start().await;
    bao.mount_kv("concourse", 1).await;
    bao.post(
        "concourse/shared/registry",
        json!({"value": "shared-registry"}),
    )
    .await;
    bao.post("concourse/main/registry", json!({"value": "team-registry"}))
        .await;
    bao.post("concourse/teams/main/only", json!({"value": "templated"}))
        .await;
    let mut config = VaultConfig::new(&bao.url, Auth::Token(bao.root.clone()));
    config.shared_path = Some("shared".into());
    let c = creds(&start(config.clone()));
    assert_eq!(
        get(&c, json!("((registry))"), "main", Some("p"))
            .await
            .unwrap(),
        json!("team-registry")
    );
    assert_eq!(
        get(&c, json!("((registry))"), "other", Some("p"))
            .await
            .unwrap(),
        json!("shared-registry")
    );
    config.lookup_templates = vec!["/teams/{{.Team}}/{{.Secret}}".into()];
    let c = creds(&start(config));
    assert_eq!(
        get(&c, json!("((only))"), "main", Some("p")).await.unwrap(),
        json!("templated")
    );
    // The default team path is no longer tried; the shared path still is.
    assert_eq!(
        get(&c, json!("((registry))"), "main", None).await.unwrap(),
        json!("shared-registry")
    );
}

#[tokio::test]
async fn a_var_in_no_path_a_deleted_kv2_secret_and_an_unmounted_prefix_are_undefined() {
    let bao = Bao::start().await;
    bao.mount_kv("concourse", 2).await;
    bao.post("concourse/data/main/gone", json!({"data": {"value": "x"}}))
        .await;
    bao.api(
        reqwest::Method::DELETE,
        "concourse/data/main/gone",
        Value::Null,
    )
    .await;
    let c = creds(&start(VaultConfig::new(
        &bao.url,
        Auth::Token(bao.root.clone()),
    )));
    assert_eq!(
        get(&c, json!("((nowhere)) ((gone))"), "main", Some("p"))
            .await
            .unwrap_err(),
        "undefined vars: gone, nowhere"
    );
    // The same mount's live secret is found: the deleted one is absent for
    // being deleted.
    bao.post("concourse/data/main/kept", json!({"data": {"value": "k"}}))
        .await;
    assert_eq!(
        get(&c, json!("((kept))"), "main", Some("p")).await.unwrap(),
        json!("k")
    );
    let mut config = VaultConfig::new(&bao.url, Auth::Token(bao.root.clone()));
    config.path_prefix = "/not-mounted".into();
    let c = creds(&start(config));
    assert_eq!(
        get(&c, json!("((x))"), "main", None).await.unwrap_err(),
        "undefined vars: x"
    );
}

#[tokio::test]
async fn reads_go_to_the_configured_namespace() {
    let bao = Bao::start().await;
    bao.post("sys/namespaces/team-ns", json!({})).await;
    let ns = Some("team-ns");
    bao.api_in(
        ns,
        reqwest::Method::POST,
        "sys/mounts/concourse",
        json!({"type": "kv", "options": {"version": "2"}}),
    )
    .await;
    bao.api_in(
        ns,
        reqwest::Method::POST,
        "concourse/data/main/token",
        json!({"data": {"value": "in-namespace"}}),
    )
    .await;
    let mut config = VaultConfig::new(&bao.url, Auth::Token(bao.root.clone()));
    config.namespace = Some("team-ns".into());
    let c = creds(&start(config));
    assert_eq!(
        get(&c, json!("((token))"), "main", None).await.unwrap(),
        json!("in-namespace")
    );
    // The root namespace has no such mount.
    let c = creds(&start(VaultConfig::new(
        &bao.url,
        Auth::Token(bao.root.clone()),
    )));
    assert_eq!(
        get(&c, json!("((token))"), "main", None).await.unwrap_err(),
        "undefined vars: token"
    );
}

#[tokio::test]
async fn a_tls_vault_is_trusted_through_the_given_ca_and_refused_without_it() {
    let bao = Bao::start_with(true).await;
    assert!(bao.url.starts_with("https://"));
    bao.mount_kv("concourse", 1).await;
    bao.post("concourse/main/token", json!({"value": "over-tls"}))
        .await;
    let mut config = VaultConfig::new(&bao.url, Auth::Token(bao.root.clone()));
    config.ca_cert = bao.ca.clone();
    let c = creds(&start(config));
    assert_eq!(
        get(&c, json!("((token))"), "main", None).await.unwrap(),
        json!("over-tls")
    );
    let c = creds(&start(VaultConfig::new(
        &bao.url,
        Auth::Token(bao.root.clone()),
    )));
    let err = c
        .resolve(&json!("((token))"), "main", None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CredsError::Backend(m)
            if m.contains("cannot reach Vault") && m.contains("certificate")),
        "{err}"
    );
}

#[tokio::test]
async fn a_refused_token_is_an_error_never_an_undefined_var() {
    let bao = Bao::start().await;
    bao.mount_kv("concourse", 1).await;
    bao.post("concourse/main/token", json!({"value": "t"}))
        .await;
    let c = creds(&start(VaultConfig::new(
        &bao.url,
        Auth::Token("not-a-token".into()),
    )));
    let err = c
        .resolve(&json!("((token))"), "main", None)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        CredsError::Backend(
            "var token: Vault path concourse/main/token: Vault refused (HTTP 403): permission \
             denied; web's token needs `read` on it"
                .into()
        )
    );
}

#[tokio::test]
async fn a_vault_that_is_down_is_an_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = creds(&start(VaultConfig::new(
        &format!("http://127.0.0.1:{port}"),
        Auth::Token("t".into()),
    )));
    let err = c.resolve(&json!("((x))"), "main", None).await.unwrap_err();
    assert!(
        matches!(&err, CredsError::Backend(m) if m.starts_with("var x: Vault path concourse/main/x: asking for its mount: cannot reach Vault")),
        "{err}"
    );
}

#[tokio::test]
async fn approle_logs_in_and_renews_its_token_before_it_expires() {
    let bao = Bao::start().await;
    bao.mount_kv("concourse", 1).await;
    bao.post("concourse/main/token", json!({"value": "by-approle"}))
        .await;
    bao.read_policy("ci", &["concourse/*"]).await;
    let (role_id, secret_id) = bao.approle("ci", "ci", "2s", "1h").await;
    let vault = start(VaultConfig::new(
        &bao.url,
        Auth::Backend {
            backend: "approle".into(),
            params: BTreeMap::from([
                ("role_id".to_string(), role_id),
                ("secret_id".to_string(), secret_id),
            ]),
        },
    ));
    let c = creds(&vault);
    assert_eq!(
        get(&c, json!("((token))"), "main", None).await.unwrap(),
        json!("by-approle")
    );
    // Three TTLs later the token is still good: it was renewed, not
    // replaced.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        get(&c, json!("((token))"), "main", None).await.unwrap(),
        json!("by-approle")
    );
    assert_eq!(vault.logins(), 1);
    assert!(vault.renewals() >= 3, "renewals: {}", vault.renewals());
}

#[tokio::test]
async fn approle_logs_in_again_when_the_token_reaches_its_max_ttl() {
    let bao = Bao::start().await;
    bao.mount_kv("concourse", 1).await;
    bao.post("concourse/main/token", json!({"value": "v"}))
        .await;
    bao.read_policy("ci", &["concourse/*"]).await;
    let (role_id, secret_id) = bao.approle("ci", "ci", "2s", "3s").await;
    let params = BTreeMap::from([
        ("role_id".to_string(), role_id),
        ("secret_id".to_string(), secret_id),
    ]);
    let vault = start(VaultConfig::new(
        &bao.url,
        Auth::Backend {
            backend: "approle".into(),
            params: params.clone(),
        },
    ));
    let c = creds(&vault);
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        get(&c, json!("((token))"), "main", None).await.unwrap(),
        json!("v")
    );
    assert!(vault.logins() >= 2, "logins: {}", vault.logins());

    // --vault-auth-backend-max-ttl: a new login even though Vault would
    // renew.
    let (role_id, secret_id) = bao.approle("long", "ci", "1h", "2h").await;
    let mut config = VaultConfig::new(
        &bao.url,
        Auth::Backend {
            backend: "approle".into(),
            params: BTreeMap::from([
                ("role_id".to_string(), role_id),
                ("secret_id".to_string(), secret_id),
            ]),
        },
    );
    config.auth_max_ttl = Some(Duration::from_secs(1));
    let vault = start(config);
    let c = creds(&vault);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(
        get(&c, json!("((token))"), "main", None).await.unwrap(),
        json!("v")
    );
    assert!(vault.logins() >= 3, "logins: {}", vault.logins());
    assert_eq!(vault.renewals(), 0);
}

#[tokio::test]
async fn a_refused_login_fails_reads_with_vaults_reason_after_the_login_timeout() {
    let bao = Bao::start().await;
    bao.read_policy("ci", &["concourse/*"]).await;
    let (role_id, _) = bao.approle("ci", "ci", "1m", "1h").await;
    let mut config = VaultConfig::new(
        &bao.url,
        Auth::Backend {
            backend: "approle".into(),
            params: BTreeMap::from([
                ("role_id".to_string(), role_id),
                ("secret_id".to_string(), "wrong".to_string()),
            ]),
        },
    );
    config.login_timeout = Duration::from_secs(2);
    let c = creds(&start(config));
    let err = c.resolve(&json!("((x))"), "main", None).await.unwrap_err();
    assert!(
        matches!(&err, CredsError::Backend(m)
            if m.starts_with("var x: Vault path concourse/main/x: web could not log in to Vault within 2s: Vault refused the login at auth/approle/login (HTTP 400)")),
        "{err}"
    );
}

#[tokio::test]
async fn a_given_token_is_renewed_while_it_is_renewable() {
    let bao = Bao::start().await;
    bao.mount_kv("concourse", 1).await;
    bao.post("concourse/main/token", json!({"value": "v"}))
        .await;
    bao.read_policy("ci", &["concourse/*"]).await;
    let token = bao
        .post(
            "auth/token/create",
            json!({"policies": ["ci"], "ttl": "2s", "explicit_max_ttl": "1h"}),
        )
        .await["auth"]["client_token"]
        .as_str()
        .unwrap()
        .to_string();
    let vault = start(VaultConfig::new(&bao.url, Auth::Token(token)));
    let c = creds(&vault);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        get(&c, json!("((token))"), "main", None).await.unwrap(),
        json!("v")
    );
    assert!(vault.renewals() >= 2, "renewals: {}", vault.renewals());
}

#[tokio::test]
async fn var_names_that_are_not_one_path_segment_are_refused_before_any_request() {
    // Nothing listens here: a request would be a Backend error.
    let c = creds(&start(VaultConfig::new(
        "http://127.0.0.1:9",
        Auth::Token("t".into()),
    )));
    let long = format!("(({}))", "x".repeat(254));
    for (template, why) in [
        (r#"((".."))"#, "is '.' or '..'"),
        (r#"(("a/b"))"#, "holds a path separator"),
        ("((up/outside))", "holds a path separator"),
        (long.as_str(), "is longer than 253 bytes"),
    ] {
        let got = c.resolve(&json!(template), "main", None).await;
        assert!(
            matches!(&got, Err(CredsError::Invalid(m)) if m.contains(why)),
            "{template}: {got:?}"
        );
    }
}

#[test]
fn a_token_and_auth_params_never_show_in_debug_output() {
    let config = VaultConfig::new(
        "http://vault:8200",
        Auth::Backend {
            backend: "approle".into(),
            params: BTreeMap::from([("secret_id".to_string(), "s3cr3t-id".to_string())]),
        },
    );
    let shown = format!("{config:?}");
    assert!(
        shown.contains("secret_id") && !shown.contains("s3cr3t-id"),
        "{shown}"
    );
    let shown = format!("{:?}", Auth::Token("s.t0k3n".into()));
    assert!(!shown.contains("t0k3n"), "{shown}");
}
