//! Logging in through a real OIDC provider (OpenBao's identity provider,
//! `bao server -dev`): the browser's steps are taken over HTTP here (the
//! provider's login page answers through its API with the user's Vault
//! token, as the page itself does); the page in a real browser is
//! `hangar`'s end-to-end test. A group claim gives its members their
//! role; the CLI's browser login trades a one-time code; forged, replayed,
//! tampered and foreign callbacks are refused, each leaving no session
//! behind. On SQLite and PostgreSQL alike.

use crate::common::{TestWeb, ADMIN};
use hangar_core::tenancy::oidc_claims::ClaimKeys;
use hangar_store::Store;
use hangar_testkit::on_both_databases;
use hangar_testkit::openbao::{Bao, OidcProvider, User};
use hangar_web::{AuthConfig, LocalUser, OidcConfig};
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::{json, Value};

const ALICE_PW: &str = "alice-password-1";
const BOB_PW: &str = "bob-password-22";
const LOCAL_PW: &str = "local-password-3";
/// A CLI's secret and its S256 challenge (RFC 7636, appendix B).
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

/// A provider with alice (group devs) and bob (no group), and web
/// configured to log in through it; team `devs` gives group devs the
/// member role.
async fn start(store: Store) -> (Bao, TestWeb) {
    let bao = Bao::start().await;
    let users = [
        User {
            name: "alice",
            password: ALICE_PW,
            groups: &["devs"],
        },
        User {
            name: "bob",
            password: BOB_PW,
            groups: &[],
        },
    ];
    // Registered with a placeholder: web's address is known only once it
    // is bound, and the redirect URI is set again then.
    let provider = bao.oidc_provider("http://127.0.0.1:1/cb", &users).await;
    let p = provider.clone();
    let t = TestWeb::start_at(store, move |config, url| {
        config.auth = auth(&p, url);
    })
    .await;
    bao.post(
        "identity/oidc/client/hangar",
        json!({"redirect_uris": [format!("{}/auth/oidc/callback", t.url)]}),
    )
    .await;
    let res = t
        .raw
        .put(format!("{}/api/v1/teams/devs", t.url))
        .bearer_auth(ADMIN)
        .json(&json!({"auth": {"member": {"groups": ["oidc:devs"]}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    (bao, t)
}

fn auth(provider: &OidcProvider, url: &str) -> AuthConfig {
    let hash = bcrypt::hash(LOCAL_PW, 4).unwrap();
    AuthConfig {
        local_users: vec![LocalUser::parse(&format!("lou:{hash}")).unwrap()],
        external_url: Some(url.to_string()),
        oidc: Some(OidcConfig {
            display_name: "OpenBao".into(),
            issuer: provider.issuer.clone(),
            client_id: provider.client_id.clone(),
            client_secret: provider.client_secret.clone(),
            scopes: vec!["user".into(), "groups".into()],
            keys: ClaimKeys::default(),
            ca_certs: vec![],
            skip_tls_verify: false,
        }),
        ..AuthConfig::default()
    }
}

/// A client that follows no redirect: each step is looked at.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The value `res` sets cookie `name` to, if it sets it.
fn set_cookie(res: &reqwest::Response, name: &str) -> Option<String> {
    res.headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap_or_default().to_string())
}

fn location(res: &reqwest::Response) -> String {
    res.headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("{} without a Location", res.status()))
        .to_string()
}

/// One login begun at `/auth/oidc{query}`: the provider's URL and the
/// state cookie.
async fn begin(t: &TestWeb, query: &str) -> (String, String) {
    let res = browser()
        .get(format!("{}/auth/oidc{query}", t.url))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let cookie = set_cookie(&res, "hangar_oidc_state").expect("a state cookie");
    let to = location(&res);
    assert!(
        to.contains("/ui/vault/identity/oidc/provider/hangar/authorize?"),
        "{to}"
    );
    assert!(to.contains("code_challenge_method=S256"), "PKCE: {to}");
    (to, cookie)
}

/// The provider's callback to web, with `cookie` as the state cookie.
async fn callback(t: &TestWeb, query: &str, cookie: Option<&str>) -> reqwest::Response {
    let mut req = browser().get(format!("{}/auth/oidc/callback?{query}", t.url));
    if let Some(c) = cookie {
        req = req.header(COOKIE, format!("hangar_oidc_state={c}"));
    }
    req.send().await.unwrap()
}

async fn user_of(t: &TestWeb, token: &str) -> (StatusCode, Value) {
    let res = t
        .raw
        .get(format!("{}/api/v1/user", t.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (res.status(), res.json().await.unwrap_or(Value::Null))
}

/// The pipelines page as the browser holding `session` sees it.
async fn dashboard_as(t: &TestWeb, session: Option<&str>) -> String {
    let mut req = browser().get(format!("{}/", t.url));
    if let Some(s) = session {
        req = req.header(COOKIE, format!("hangar_session={s}"));
    }
    req.send().await.unwrap().text().await.unwrap()
}

async fn an_oidc_user_logs_in_with_the_role_of_their_group(store: Store) {
    let (bao, t) = start(store).await;
    // The login page offers the provider.
    let page = browser()
        .get(format!("{}/login", t.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("log in with OpenBao"), "{page}");
    let (to, state_cookie) = begin(&t, "").await;
    let alice = bao.log_in("alice", ALICE_PW).await;
    let (code, state) = bao.authorize(&alice, &to).await.unwrap();
    assert_eq!(state, state_cookie);
    let query = format!("code={code}&state={state}");
    let res = callback(&t, &query, Some(&state_cookie)).await;
    assert_eq!(res.status(), StatusCode::OK);
    let session = set_cookie(&res, "hangar_session").expect("a session cookie");
    assert_eq!(
        set_cookie(&res, "hangar_oidc_state").as_deref(),
        Some(""),
        "cleared"
    );
    let body = res.text().await.unwrap();
    assert!(body.contains("logged in as alice"), "{body}");
    assert!(body.contains(r#"http-equiv="refresh""#), "{body}");
    // The dashboard knows her; the API gives her the group's role.
    assert!(dashboard_as(&t, Some(&session))
        .await
        .contains("user oidc:alice"));
    let (s, me) = user_of(&t, &session).await;
    assert_eq!(s, StatusCode::OK, "{me}");
    assert_eq!(me["connector"], "oidc");
    assert_eq!(me["user_name"], "alice");
    assert_eq!(me["teams"], json!({"devs": ["member"]}));

    // The same callback again: the login is over; no session is made.
    let again = callback(&t, &query, Some(&state_cookie)).await;
    assert_eq!(again.status(), StatusCode::UNAUTHORIZED);
    assert!(set_cookie(&again, "hangar_session").is_none());
    assert!(again.text().await.unwrap().contains("this login is over"));

    // Bob, in no group, logs in too but holds no role anywhere.
    let (to, cookie) = begin(&t, "").await;
    let bob = bao.log_in("bob", BOB_PW).await;
    let (code, state) = bao.authorize(&bob, &to).await.unwrap();
    let res = callback(&t, &format!("code={code}&state={state}"), Some(&cookie)).await;
    let bob_session = set_cookie(&res, "hangar_session").expect("bob's session");
    let (_, me) = user_of(&t, &bob_session).await;
    assert_eq!(
        (me["user_name"].clone(), me["teams"].clone()),
        (json!("bob"), json!({}))
    );
    // Setting a pipeline takes a member: alice is one through her group,
    // bob is not.
    for (session, status) in [
        (&bob_session, StatusCode::FORBIDDEN),
        (&session, StatusCode::OK),
    ] {
        let res = t
            .raw
            .put(format!("{}/api/v1/teams/devs/pipelines/p/config", t.url))
            .bearer_auth(session)
            .body("jobs:\n- name: j\n  plan:\n  - task: t\n    config: {platform: linux, run: {path: \"true\"}}\n")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), status, "{}", res.text().await.unwrap());
    }
    t.stop().await;
}

async fn forged_and_tampered_callbacks_are_refused_leaving_no_session(store: Store) {
    let (bao, t) = start(store).await;
    let alice = bao.log_in("alice", ALICE_PW).await;
    let (to, cookie) = begin(&t, "").await;
    let (code, state) = bao.authorize(&alice, &to).await.unwrap();
    let query = format!("code={code}&state={state}");
    // A callback forced on a browser that did not start the login (no
    // state cookie, or another login's): refused, the login untouched.
    let (_, other_cookie) = begin(&t, "").await;
    for foreign in [None, Some(other_cookie.as_str()), Some("")] {
        let res = callback(&t, &query, foreign).await;
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "{foreign:?}");
        assert!(set_cookie(&res, "hangar_session").is_none());
        assert!(res
            .text()
            .await
            .unwrap()
            .contains("did not start in this browser"));
    }
    // A code the provider did not issue: the provider refuses it, and the
    // login is spent.
    let res = callback(&t, &format!("code=not-{code}&state={state}"), Some(&cookie)).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert!(set_cookie(&res, "hangar_session").is_none());
    let text = res.text().await.unwrap();
    assert!(
        text.contains("the OIDC provider refused the login"),
        "{text}"
    );
    let res = callback(&t, &query, Some(&cookie)).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert!(res.text().await.unwrap().contains("this login is over"));
    // The provider's own refusal, shown escaped.
    let res = callback(
        &t,
        "error=access_denied&error_description=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
        None,
    )
    .await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let text = res.text().await.unwrap();
    assert!(text.contains("access_denied: &lt;script&gt;"), "{text}");
    assert!(!text.contains("<script>alert"), "{text}");
    // A callback naming no code or state; an oversized state.
    for query in [
        "state=x",
        "code=x",
        &format!("code=x&state={}", "s".repeat(300)),
    ] {
        let res = callback(&t, query, Some("s")).await;
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "{query}");
        assert!(set_cookie(&res, "hangar_session").is_none());
    }
    // Nothing logged anyone in: the dashboard shows a stranger its login link.
    assert!(dashboard_as(&t, None).await.contains(r#"href="/login""#));
    t.stop().await;
}

/// A CLI's browser login through the provider: the code web hands the
/// CLI's listener (port 4711).
async fn cli_code_through_oidc(t: &TestWeb, bao: &Bao, token: &str, cli: &str) -> String {
    let (to, cookie) = begin(t, cli).await;
    let (code, state) = bao.authorize(token, &to).await.unwrap();
    let res = callback(t, &format!("code={code}&state={state}"), Some(&cookie)).await;
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert!(
        set_cookie(&res, "hangar_session").is_none(),
        "the browser gets no session"
    );
    let to = location(&res);
    to.strip_prefix("http://127.0.0.1:4711/auth/callback?code=")
        .unwrap_or_else(|| panic!("{to}"))
        .to_string()
}

/// The CLI's trade of `code` and `verifier` for a session.
async fn trade(t: &TestWeb, code: &str, verifier: &str) -> (StatusCode, Value) {
    let res = t
        .raw
        .post(format!("{}/api/v1/login/cli", t.url))
        .json(&json!({"code": code, "verifier": verifier}))
        .send()
        .await
        .unwrap();
    (
        res.status(),
        res.json::<Value>().await.unwrap_or(Value::Null),
    )
}

async fn the_cli_trades_a_one_time_code_for_a_session(store: Store) {
    let (bao, t) = start(store).await;
    let cli = format!("?cli_port=4711&cli_challenge={CHALLENGE}");
    // The login page carries the CLI through both ways of logging in.
    let page = browser()
        .get(format!("{}/login{cli}", t.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(&format!(
            r#"href="/auth/oidc?cli_port=4711&amp;cli_challenge={CHALLENGE}""#
        )),
        "{page}"
    );
    assert!(
        page.contains(&format!(r#"name="cli_challenge" value="{CHALLENGE}""#)),
        "{page}"
    );
    let alice = bao.log_in("alice", ALICE_PW).await;
    // A code read off the browser is useless without the CLI's secret,
    // and spent by the try.
    let code = cli_code_through_oidc(&t, &bao, &alice, &cli).await;
    let (s, _) = trade(&t, &code, "not-the-verifier-of-this-cli-0000000000000").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = trade(&t, &code, VERIFIER).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // The CLI's own trade works once.
    let code = cli_code_through_oidc(&t, &bao, &alice, &cli).await;
    let (s, session) = trade(&t, &code, VERIFIER).await;
    assert_eq!(s, StatusCode::OK, "{session}");
    assert_eq!(session["user"]["user_name"], "alice");
    assert_eq!(session["user"]["teams"], json!({"devs": ["member"]}));
    let (s, me) = user_of(&t, session["token"].as_str().unwrap()).await;
    assert_eq!(
        (s, me["connector"].clone()),
        (StatusCode::OK, json!("oidc"))
    );
    let (s, _) = trade(&t, &code, VERIFIER).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // A local user's password login on the same page hands the CLI a
    // code too.
    let res = browser()
        .post(format!("{}/login", t.url))
        .form(&[
            ("username", "lou"),
            ("password", LOCAL_PW),
            ("cli_port", "4711"),
            ("cli_challenge", CHALLENGE),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let to = location(&res);
    let code = to
        .strip_prefix("http://127.0.0.1:4711/auth/callback?code=")
        .unwrap_or_else(|| panic!("{to}"));
    let (s, session) = trade(&t, code, VERIFIER).await;
    assert_eq!(s, StatusCode::OK, "{session}");
    assert_eq!(session["user"]["connector"], "local");
    // A hostile CLI query is refused before anything is kept.
    for query in [
        "?cli_port=4711",
        "?cli_port=0&cli_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        "?cli_port=80@evil.example&cli_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        "?cli_port=4711&cli_challenge=short",
    ] {
        let res = browser()
            .get(format!("{}/auth/oidc{query}", t.url))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{query}");
        assert!(set_cookie(&res, "hangar_oidc_state").is_none());
    }
    // Oversized and malformed trades.
    let (s, _) = trade(&t, &"x".repeat(300), VERIFIER).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = trade(&t, &"x".repeat(100_000), VERIFIER).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    let res = t
        .raw
        .post(format!("{}/api/v1/login/cli", t.url))
        .json(&json!({"code": "c", "verifier": "v", "extra": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    t.stop().await;
}

on_both_databases!(
    an_oidc_user_logs_in_with_the_role_of_their_group,
    forged_and_tampered_callbacks_are_refused_leaving_no_session,
    the_cli_trades_a_one_time_code_for_a_session,
);

/// Without a provider, `/auth/oidc` says so; web behind https sets
/// `Secure` cookies.
#[tokio::test]
async fn cookies_are_secure_behind_https_and_oidc_needs_a_provider() {
    let store = hangar_testkit::sqlite_store().await;
    let hash = bcrypt::hash(LOCAL_PW, 4).unwrap();
    let t = TestWeb::start_with(store, |c| {
        c.auth = AuthConfig {
            local_users: vec![LocalUser::parse(&format!("lou:{hash}")).unwrap()],
            external_url: Some("https://ci.example.com".into()),
            ..AuthConfig::default()
        }
    })
    .await;
    let res = browser()
        .get(format!("{}/auth/oidc", t.url))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert!(res
        .text()
        .await
        .unwrap()
        .contains("no OIDC provider is configured"));
    let page = browser()
        .get(format!("{}/login", t.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!page.contains(r#"id="oidc""#), "no provider button: {page}");
    let res = browser()
        .post(format!("{}/login", t.url))
        .form(&[("username", "lou"), ("password", LOCAL_PW)])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let cookie = res
        .headers()
        .get(SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap()
        .to_string();
    assert!(cookie.starts_with("hangar_session=hs."), "{cookie}");
    assert!(cookie.contains("; Secure"), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    t.stop().await;
}
