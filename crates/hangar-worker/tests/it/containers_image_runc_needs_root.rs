//! A runc rootfs volume in Concourse's image layout (`rootfs/` and
//! `metadata.json`, what a resource type's `in` writes for an image): the
//! task runs in `rootfs/` with the image's env under its params and the
//! image's user unless `run.user` names one. Needs root, runc and
//! busybox-static (the tests fail, saying what to install, without them).

use std::fs;
use std::path::PathBuf;

use crate::containers_support::*;

/// A volume in the image layout: a busybox `rootfs/` with a passwd file,
/// and `metadata` as its `metadata.json`.
fn image_volume(host: &Host, handle: &str, metadata: &[u8]) -> PathBuf {
    let staging = format!("{handle}-staging");
    busybox_rootfs(host, &staging);
    let built = host.volumes.get(&staging).unwrap().unwrap().path;
    let volume = host.volume(handle);
    fs::rename(&built, volume.join("rootfs")).unwrap();
    fs::create_dir(&built).unwrap();
    let rootfs = volume.join("rootfs");
    fs::create_dir_all(rootfs.join("etc")).unwrap();
    fs::write(
        rootfs.join("etc/passwd"),
        "root:x:0:0::/:/bin/sh\nbuilder:x:1234:1235::/:/bin/sh\n",
    )
    .unwrap();
    fs::write(rootfs.join("etc/os-release"), "ID=hangar-test-image\n").unwrap();
    fs::write(volume.join("metadata.json"), metadata).unwrap();
    volume
}

fn run(host: &Host, handle: &str, spec: hangar_api::containers::ContainerSpec) -> String {
    host.containers.create(spec).unwrap();
    let exit = host.wait_exited(handle).exit.unwrap();
    let log = host.log(handle);
    assert_eq!(exit.code, Some(0), "log: {log}");
    host.containers.destroy(handle).unwrap();
    log
}

#[test]
fn runc_runs_in_the_layout_s_rootfs_with_the_image_env_under_the_task_s_params() {
    let host = Host::new();
    image_volume(
        &host,
        "image",
        br#"{"env": ["PATH=/bin", "FROM_IMAGE=image", "OVERRIDDEN=image"], "user": ""}"#,
    );
    let mut spec = runc_spec(
        "image-env",
        "image",
        "cat /etc/os-release; ls /metadata.json 2>/dev/null || echo no metadata at the root; \
         echo $PATH $FROM_IMAGE $OVERRIDDEN; pwd; id -u",
    );
    spec.env.insert("OVERRIDDEN".into(), "param".into());
    let log = run(&host, "image-env", spec);
    assert_eq!(
        log,
        "ID=hangar-test-image\nno metadata at the root\n/bin image param\n/tmp/build/work\n0\n"
    );
}

#[test]
fn runc_runs_as_the_image_s_user_unless_run_user_names_one() {
    let host = Host::new();
    image_volume(&host, "image", br#"{"env": [], "user": "builder"}"#);
    let cases = [(None, "1234 1235\n"), (Some("4321:4322"), "4321 4322\n")];
    for (i, (user, expected)) in cases.into_iter().enumerate() {
        let handle = format!("image-user-{i}");
        let mut spec = runc_spec(&handle, "image", "echo $(id -u) $(id -g)");
        spec.user = user.map(Into::into);
        assert_eq!(run(&host, &handle, spec), expected, "{user:?}");
    }
    // An image naming root, with nothing to look it up in: root.
    let bare = image_volume(&host, "bare", br#"{"user": "root"}"#);
    fs::remove_file(bare.join("rootfs/etc/passwd")).unwrap();
    let spec = runc_spec("image-root", "bare", "id -u");
    assert_eq!(run(&host, "image-root", spec), "0\n");
}

#[test]
fn runc_refuses_a_malformed_metadata_json_and_runs_nothing() {
    let host = Host::new();
    let huge = format!(r#"{{"env": ["A={}"]}}"#, "x".repeat(2 << 20));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not-json", b"{env".to_vec(), "not JSON"),
        (
            "no-equals",
            br#"{"env": ["JUSTANAME"]}"#.to_vec(),
            "has no `=`",
        ),
        ("nul", br#"{"env": ["A=b\u0000c"]}"#.to_vec(), "NUL"),
        ("huge", huge.into_bytes(), "larger than"),
        ("ghost", br#"{"user": "ghost"}"#.to_vec(), "ghost"),
    ];
    for (name, metadata, says) in cases {
        let volume = image_volume(&host, name, &metadata);
        let marker = host.volume(&format!("{name}-marker"));
        let handle = format!("bad-{name}");
        let mut spec = runc_spec(&handle, name, "touch marker/ran");
        spec.mounts = vec![mount(&format!("{name}-marker"), "marker")];
        let err = host.containers.create(spec).unwrap_err().to_string();
        assert!(err.contains(says), "{name}: {err}");
        assert!(err.contains("metadata.json"), "{name}: {err}");
        assert!(host.containers.get(&handle).unwrap().is_none(), "{name}");
        assert!(!marker.join("ran").exists(), "{name}");
        assert!(volume.join("rootfs").is_dir());
    }
}
