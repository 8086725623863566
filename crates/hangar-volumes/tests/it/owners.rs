//! A volume's owners stamp: made by a stream-in with an owner into an
//! empty volume, inherited by copy-on-write children, gone at any write the
//! manager cannot vouch for, and never inside the data a container sees.

use std::fs;
use std::io::Cursor;

use crate::common::{is_root, no_props, snapshot, TestRoot};
use hangar_volumes::{
    Compression, DriverKind, Limits, Owners, Strategy, VolumeError, VolumeManager,
};

const OWNER: (u32, u32) = (4_000_123, 4_000_456);
const ONE: Owners = Owners::One {
    uid: OWNER.0,
    gid: OWNER.1,
};

fn tar_of(files: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, text) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        b.append_data(&mut h, path, text.as_bytes()).unwrap();
    }
    b.into_inner().unwrap()
}

fn stream(
    vm: &VolumeManager,
    handle: &str,
    sub: &str,
    archive: Vec<u8>,
    owner: Option<(u32, u32)>,
) -> Result<(), VolumeError> {
    vm.stream_in_as(
        handle,
        sub,
        Cursor::new(archive),
        Compression::None,
        &Limits::default(),
        owner,
    )
    .map(|_| ())
}

fn cow(parent: &str) -> Strategy {
    Strategy::CopyOnWrite {
        parent: parent.into(),
    }
}

fn an_upload_into_an_empty_volume_is_stamped_and_its_copies_inherit_it(driver: DriverKind) {
    let root = TestRoot::new();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    let v = vm.create("v", Strategy::Empty, no_props()).unwrap();
    stream(
        &vm,
        "v",
        "",
        tar_of(&[("a/b", "1"), ("c", "2")]),
        Some(OWNER),
    )
    .unwrap();
    // Only root gives entries an owner; a worker that is not root owns
    // what it writes, and vouches for nothing.
    let expected = is_root().then_some(ONE);
    assert_eq!(vm.owners("v").unwrap(), expected);
    // Beside the data: nothing a container sees.
    let mut names: Vec<String> = fs::read_dir(&v.path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "c"]);

    vm.create("child", cow("v"), no_props()).unwrap();
    assert_eq!(vm.owners("child").unwrap(), expected);
    vm.create("grandchild", cow("child"), no_props()).unwrap();
    assert_eq!(vm.owners("grandchild").unwrap(), expected);

    // A stream-in without an owner writes what the archive says: the
    // stamp goes, from that volume only.
    stream(&vm, "v", "more", tar_of(&[("d", "3")]), None).unwrap();
    assert_eq!(vm.owners("v").unwrap(), None);
    assert_eq!(vm.owners("child").unwrap(), expected);
    // With an owner, into a volume that holds entries already: nothing
    // vouches for those.
    stream(&vm, "v", "", tar_of(&[("e", "4")]), Some(OWNER)).unwrap();
    assert_eq!(vm.owners("v").unwrap(), None);
    // Into a subpath of an empty volume: the same.
    vm.create("sub", Strategy::Empty, no_props()).unwrap();
    stream(&vm, "sub", "in/here", tar_of(&[("f", "5")]), Some(OWNER)).unwrap();
    assert_eq!(vm.owners("sub").unwrap(), None);
}

fn a_refused_stream_in_changes_no_data_but_takes_the_stamp(driver: DriverKind) {
    let root = TestRoot::new();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    let v = vm.create("v", Strategy::Empty, no_props()).unwrap();
    let token = vm.owners_token("v");
    assert!(vm.set_owners(&token, ONE).unwrap());
    fs::write(v.path.join("kept"), "k").unwrap();
    let before = snapshot(&v.path);
    let escape = {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        h.as_gnu_mut().unwrap().name[..6].copy_from_slice(b"../out");
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
        b.into_inner().unwrap()
    };
    assert!(stream(&vm, "v", "", escape, Some(OWNER)).is_err());
    assert_eq!(snapshot(&v.path), before);
    // The stamp goes before the first byte: a write cut anywhere leaves
    // none that could be wrong.
    assert_eq!(vm.owners("v").unwrap(), None);
}

fn a_walks_stamp_holds_only_if_nothing_wrote_the_volume_since_its_token(driver: DriverKind) {
    let root = TestRoot::new();
    let vm = VolumeManager::open(root.path(), driver).unwrap();
    vm.create("v", Strategy::Empty, no_props()).unwrap();
    let range = Owners::Range {
        uid: 100_000,
        gid: 100_000,
        len: 65_536,
    };
    let token = vm.owners_token("v");
    assert!(vm.set_owners(&token, range).unwrap());
    assert_eq!(vm.owners("v").unwrap(), Some(range));

    // A stream-in between the token and the stamp: no stamp.
    let token = vm.owners_token("v");
    stream(&vm, "v", "x", tar_of(&[("f", "1")]), None).unwrap();
    assert!(!vm.set_owners(&token, range).unwrap());
    assert_eq!(vm.owners("v").unwrap(), None);

    // clear_owners voids the tokens taken before it.
    let token = vm.owners_token("v");
    vm.clear_owners("v").unwrap();
    assert!(!vm.set_owners(&token, range).unwrap());
    let token = vm.owners_token("v");
    assert!(vm.set_owners(&token, range).unwrap());

    // A parent without a stamp gives none.
    vm.clear_owners("v").unwrap();
    vm.create("child", cow("v"), no_props()).unwrap();
    assert_eq!(vm.owners("child").unwrap(), None);

    // A volume destroyed under a token is not stamped back into being.
    let token = vm.owners_token("child");
    vm.destroy("child").unwrap();
    assert!(!vm.set_owners(&token, range).unwrap());
    assert!(!root.path().join("volumes/child").exists());
}

on_both_drivers!(
    an_upload_into_an_empty_volume_is_stamped_and_its_copies_inherit_it,
    a_refused_stream_in_changes_no_data_but_takes_the_stamp,
    a_walks_stamp_holds_only_if_nothing_wrote_the_volume_since_its_token,
);

#[test]
fn a_stamp_the_manager_cannot_read_is_none_and_a_hostile_handle_is_refused() {
    let root = TestRoot::new();
    let vm = VolumeManager::open(root.path(), DriverKind::Naive).unwrap();
    vm.create("v", Strategy::Empty, no_props()).unwrap();
    let stamp = root.path().join("volumes/v/owners");
    for garbage in [
        "",
        "one 1\n",
        "one 1 2 3\n",
        "all\n",
        "range 1 2 0\n",
        "\u{0}",
    ] {
        fs::write(&stamp, garbage).unwrap();
        assert_eq!(vm.owners("v").unwrap(), None, "{garbage:?}");
    }
    fs::write(&stamp, "x".repeat(1 << 20)).unwrap();
    assert_eq!(vm.owners("v").unwrap(), None);

    let outside = root.path().join("owners");
    fs::write(&outside, "one 0 0\n").unwrap();
    for handle in ["..", "../v", "v/../..", "", "a/b"] {
        assert!(vm.owners(handle).is_err(), "{handle:?}");
        assert!(vm.clear_owners(handle).is_err(), "{handle:?}");
        let token = vm.owners_token(handle);
        assert!(vm.set_owners(&token, ONE).is_err(), "{handle:?}");
    }
    assert_eq!(fs::read_to_string(&outside).unwrap(), "one 0 0\n");
    assert!(!root.path().join("volumes/owners").exists());
}
