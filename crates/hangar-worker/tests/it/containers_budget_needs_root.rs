//! A worker accepts containers only while their memory limits fit in its
//! own memory, and gives a default limit to those that set none.

use std::collections::BTreeMap;
use std::sync::Arc;

use hangar_api::containers::{ContainerSpec, Runtime};
use hangar_volumes::{DriverKind, VolumeManager};
use hangar_worker::containers::{ContainerError, ContainerManager};

fn sleeper(handle: &str, limit: Option<u64>) -> ContainerSpec {
    ContainerSpec {
        handle: handle.into(),
        runtime: Runtime::Process,
        rootfs_volume: None,
        path: "sleep".into(),
        args: vec!["30".into()],
        env: BTreeMap::new(),
        dir: None,
        mounts: vec![],
        memory_limit_bytes: limit,
        cpu_shares: None,
        user: None,
        privileged: false,
    }
}

#[test]
fn containers_past_the_memory_budget_are_refused_and_the_default_limit_applies() {
    let dir = tempfile::tempdir().unwrap();
    let volumes = Arc::new(VolumeManager::open(dir.path(), DriverKind::Naive).unwrap());
    let m = ContainerManager::open(&dir.path().join("containers"), volumes).unwrap();
    m.memory_limits_enforceable()
        .expect("this test needs a writable memory cgroup (run as root)");
    const MIB: u64 = 1 << 20;
    m.set_memory_policy(Some(100 * MIB), Some(40 * MIB));

    let a = m.create_within(sleeper("a", None)).unwrap();
    assert_eq!(a.state.to_string(), "running");
    assert_eq!(
        m.reserved_memory().unwrap(),
        40 * MIB,
        "the default limit was applied"
    );
    m.create_within(sleeper("b", Some(50 * MIB))).unwrap();
    let refused = m.create_within(sleeper("c", Some(20 * MIB))).unwrap_err();
    assert!(
        matches!(refused, ContainerError::NoRoom { .. }),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("exceeds the worker's 100 MiB"),
        "{refused}"
    );
    assert!(
        m.get("c").unwrap().is_none(),
        "a refused container leaves nothing behind"
    );

    m.destroy("b").unwrap();
    m.create_within(sleeper("c", Some(20 * MIB))).unwrap();
    for h in ["a", "c"] {
        m.destroy(h).unwrap();
    }
}
