//! Resource actions run through the worker's API with real programs: shell
//! resource types in the style of Concourse's, each action in a dir, HOME,
//! TMPDIR and environment of its own that go when it ends, however it ends.

// Tests block freely: each runs on a thread of its own.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hangar_api::resources::{ActionEvent, ActionFailure, ResourceAction, ResourceActionResult};
use hangar_api::ErrorBody;
use hangar_volumes::{DriverKind, Limits, Strategy, VolumeManager};
use hangar_worker::action_dir::{ActionDirs, ACTIONS_DIR};
use hangar_worker::api::{serve, VolumeApi};
use hangar_worker::containers::{ContainerManager, Isolation};
use hangar_worker::resources_api::ResourceRunner;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const KEY: &str = "worker-key-0123456789";

/// Writes `<types>/<name>/<action>` as an executable script.
fn script(types: &Path, name: &str, action: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let dir = types.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(action);
    std::fs::write(&path, format!("#!/bin/sh\nset -eu\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The value of `"key":"…"` in the request on stdin (no jq on every host).
const FIELD: &str = r#"field() { printf '%s' "$request" | sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }
request=$(cat)
"#;

/// The types: `env` reports its environment and what it finds in its
/// dirs; `slow` leaves a helper behind and outlasts the timeout; `helper`
/// leaves one behind that would write into the fetched volume later.
fn types(dir: &Path) -> PathBuf {
    let types = dir.join("resource-types");
    let report = format!(
        r#"{FIELD}
{{ env | sort; echo "cwd=$(pwd)"; echo "tmp=$(ls -A "$TMPDIR" | tr '\n' ' ')"; echo "home=$(ls -A "$HOME" | tr '\n' ' ')"; }} >&2
touch "$TMPDIR/left-by-$(field uri)" "$HOME/.left-by-$(field uri)"
"#
    );
    script(
        &types,
        "env",
        "check",
        &format!("{report}echo '[{{\"ref\":\"1\"}}]'\n"),
    );
    script(
        &types,
        "env",
        "in",
        &format!("{report}echo '{{\"version\":{{\"ref\":\"1\"}}}}'\n"),
    );
    script(
        &types,
        "slow",
        "check",
        &format!(
            r#"{FIELD}
sleep 1000 >/dev/null 2>&1 &
echo $! > "$(field pidfile)"
echo "$TMPDIR" > "$(field dirfile)"
exec sleep 1000
"#
        ),
    );
    script(&types, "slow", "in", "exit 1\n");
    // A hostile log: invalid UTF-8, then 100 MB on one line.
    script(
        &types,
        "loud",
        "check",
        "cat >/dev/null\nprintf 'bad \\377 byte\\n' >&2\nhead -c 104857600 /dev/zero | tr '\\000' x >&2\necho '[{\"ref\":\"1\"}]'\n",
    );
    // Says its failure is the infrastructure's, as a base type may.
    script(
        &types,
        "flaky",
        "check",
        "cat >/dev/null\necho 'registry down' >&2\nexit 75\n",
    );
    // Says something, then outlasts its timeout.
    script(
        &types,
        "chatty",
        "check",
        "cat >/dev/null\necho 'resolving' >&2\nexec sleep 1000\n",
    );
    for name in ["loud", "flaky", "chatty"] {
        script(&types, name, "in", "exit 1\n");
    }
    script(
        &types,
        "ns",
        "check",
        r#"{ echo "init=$(tr '\0' ' ' < /proc/1/cmdline)"; echo "pids=$(ls /proc | grep -c '^[0-9][0-9]*$')"; } >&2
echo '[]'
"#,
    );
    script(
        &types,
        "ns",
        "in",
        r#"setsid sh -c 'sleep 1; echo late > "$0/late"' "$1" </dev/null >/dev/null 2>&1 &
echo now > "$1/now"
echo '{"version":{"ref":"1"}}'
"#,
    );
    script(&types, "helper", "check", "echo '[]'\n");
    script(
        &types,
        "helper",
        "in",
        r#"dest=$1
( sleep 1; echo late > "$dest/late" ) >/dev/null 2>&1 &
echo now > "$dest/now"
echo '{"version":{"ref":"1"}}'
"#,
    );
    // `out <src>`: what the source dir holds, and a file of an input.
    script(&types, "lister", "check", "echo '[]'\n");
    script(&types, "lister", "in", "echo '{}'\n");
    script(
        &types,
        "lister",
        "out",
        r#"cat >/dev/null
echo "src=$(ls -A "$1" | tr '\n' ' ')" >&2
echo "file=$(cat "$1/repo/file")" >&2
echo '{"version":{"ref":"pushed"},"metadata":[]}'
"#,
    );
    types
}

struct Worker {
    dir: tempfile::TempDir,
    volumes: Arc<VolumeManager>,
    url: String,
    http: reqwest::Client,
    _stop: tokio_util::sync::DropGuard,
}

impl Worker {
    async fn start(timeout: Duration) -> Worker {
        Worker::start_with(timeout, false).await
    }

    /// With `isolated`, actions get what a root worker's process tasks get
    /// (found out as the worker finds it out).
    async fn start_with(timeout: Duration, isolated: bool) -> Worker {
        Worker::start_full(timeout, isolated, false).await
    }

    /// With `allow_privileged`, as `--allow-privileged` starts it.
    async fn start_full(timeout: Duration, isolated: bool, allow_privileged: bool) -> Worker {
        let dir = tempfile::tempdir().unwrap();
        let volumes = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
        let actions = ActionDirs::open(&dir.path().join(ACTIONS_DIR)).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let runner = ResourceRunner::new(
            Some(types(dir.path())),
            volumes.clone(),
            actions,
            KEY,
            timeout,
        )
        .with_allow_privileged(allow_privileged);
        let runner = if isolated {
            let containers =
                ContainerManager::open(&dir.path().join("containers"), volumes.clone()).unwrap();
            let isolation = containers.isolation().clone();
            assert!(
                matches!(isolation, Isolation::Drop { pid_namespace: true, .. }),
                "this test needs root and util-linux unshare with PID namespaces (run scripts/install-deps as root): {isolation:?}"
            );
            runner.with_isolation(&isolation)
        } else {
            runner
        };
        let api = VolumeApi::new(volumes.clone(), KEY, Limits::default()).with_resources(runner);
        tokio::spawn(serve(listener, api, stop.clone()));
        Worker {
            dir,
            volumes,
            url,
            http: reqwest::Client::new(),
            _stop: stop.drop_guard(),
        }
    }

    fn actions_dir(&self) -> PathBuf {
        self.dir.path().join(ACTIONS_DIR)
    }

    /// What is in `resource-actions/` now.
    fn action_dirs(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.actions_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }

    fn volume(&self, handle: &str) -> PathBuf {
        self.volumes
            .create(handle, Strategy::Empty, BTreeMap::new())
            .unwrap()
            .path
    }

    async fn post(&self, action: ResourceAction) -> reqwest::Response {
        self.http
            .post(format!("{}/resource-actions", self.url))
            .bearer_auth(KEY)
            .json(&action)
            .send()
            .await
            .unwrap()
    }

    async fn run(
        &self,
        resource_type: &str,
        action: &str,
        volume: Option<&str>,
        request: Value,
    ) -> ResourceActionResult {
        let resp = self
            .post(ResourceAction {
                inputs: Default::default(),
                image_volume: None,
                resource_type: resource_type.into(),
                action: action.into(),
                volume: volume.map(Into::into),
                request,
                privileged: false,
            })
            .await;
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert!(status.is_success(), "{status}: {text}");
        serde_json::from_str(&text).unwrap()
    }
}

/// A streamed action through web's client: its stderr pieces, then its
/// end.
async fn streamed(w: &Worker, resource_type: &str) -> (Vec<String>, ResourceActionResult) {
    let api = hangar_client::WorkerApi::new(&w.url, KEY, Duration::from_secs(60)).unwrap();
    let req = ResourceAction {
        image_volume: None,
        resource_type: resource_type.into(),
        action: "check".into(),
        volume: None,
        inputs: Default::default(),
        request: json!({"source": {}}),
        privileged: false,
    };
    let mut events = api.resource_action_events(&req).await.unwrap();
    let mut stderr = Vec::new();
    loop {
        match events.next().await.unwrap() {
            Some(ActionEvent::Stderr(t)) => stderr.push(t),
            Some(ActionEvent::Result(r)) => return (stderr, r),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn a_flood_of_stderr_is_cut_on_the_worker_and_the_action_still_answers() {
    let w = Worker::start(Duration::from_secs(60)).await;
    let started = std::time::Instant::now();
    let (pieces, out) = streamed(&w, "loud").await;
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.response, Some(json!([{"ref": "1"}])));
    let text = pieces.concat();
    assert!(text.starts_with("bad \u{fffd} byte\n"), "{}", &text[..40]);
    assert!(text.len() < 1024 * 1024 + 200, "{}", text.len());
    assert!(
        text.ends_with(" dropped on the worker]\n"),
        "{}",
        &text[text.len() - 200..]
    );
    // Drained, not blocked on a full pipe until the timeout.
    assert!(started.elapsed() < Duration::from_secs(30));
    // Unstreamed (an older caller), the same bound in the result.
    let out = w.run("loud", "check", None, json!({"source": {}})).await;
    assert_eq!(out.exit_code, 0);
    assert!(out.stderr.len() < 1024 * 1024 + 200);
}

#[tokio::test]
async fn a_base_type_s_exit_75_is_the_infrastructure_s_failure_on_the_wire() {
    let w = Worker::start(Duration::from_secs(60)).await;
    let (pieces, out) = streamed(&w, "flaky").await;
    assert_eq!(pieces.concat(), "registry down\n");
    assert_eq!(out.exit_code, 75);
    assert_eq!(out.failure, Some(ActionFailure::Infrastructure));
    w.volume("v");
    let out = w
        .run(
            "slow",
            "in",
            Some("v"),
            json!({"source": {}, "version": {}}),
        )
        .await;
    assert_eq!(out.exit_code, 1);
    assert_eq!(out.failure, Some(ActionFailure::Own));
}

#[tokio::test]
async fn a_base_type_s_exit_75_comes_through_the_pid_namespace_needs_root() {
    let w = Worker::start_with(Duration::from_secs(60), true).await;
    let (pieces, out) = streamed(&w, "flaky").await;
    assert_eq!(pieces.concat(), "registry down\n");
    assert_eq!(out.exit_code, 75);
    assert_eq!(out.failure, Some(ActionFailure::Infrastructure));
}

#[tokio::test]
async fn an_action_that_times_out_after_writing_ends_its_streamed_answer_with_the_error_it_would_have_had(
) {
    let w = Worker::start(Duration::from_secs(1)).await;
    let api = hangar_client::WorkerApi::new(&w.url, KEY, Duration::from_secs(60)).unwrap();
    let req = ResourceAction {
        image_volume: None,
        resource_type: "chatty".into(),
        action: "check".into(),
        volume: None,
        inputs: Default::default(),
        request: json!({"source": {}}),
        privileged: false,
    };
    let mut events = api.resource_action_events(&req).await.unwrap();
    assert_eq!(
        events.next().await.unwrap(),
        Some(ActionEvent::Stderr("resolving\n".into()))
    );
    let Some(ActionEvent::Error(e)) = events.next().await.unwrap() else {
        panic!("the answer ends with the error");
    };
    assert_eq!(events.next().await.unwrap(), None);
    // As the unstreamed answer says it: classified by web the same way.
    let resp = w.post(req).await;
    assert_eq!(e.status, resp.status().as_u16());
    let body: ErrorBody = resp.json().await.unwrap();
    assert_eq!((e.code, e.message), (body.error.code, body.error.message));
    assert_eq!(w.action_dirs(), Vec::<PathBuf>::new());
}

/// `KEY=value` lines of a report.
fn report(stderr: &str) -> BTreeMap<String, String> {
    stderr
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_end().to_string()))
        .collect()
}

#[tokio::test]
async fn each_action_gets_its_own_home_tmpdir_and_an_environment_made_from_nothing() {
    let w = Worker::start(Duration::from_secs(30)).await;
    let mut homes = Vec::new();
    for (i, uri) in ["one", "two", "one"].into_iter().enumerate() {
        let out = if i == 1 {
            w.volume("fetched");
            w.run(
                "env",
                "in",
                Some("fetched"),
                json!({"source": {"uri": uri}}),
            )
            .await
        } else {
            w.run("env", "check", None, json!({"source": {"uri": uri}}))
                .await
        };
        assert_eq!(out.exit_code, 0, "{}", out.stderr);
        let env = report(&out.stderr);
        let home = PathBuf::from(&env["HOME"]);
        let tmp = PathBuf::from(&env["TMPDIR"]);
        let action = home.parent().unwrap().to_path_buf();
        assert_eq!(action.parent().unwrap(), w.actions_dir(), "{env:#?}");
        assert_eq!(tmp, action.join("tmp"));
        assert_eq!(
            (&env["TMP"], &env["TEMP"]),
            (&env["TMPDIR"], &env["TMPDIR"])
        );
        assert_eq!(PathBuf::from(&env["cwd"]), action);
        // Nothing left by an earlier action, the same source's included.
        assert_eq!(
            (env["tmp"].as_str(), env["home"].as_str()),
            ("", ""),
            "action {i}"
        );
        // Only what was made for it: none of the test process's (or a
        // worker's) variables, HANGAR_* or otherwise.
        let mut keys: Vec<&str> = env
            .keys()
            .map(String::as_str)
            .filter(|k| !matches!(*k, "cwd" | "tmp" | "home" | "PWD" | "SHLVL" | "_"))
            .filter(|k| !k.to_ascii_lowercase().ends_with("_proxy"))
            .collect();
        keys.sort();
        assert_eq!(keys, ["HOME", "PATH", "TEMP", "TMP", "TMPDIR"], "{env:#?}");
        assert!(!homes.contains(&home), "a dir is never reused");
        homes.push(home);
        // Gone as soon as the action answered.
        assert_eq!(w.action_dirs(), Vec::<PathBuf>::new());
    }
}

#[tokio::test]
async fn an_action_that_times_out_is_killed_with_its_helpers_and_its_dir_removed() {
    let w = Worker::start(Duration::from_secs(2)).await;
    let pidfile = w.dir.path().join("helper.pid");
    let dirfile = w.dir.path().join("action.dir");
    let resp = w
        .post(ResourceAction {
            inputs: Default::default(),
            image_volume: None,
            resource_type: "slow".into(),
            action: "check".into(),
            volume: None,
            request: json!({"source": {
                "pidfile": pidfile.display().to_string(),
                "dirfile": dirfile.display().to_string(),
            }}),
            privileged: false,
        })
        .await;
    assert_eq!(resp.status(), reqwest::StatusCode::GATEWAY_TIMEOUT);
    let body: ErrorBody = resp.json().await.unwrap();
    assert_eq!(body.error.message, "slow check took longer than 2s");
    let tmp = PathBuf::from(std::fs::read_to_string(&dirfile).unwrap().trim());
    assert!(tmp.starts_with(w.actions_dir()), "{}", tmp.display());
    assert!(!tmp.exists(), "the action's dir outlived its timeout");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(pid).await, "the helper {pid} outlived its action");
    assert_eq!(w.action_dirs(), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn a_helper_left_running_by_in_is_killed_before_it_writes_into_the_fetched_volume() {
    let w = Worker::start(Duration::from_secs(30)).await;
    let dest = w.volume("fetched");
    let out = w
        .run("helper", "in", Some("fetched"), json!({"source": {}}))
        .await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    assert!(dest.join("now").exists());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !dest.join("late").exists(),
        "a helper of the action wrote after it ended"
    );
}

#[tokio::test]
async fn an_action_whose_dir_cannot_be_made_fails_clearly_and_runs_nothing() {
    let w = Worker::start(Duration::from_secs(30)).await;
    // The work dir's actions dir vanished under the worker (wiped).
    std::fs::remove_dir_all(w.actions_dir()).unwrap();
    let resp = w
        .post(ResourceAction {
            inputs: Default::default(),
            image_volume: None,
            resource_type: "env".into(),
            action: "check".into(),
            volume: None,
            request: json!({"source": {"uri": "x"}}),
            privileged: false,
        })
        .await;
    assert_eq!(resp.status(), reqwest::StatusCode::INTERNAL_SERVER_ERROR);
    let body: ErrorBody = resp.json().await.unwrap();
    let want = format!(
        "make the action's own dir: create {}/",
        w.actions_dir().display()
    );
    assert!(
        body.error.message.starts_with(&want),
        "{}",
        body.error.message
    );
    assert!(
        body.error
            .message
            .ends_with("No such file or directory (os error 2)"),
        "{}",
        body.error.message
    );
    assert!(!w.actions_dir().exists(), "nothing was made in its place");
}

#[tokio::test]
async fn on_a_root_worker_an_action_has_a_pid_namespace_that_ends_with_it_needs_root() {
    let w = Worker::start_with(Duration::from_secs(30), true).await;
    let out = w.run("ns", "check", None, json!({"source": {}})).await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    let seen = report(&out.stderr);
    // The worker and its environment are not even in the action's /proc.
    assert!(seen["init"].starts_with("/bin/sh -c"), "{seen:#?}");
    assert!(seen["init"].contains("hangar-action-init"), "{seen:#?}");
    let pids: u32 = seen["pids"].parse().unwrap();
    assert!(pids <= 6, "{seen:#?}");
    // A helper that left the process group dies with the namespace.
    let dest = w.volume("fetched");
    let out = w
        .run("ns", "in", Some("fetched"), json!({"source": {}}))
        .await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    assert!(dest.join("now").exists());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !dest.join("late").exists(),
        "a setsid helper outlived its action"
    );
    // The program's exit code comes through the namespace's init.
    w.volume("other");
    let out = w
        .run("slow", "in", Some("other"), json!({"source": {}}))
        .await;
    assert_eq!(out.exit_code, 1);
    assert_eq!(w.action_dirs(), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn a_program_that_cannot_be_run_is_the_worker_s_failure_with_or_without_a_namespace_needs_root(
) {
    use std::os::unix::fs::PermissionsExt;
    for isolated in [false, true] {
        let w = Worker::start_with(Duration::from_secs(30), isolated).await;
        let check = w.dir.path().join("resource-types/env/check");
        std::fs::set_permissions(&check, std::fs::Permissions::from_mode(0o644)).unwrap();
        let resp = w
            .post(ResourceAction {
                inputs: Default::default(),
                image_volume: None,
                resource_type: "env".into(),
                action: "check".into(),
                volume: None,
                request: json!({"source": {"uri": "x"}}),
                privileged: false,
            })
            .await;
        assert_eq!(
            resp.status(),
            reqwest::StatusCode::INTERNAL_SERVER_ERROR,
            "isolated {isolated}"
        );
        let body: ErrorBody = resp.json().await.unwrap();
        assert_eq!(
            body.error.message,
            format!("start {}: permission denied", check.display()),
            "isolated {isolated}"
        );
        assert_eq!(w.action_dirs(), Vec::<PathBuf>::new());
    }
}

/// Whether `pid` is gone or a zombie within a few seconds.
async fn gone(pid: i32) -> bool {
    for _ in 0..100 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) => {
                let state = stat[stat.rfind(')').unwrap() + 1..]
                    .split_whitespace()
                    .next();
                if state == Some("Z") {
                    return true;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn out_gets_its_inputs_laid_out_as_concourse_does() {
    let w = Worker::start(Duration::from_secs(10)).await;
    let repo = w.volume("vol-repo");
    std::fs::write(repo.join("file"), "content").unwrap();
    w.volume("vol-other");
    let action = |inputs: &[(&str, &str)], volume: Option<&str>, action: &str| ResourceAction {
        image_volume: None,
        resource_type: "lister".into(),
        action: action.into(),
        volume: volume.map(Into::into),
        inputs: inputs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        request: json!({"source": {}, "params": {}}),
        privileged: false,
    };
    let resp = w
        .post(action(
            &[("repo", "vol-repo"), ("other", "vol-other")],
            None,
            "out",
        ))
        .await;
    assert_eq!(resp.status(), reqwest::StatusCode::OK);
    let result: ResourceActionResult = resp.json().await.unwrap();
    assert_eq!(result.exit_code, 0, "{}", result.stderr);
    assert_eq!(
        result.response,
        Some(json!({"version": {"ref": "pushed"}, "metadata": []}))
    );
    let r = report(&result.stderr);
    assert_eq!(
        (r["src"].as_str(), r["file"].as_str()),
        ("other repo", "content")
    );
    // The inputs are intact once the action's dir is gone.
    assert_eq!(
        std::fs::read_to_string(repo.join("file")).unwrap(),
        "content"
    );
    assert!(w.action_dirs().is_empty());

    // Refused, each with a clear 4xx, nothing run.
    let cases = [
        (
            action(&[], Some("vol-repo"), "out"),
            400,
            "out takes `inputs`, not `volume`",
        ),
        (
            action(&[("repo", "vol-repo")], None, "check"),
            400,
            "only out takes `inputs`",
        ),
        (
            action(&[("repo", "vol-missing")], None, "out"),
            404,
            "volume \"vol-missing\" not found",
        ),
        (
            action(&[("bad name", "vol-repo")], None, "out"),
            400,
            "inputs: invalid name",
        ),
    ];
    for (req, status, says) in cases {
        let resp = w.post(req.clone()).await;
        assert_eq!(resp.status().as_u16(), status, "{req:?}");
        let body: ErrorBody = resp.json().await.unwrap();
        assert!(
            body.error.message.contains(says),
            "{req:?}: {}",
            body.error.message
        );
    }
    assert!(w.action_dirs().is_empty());
}

/// A privileged resource type's action reaching a worker not started with
/// `--allow-privileged` (web placed it from a stale row) is refused before
/// anything runs or is made: no action dir, nothing fetched, and the
/// message names the flag. The same worker runs unprivileged actions, and
/// one started with the flag takes the privileged one.
#[tokio::test]
async fn a_privileged_action_is_refused_without_allow_privileged_and_runs_nothing() {
    let w = Worker::start(Duration::from_secs(60)).await;
    let dest = w.volume("dest");
    w.volume("image");
    let privileged = ResourceAction {
        inputs: Default::default(),
        image_volume: Some("image".into()),
        resource_type: "env".into(),
        action: "in".into(),
        volume: Some("dest".into()),
        request: json!({"source": {"uri": "refused"}, "version": {"ref": "1"}}),
        privileged: true,
    };
    let resp = w.post(privileged.clone()).await;
    assert_eq!(resp.status(), reqwest::StatusCode::BAD_REQUEST);
    let body: ErrorBody = resp.json().await.unwrap();
    assert_eq!(
        body.error.message,
        "resource type env is privileged: this worker was not started with --allow-privileged"
    );
    assert_eq!(w.action_dirs(), Vec::<PathBuf>::new());
    assert_eq!(std::fs::read_dir(&dest).unwrap().count(), 0);
    // Unprivileged, the same type runs here.
    let out = w
        .run("env", "check", None, json!({"source": {"uri": "plain"}}))
        .await;
    assert_eq!(out.exit_code, 0);

    // Allowed: the action gets past the check (here, to the base type's
    // program, as no image is asked for).
    let allowed = Worker::start_full(Duration::from_secs(60), false, true).await;
    allowed.volume("dest");
    let resp = allowed
        .post(ResourceAction {
            image_volume: None,
            ..privileged
        })
        .await;
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert!(status.is_success(), "{status}: {text}");
    let out: ResourceActionResult = serde_json::from_str(&text).unwrap();
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
}
