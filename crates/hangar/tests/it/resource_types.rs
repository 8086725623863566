//! The built-in resource types as a worker runs them: scripts installed into
//! a directory, each calling the real `hangar` binary.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

/// Runs `script args…` with `request` on stdin.
fn run_script(script: &Path, args: &[&Path], request: &Value) -> Output {
    let mut child = Command::new(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(request).unwrap())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn stdout_json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "exit {:?}, stderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[test]
fn installed_scripts_run_the_builtin_types_through_the_binary() {
    let work = tempfile::tempdir().unwrap();
    // A space in the directory checks the scripts' quoting too.
    let types_dir = work.path().join("resource types");
    let exe = Path::new(env!("CARGO_BIN_EXE_hangar"));
    let installed = hangar_resources::install_builtin_types(&types_dir, exe).unwrap();
    assert_eq!(
        installed,
        [
            types_dir.join("docker-image"),
            types_dir.join("git"),
            types_dir.join("mock"),
            types_dir.join("registry-image"),
            types_dir.join("time")
        ]
    );
    let mock = types_dir.join("mock");

    // check
    let output = run_script(
        &mock.join("check"),
        &[],
        &json!({"source": {"versions": ["v1", "v2"]}, "version": null}),
    );
    assert_eq!(
        stdout_json(&output),
        json!([{"version": "v1"}, {"version": "v2"}])
    );

    // in
    let dest = work.path().join("dest");
    let output = run_script(
        &mock.join("in"),
        &[&dest],
        &json!({
            "source": {"files": {"hello.txt": "hi\n", "nested/deeper.txt": "deep"}},
            "version": {"version": "v2"},
            "params": {},
        }),
    );
    assert_eq!(
        stdout_json(&output),
        json!({
            "version": {"version": "v2"},
            "metadata": [],
        })
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("version")).unwrap(),
        "v2\n"
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("hello.txt")).unwrap(),
        "hi\n"
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("nested/deeper.txt")).unwrap(),
        "deep"
    );
    // Logs went to stderr, not into the answer.
    assert!(String::from_utf8_lossy(&output.stderr).contains("mock: fetched version"));

    // out
    let output = run_script(
        &mock.join("out"),
        &[&dest],
        &json!({"source": {}, "params": {"version": "v3"}}),
    );
    assert_eq!(
        stdout_json(&output),
        json!({"version": {"version": "v3"}, "metadata": []})
    );

    // A failure is exit code 1 and a message on stderr, nothing on stdout.
    let output = run_script(
        &mock.join("in"),
        &[&work.path().join("never")],
        &json!({"source": {"fail": true}, "version": {"version": "v1"}}),
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "error: mock: in fails because source.fail is true\n"
    );

    // Unknown fields in source are refused by name.
    let output = run_script(
        &mock.join("check"),
        &[],
        &json!({"source": {"verisons": ["v1"]}}),
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("error: invalid request: source: unknown field `verisons`"),
        "{stderr}"
    );

    // The git type is there too, and refuses a put that names no
    // repository to push.
    let output = run_script(
        &types_dir.join("git/out"),
        &[work.path()],
        &json!({"source": {"uri": "/nowhere", "branch": "main"}}),
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "error: params.repository: required (the input directory to push)\n"
    );
}

#[test]
fn the_subcommand_is_hidden_and_checks_its_arguments() {
    let exe = env!("CARGO_BIN_EXE_hangar");
    let help = Command::new(exe).arg("--help").output().unwrap();
    assert!(help.status.success());
    // No line of the help lists it (`check-resource-type` is another).
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        !help
            .lines()
            .any(|l| l.trim_start().starts_with("resource-type ")),
        "{help}"
    );
    assert!(help.contains("check-resource-type"), "{help}");

    let output = Command::new(exe)
        .args(["resource-type", "svn", "check"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "error: unknown resource type \"svn\" (known: docker-image, git, mock, registry-image, time)\n"
    );
}

#[test]
fn docker_registry_registry_image_scripts_check_and_in_through_the_binary() {
    use hangar_images::testing::{
        config_json, Compression, Registry, TarBuilder, TestImage, TestLayer,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let registry = rt.block_on(Registry::start());
    let image = TestImage {
        config: config_json(&["PATH=/bin"], "", "amd64"),
        layers: vec![TestLayer::new(
            TarBuilder::new()
                .file("hello", b"from the registry")
                .finish(),
            Compression::Gzip,
        )],
        docker: true,
    };
    let (pushed, _) = rt.block_on(registry.push_image("e2e", Some("latest"), &image));

    let work = tempfile::tempdir().unwrap();
    let types_dir = work.path().join("types");
    let exe = Path::new(env!("CARGO_BIN_EXE_hangar"));
    hangar_resources::install_builtin_types(&types_dir, exe).unwrap();
    let scripts = types_dir.join("registry-image");
    let source = json!({"repository": format!("{}/e2e", registry.addr), "insecure": true});

    let output = run_script(&scripts.join("check"), &[], &json!({"source": source}));
    assert_eq!(stdout_json(&output), json!([{"digest": pushed}]));

    let dest = work.path().join("dest");
    let output = run_script(
        &scripts.join("in"),
        &[&dest],
        &json!({"source": source, "version": {"digest": pushed}}),
    );
    assert_eq!(stdout_json(&output)["version"], json!({"digest": pushed}));
    assert_eq!(
        std::fs::read(dest.join("rootfs/hello")).unwrap(),
        b"from the registry"
    );
    assert!(dest.join("metadata.json").is_file());
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("registry-image: layer 1/1"), "{log}");
}
