//! The directory backend with ordinary and hostile files.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use hangar_core::vars::interpolate_with;
use hangar_creds::cache::Cache;
use hangar_creds::dir::DirSecrets;
use hangar_creds::{Credentials, Manager};
use serde_json::json;

fn write(root: &Path, rel: &str, text: &[u8], mode: u32) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn creds(root: &Path) -> Credentials {
    Credentials::new(Manager::Dir(DirSecrets::new(root).unwrap()), Cache::off())
}

#[tokio::test]
async fn pipeline_file_first_then_team_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("creds");
    write(&root, "main/deploy/token", b"pipe\n", 0o600);
    write(&root, "main/token", b"team\n", 0o600);
    write(&root, "main/db", b"user: admin\npassword: pw\n", 0o400);
    write(&root, "main/deploy/other", b"x", 0o600);
    let c = creds(&root);
    let t = json!(["((token))", "((db.user))", "((db.password))", "((deploy))"]);
    let r = c.resolve(&t, "main", Some("deploy")).await.unwrap();
    // `deploy` is the pipeline's directory, not a credential.
    assert_eq!(
        interpolate_with(&t, &r).unwrap_err().to_string(),
        "undefined vars: deploy"
    );
    let t = json!(["((token))", "((db.user))", "((db.password))"]);
    let r = c.resolve(&t, "main", Some("deploy")).await.unwrap();
    assert_eq!(
        interpolate_with(&t, &r).unwrap(),
        json!(["pipe", "admin", "pw"])
    );
    let r = c.resolve(&t, "main", None).await.unwrap();
    assert_eq!(
        interpolate_with(&t, &r).unwrap(),
        json!(["team", "admin", "pw"])
    );
    let r = c.resolve(&t, "other-team", None).await.unwrap();
    assert_eq!(
        interpolate_with(&t, &r).unwrap_err().to_string(),
        "undefined vars: db.password, db.user, token"
    );
}

#[tokio::test]
async fn hostile_files_are_refused_with_the_var_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("creds");
    std::fs::create_dir_all(root.join("main")).unwrap();
    write(dir.path(), "outside", b"stolen", 0o600);
    std::os::unix::fs::symlink(dir.path().join("outside"), root.join("main/link")).unwrap();
    std::os::unix::fs::symlink(dir.path(), root.join("main/up")).unwrap();
    write(&root, "main/inside-target", b"fine", 0o600);
    std::os::unix::fs::symlink(root.join("main/inside-target"), root.join("main/inside")).unwrap();
    write(&root, "main/public", b"s", 0o644);
    write(&root, "main/group", b"s", 0o640);
    write(&root, "main/huge", &vec![b'x'; 1024 * 1024 + 1], 0o600);
    write(&root, "main/limit", &vec![b'y'; 1024 * 1024], 0o600);
    write(&root, "main/binary", &[0xff, 0xfe], 0o600);
    let c = creds(&root);
    let cases: &[(&str, &str)] = &[
        ("((link))", "var link: credential file main/link: is a symlink to a place outside the credentials dir"),
        ("((public))", "var public: credential file main/public: has mode 644: users other than its owner may use it (chmod go-rwx)"),
        ("((group))", "var group: credential file main/group: has mode 640: users other than its owner may use it (chmod go-rwx)"),
        ("((huge))", "var huge: credential file main/huge: is larger than 1048576 bytes"),
        ("((binary))", "var binary: credential file main/binary: is not UTF-8 text"),
        ("((\"..\"))", "var \"..\" is '.' or '..': it cannot name a credential"),
        ("((a/b))", "var \"a/b\" holds a path separator: it cannot name a credential"),
        ("((up/outside))", "var \"up/outside\" holds a path separator: it cannot name a credential"),
    ];
    for (t, want) in cases {
        let err = c.resolve(&json!(t), "main", None).await.unwrap_err();
        assert_eq!(err.to_string(), *want, "{t}");
    }
    let err = c.resolve(&json!("((x))"), "..", None).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "team \"..\" is '.' or '..': it cannot name a credential"
    );
    let t = json!(["((inside))", "((limit))"]);
    let r = c.resolve(&t, "main", None).await.unwrap();
    let out = interpolate_with(&t, &r).unwrap();
    assert_eq!(out[0], "fine");
    assert_eq!(out[1].as_str().unwrap().len(), 1024 * 1024);
    // Refusals changed nothing.
    assert_eq!(
        std::fs::read(dir.path().join("outside")).unwrap(),
        b"stolen"
    );
    assert!(DirSecrets::new(&dir.path().join("missing")).is_err());
    assert!(DirSecrets::new(&dir.path().join("outside")).is_err());
}

#[tokio::test]
async fn a_plan_with_too_many_vars_is_refused_before_any_read() {
    let dir = tempfile::tempdir().unwrap();
    let c = creds(dir.path());
    let many: Vec<String> = (0..1001).map(|i| format!("((v{i}))")).collect();
    let err = c.resolve(&json!(many), "main", None).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "the plan holds 1001 vars; a credential manager is asked for at most 1000"
    );
    let r = c.resolve(&json!(many[..1000]), "main", None).await.unwrap();
    assert!(r.is_empty());
}
