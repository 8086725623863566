//! Resolving and fetching images from a real registry (Debian's
//! `docker-registry`, started by each test on a loopback port), with images
//! built here and pushed over the distribution API. Every test needs
//! `docker-registry` (and the basic-auth one `htpasswd`) and says so in its
//! name; without them it fails naming `scripts/install-deps`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use hangar_images::testing::{
    config_json, free_port, Compression, Registry, TarBuilder, TestImage, TestLayer,
};
use hangar_images::{
    fetch, fetch_with_limits, resolve, ImageError, Limits, Platform, Progress, Source,
};

fn source(registry: &Registry, repo: &str, tag: &str) -> Source {
    Source {
        repository: format!("{}/{repo}", registry.addr),
        tag: tag.into(),
        insecure: true,
        ..Source::default()
    }
}

async fn fetch_into(
    source: &Source,
    digest: &str,
    platform: &Platform,
    dest: &Path,
) -> (
    Result<hangar_images::ImageConfig, ImageError>,
    Vec<Progress>,
) {
    let mut events = Vec::new();
    let result = fetch(source, digest, platform, dest, |p| events.push(p)).await;
    (result, events)
}

/// What a directory holds, sorted, as `name` paths relative to it.
fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(base, &p, out);
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[tokio::test]
async fn docker_registry_tag_resolves_and_layers_apply_with_whiteouts_in_every_compression() {
    let registry = Registry::start().await;
    let lower = TarBuilder::new()
        .dir("etc/")
        .file("etc/keep", b"keep")
        .file("etc/gone", b"deleted by the next layer")
        .dir("opaque/")
        .file("opaque/old", b"hidden by the opaque dir")
        .dir("opaque/sub/")
        .file("opaque/sub/deep", b"hidden too")
        .dir("usr/")
        .dir("usr/lib/")
        .symlink("lib", "usr/lib")
        .file_mode("bin-tool", 0o755, b"#!/bin/sh\n")
        .hardlink("bin-tool-link", "bin-tool")
        .finish();
    let middle = TarBuilder::new()
        .file("etc/.wh.gone", b"")
        .file("opaque/new", b"this layer's")
        .file(
            "opaque/sub/fresh",
            b"this layer's, in a dir of the lower one",
        )
        .file("opaque/.wh..wh..opq", b"")
        // Through a relative symlink that stays inside: lands in usr/lib.
        .file("lib/libx.so", b"elf")
        .finish();
    let upper = TarBuilder::new()
        .file("etc/keep", b"replaced")
        .symlink("abs-link", "/bin-tool")
        .char_device("dev-null")
        .dir_mode("ro/", 0o555)
        .file("ro/inside", b"written after its read-only dir")
        .finish();
    let image = TestImage {
        config: config_json(&["PATH=/usr/bin:/bin", "FOO=bar"], "1000:1000", "amd64"),
        layers: vec![
            TestLayer::new(lower, Compression::Gzip),
            TestLayer::new(middle, Compression::Zstd),
            TestLayer::new(upper, Compression::None),
        ],
        docker: false,
    };
    let (pushed, _) = registry.push_image("team/app", Some("v1"), &image).await;
    let src = source(&registry, "team/app", "v1");

    let digest = resolve(&src).await.expect("resolve");
    assert_eq!(digest, pushed, "the tag resolves to the manifest pushed");

    let dest = tempfile::tempdir().unwrap();
    let (result, events) = fetch_into(&src, &digest, &Platform::host(), dest.path()).await;
    let config = result.expect("fetch");
    assert_eq!(config.env, vec!["PATH=/usr/bin:/bin", "FOO=bar"]);
    assert_eq!(config.user, "1000:1000");

    let rootfs = dest.path().join("rootfs");
    assert_eq!(
        listing(&rootfs),
        vec![
            "abs-link",
            "bin-tool",
            "bin-tool-link",
            "etc",
            "etc/keep",
            "lib",
            "opaque",
            "opaque/new",
            "opaque/sub",
            "opaque/sub/fresh",
            "ro",
            "ro/inside",
            "usr",
            "usr/lib",
            "usr/lib/libx.so",
        ],
        "the device is skipped"
    );
    let ro = std::fs::metadata(rootfs.join("ro"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        ro & 0o777,
        0o555,
        "a directory's mode is applied after its entries"
    );
    assert_eq!(std::fs::read(rootfs.join("etc/keep")).unwrap(), b"replaced");
    assert_eq!(
        std::fs::read(rootfs.join("usr/lib/libx.so")).unwrap(),
        b"elf"
    );
    assert_eq!(
        std::fs::read_link(rootfs.join("abs-link")).unwrap(),
        Path::new("/bin-tool")
    );
    let mode = std::fs::metadata(rootfs.join("bin-tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(rootfs.join("bin-tool")).unwrap().ino(),
        std::fs::metadata(rootfs.join("bin-tool-link"))
            .unwrap()
            .ino(),
        "a hard link is one file"
    );

    // The layout of Concourse's registry-image `in`.
    assert_eq!(
        std::fs::read_to_string(dest.path().join("metadata.json")).unwrap(),
        "{\"cmd\":null,\"entrypoint\":null,\"env\":[\"PATH=/usr/bin:/bin\",\"FOO=bar\"],\"user\":\"1000:1000\"}\n"
    );
    assert_eq!(
        std::fs::read_to_string(dest.path().join("labels.json")).unwrap(),
        "{\"org.example\":\"yes\"}\n"
    );
    assert_eq!(
        std::fs::read_to_string(dest.path().join("digest")).unwrap(),
        digest
    );
    assert_eq!(
        std::fs::read_to_string(dest.path().join("tag")).unwrap(),
        "v1"
    );
    assert_eq!(
        std::fs::read_to_string(dest.path().join("repository")).unwrap(),
        src.repository
    );
    assert_eq!(
        listing(dest.path())
            .iter()
            .filter(|p| !p.starts_with("rootfs"))
            .collect::<Vec<_>>(),
        vec![
            "digest",
            "labels.json",
            "metadata.json",
            "repository",
            "tag"
        ],
        "no staging dir is left"
    );

    let compressions: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Progress::LayerDone { compression, .. } => Some(*compression),
            _ => None,
        })
        .collect();
    assert_eq!(compressions, vec!["gzip", "zstd", "uncompressed"]);
    assert!(
        events.iter().any(|e| matches!(
            e,
            Progress::LayerDone {
                index: 2,
                skipped_devices: 1,
                ..
            }
        )),
        "{events:?}"
    );
    assert!(
        matches!(events[0], Progress::Manifest { layers: 3, .. }),
        "{events:?}"
    );

    // A second fetch into the same destination is refused, not merged.
    let (again, _) = fetch_into(&src, &digest, &Platform::host(), dest.path()).await;
    assert!(
        matches!(again, Err(ImageError::DestinationInUse(_))),
        "{again:?}"
    );
}

#[tokio::test]
async fn docker_registry_docker_v2_manifest_and_missing_tag() {
    let registry = Registry::start().await;
    let image = TestImage {
        config: config_json(&[], "", "amd64"),
        layers: vec![TestLayer::new(
            TarBuilder::new().file("hello", b"hi").finish(),
            Compression::Gzip,
        )],
        docker: true,
    };
    let (pushed, _) = registry
        .push_image("docker/v2", Some("latest"), &image)
        .await;
    let src = source(&registry, "docker/v2", "");
    let digest = resolve(&src).await.expect("resolve with the default tag");
    assert_eq!(digest, pushed);
    let dest = tempfile::tempdir().unwrap();
    // What a fetch killed midway leaves is removed, never used.
    std::fs::create_dir_all(dest.path().join(".rootfs-staging-1/rootfs/half")).unwrap();
    let (result, _) = fetch_into(&src, &digest, &Platform::host(), dest.path()).await;
    result.expect("fetch");
    assert_eq!(
        std::fs::read(dest.path().join("rootfs/hello")).unwrap(),
        b"hi"
    );
    assert!(!dest.path().join(".rootfs-staging-1").exists());
    assert_eq!(
        std::fs::read_to_string(dest.path().join("metadata.json")).unwrap(),
        "{\"cmd\":null,\"entrypoint\":null,\"env\":null,\"user\":\"\"}\n"
    );

    let err = resolve(&source(&registry, "docker/v2", "nope"))
        .await
        .unwrap_err();
    assert!(matches!(err, ImageError::NotFound { .. }), "{err:?}");
    assert!(!err.is_infrastructure());
    assert!(err.to_string().contains("docker/v2:nope"), "{err}");
}

#[tokio::test]
async fn docker_registry_index_with_two_platforms_fetches_the_workers() {
    index_with_two_platforms(false).await;
}

#[tokio::test]
async fn docker_registry_manifest_list_with_two_platforms_fetches_the_workers() {
    index_with_two_platforms(true).await;
}

async fn index_with_two_platforms(docker: bool) {
    let (index_type, manifest_type) = if docker {
        (
            "application/vnd.docker.distribution.manifest.list.v2+json",
            "application/vnd.docker.distribution.manifest.v2+json",
        )
    } else {
        (
            "application/vnd.oci.image.index.v1+json",
            "application/vnd.oci.image.manifest.v1+json",
        )
    };
    let registry = Registry::start().await;
    let host = Platform::host();
    let other_arch = if host.architecture == "arm64" {
        "amd64"
    } else {
        "arm64"
    };
    let mut entries = Vec::new();
    for (arch, marker) in [(other_arch, "other"), (host.architecture.as_str(), "host")] {
        let image = TestImage {
            config: config_json(&[&format!("ARCH={arch}")], "", arch),
            layers: vec![TestLayer::new(
                TarBuilder::new().file(marker, arch.as_bytes()).finish(),
                Compression::Gzip,
            )],
            docker,
        };
        let (digest, size) = registry.push_image("multi", None, &image).await;
        entries.push(serde_json::json!({
            "mediaType": manifest_type,
            "digest": digest,
            "size": size,
            "platform": {"os": "linux", "architecture": arch},
        }));
    }
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": index_type,
        "manifests": entries,
    }))
    .unwrap();
    let index_digest = registry
        .push_manifest("multi", "latest", index_type, &index)
        .await;
    let src = source(&registry, "multi", "latest");
    let digest = resolve(&src).await.expect("resolve");
    assert_eq!(
        digest, index_digest,
        "check reports the index, as Concourse's does"
    );

    let dest = tempfile::tempdir().unwrap();
    let (result, _) = fetch_into(&src, &digest, &host, dest.path()).await;
    let config = result.expect("fetch");
    assert_eq!(config.env, vec![format!("ARCH={}", host.architecture)]);
    assert_eq!(listing(&dest.path().join("rootfs")), vec!["host"]);
    assert_eq!(
        std::fs::read_to_string(dest.path().join("digest")).unwrap(),
        index_digest
    );

    let s390 = Platform {
        os: "linux".into(),
        architecture: "s390x".into(),
        variant: None,
    };
    let dest = tempfile::tempdir().unwrap();
    let (result, _) = fetch_into(&src, &digest, &s390, dest.path()).await;
    let err = result.unwrap_err();
    assert!(matches!(err, ImageError::Unsupported(_)), "{err:?}");
    assert!(
        err.to_string().contains("no image for linux/s390x"),
        "{err}"
    );
    assert!(listing(dest.path()).is_empty());
}

#[tokio::test]
async fn docker_registry_blob_not_matching_its_digest_is_refused_and_nothing_is_left() {
    let registry = Registry::start().await;
    let layer = TestLayer::new(
        TarBuilder::new().file("a", b"good bytes").finish(),
        Compression::None,
    );
    let layer_digest = hangar_images::testing::sha256(&layer.data);
    let image = TestImage {
        config: config_json(&[], "", "amd64"),
        layers: vec![layer],
        docker: false,
    };
    let (digest, _) = registry.push_image("corrupt", Some("latest"), &image).await;
    // Same length, other bytes: the registry serves what is on its disk.
    let data_path = registry.blob_data_path(&layer_digest);
    let mut data = std::fs::read(&data_path).unwrap();
    let at = data.windows(4).position(|w| w == b"good").unwrap();
    data[at..at + 4].copy_from_slice(b"evil");
    std::fs::write(&data_path, &data).unwrap();

    let dest = tempfile::tempdir().unwrap();
    let (result, _) = fetch_into(
        &source(&registry, "corrupt", "latest"),
        &digest,
        &Platform::host(),
        dest.path(),
    )
    .await;
    let err = result.unwrap_err();
    assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err:?}");
    assert!(!err.is_infrastructure());
    assert!(err.to_string().contains(&layer_digest), "{err}");
    assert!(
        listing(dest.path()).is_empty(),
        "nothing left: {:?}",
        listing(dest.path())
    );

    // A manifest fetched by a digest it does not have is refused too.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let (result, _) = fetch_into(
        &source(&registry, "corrupt", "latest"),
        &wrong,
        &Platform::host(),
        dest.path(),
    )
    .await;
    let err = result.unwrap_err();
    assert!(matches!(err, ImageError::NotFound { .. }), "{err:?}");
}

async fn push_single_layer(registry: &Registry, repo: &str, tar: Vec<u8>) -> String {
    let image = TestImage {
        config: config_json(&[], "", "amd64"),
        layers: vec![
            TestLayer::new(
                TarBuilder::new().file("base", b"base").finish(),
                Compression::Gzip,
            ),
            TestLayer::new(tar, Compression::Gzip),
        ],
        docker: false,
    };
    registry.push_image(repo, Some("latest"), &image).await.0
}

#[tokio::test]
async fn docker_registry_hostile_layers_are_refused_and_write_nothing_outside() {
    let registry = Registry::start().await;
    let outside = tempfile::tempdir().unwrap();
    let outside_path = outside.path().display().to_string();
    // A file a whiteout through a link must not delete.
    let victim = tempfile::tempdir().unwrap();
    std::fs::write(victim.path().join("file"), b"precious").unwrap();
    let victim_path = victim.path().display().to_string();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "dotdot",
            TarBuilder::new().file("../x", b"escaped").finish(),
            "contains `..`",
        ),
        (
            "deep-dotdot",
            TarBuilder::new()
                .dir("a/")
                .file("a/../../x", b"escaped")
                .finish(),
            "contains `..`",
        ),
        (
            "absolute",
            TarBuilder::new()
                .file(&format!("{outside_path}/x"), b"escaped")
                .finish(),
            "is absolute",
        ),
        (
            "abs-symlink",
            TarBuilder::new()
                .symlink("evil", &outside_path)
                .file("evil/x", b"escaped")
                .finish(),
            "absolute symlink",
        ),
        (
            "rel-symlink-out",
            TarBuilder::new()
                .dir("d/")
                .symlink("d/up", "../..")
                .file("d/up/x", b"escaped")
                .finish(),
            "out of the root filesystem",
        ),
        (
            "hardlink-out",
            TarBuilder::new()
                .hardlink("passwd", "../../../../etc/passwd")
                .finish(),
            "contains `..`",
        ),
        (
            "hardlink-through-symlink",
            TarBuilder::new()
                .symlink("etc", "/etc")
                .hardlink("passwd", "etc/passwd")
                .finish(),
            "absolute symlink",
        ),
        (
            "whiteout-through-symlink",
            TarBuilder::new()
                .symlink("v", &victim_path)
                .file("v/.wh.file", b"")
                .finish(),
            "absolute symlink",
        ),
        (
            "opaque-through-symlink",
            TarBuilder::new()
                .symlink("v", &victim_path)
                .file("v/.wh..wh..opq", b"")
                .finish(),
            "absolute symlink",
        ),
    ];
    for (repo, tar, why) in cases {
        let digest = push_single_layer(&registry, repo, tar).await;
        let dest = tempfile::tempdir().unwrap();
        let (result, _) = fetch_into(
            &source(&registry, repo, "latest"),
            &digest,
            &Platform::host(),
            dest.path(),
        )
        .await;
        let err = result.expect_err(repo);
        assert!(
            matches!(err, ImageError::HostileLayer { .. }),
            "{repo}: {err:?}"
        );
        assert!(!err.is_infrastructure(), "{repo}");
        assert!(err.to_string().contains(why), "{repo}: {err}");
        assert!(
            listing(dest.path()).is_empty(),
            "{repo}: {:?}",
            listing(dest.path())
        );
        assert!(listing(outside.path()).is_empty(), "{repo} wrote outside");
        assert_eq!(
            std::fs::read(victim.path().join("file")).unwrap(),
            b"precious",
            "{repo} deleted outside"
        );
        assert!(
            !dest.path().parent().unwrap().join("x").exists(),
            "{repo} wrote outside"
        );
    }
}

#[tokio::test]
async fn docker_registry_unreachable_is_infrastructure() {
    let src = Source {
        repository: format!("127.0.0.1:{}/nothing", free_port()),
        tag: "latest".into(),
        insecure: true,
        ..Source::default()
    };
    let err = resolve(&src).await.unwrap_err();
    assert!(matches!(err, ImageError::Unreachable { .. }), "{err:?}");
    assert!(err.is_infrastructure());
    assert!(err.to_string().contains("unreachable"), "{err}");
    let dest = tempfile::tempdir().unwrap();
    let digest = format!("sha256:{}", "a".repeat(64));
    let (result, _) = fetch_into(&src, &digest, &Platform::host(), dest.path()).await;
    let err = result.unwrap_err();
    assert!(err.is_infrastructure(), "{err:?}");
    assert!(listing(dest.path()).is_empty());

    // HTTPS against a plain HTTP registry: the TLS handshake fails, which is
    // the network's answer too.
    let registry = Registry::start().await;
    let mut tls = source(&registry, "any", "latest");
    tls.insecure = false;
    let err = resolve(&tls).await.unwrap_err();
    assert!(matches!(err, ImageError::Unreachable { .. }), "{err:?}");
}

#[tokio::test]
async fn docker_registry_with_basic_auth_refuses_wrong_credentials_and_serves_right_ones() {
    let registry = Registry::start_with_auth("ci", "s3cret").await;
    let image = TestImage {
        config: config_json(&["A=1"], "", "amd64"),
        layers: vec![TestLayer::new(
            TarBuilder::new().file("private", b"data").finish(),
            Compression::Zstd,
        )],
        docker: false,
    };
    let (pushed, _) = registry
        .push_image("private/app", Some("latest"), &image)
        .await;

    let anonymous = source(&registry, "private/app", "latest");
    let err = resolve(&anonymous).await.unwrap_err();
    assert!(matches!(err, ImageError::Unauthorized { .. }), "{err:?}");
    assert!(!err.is_infrastructure());
    assert!(err.to_string().contains("401"), "{err}");

    let mut wrong = anonymous.clone();
    wrong.username = Some("ci".into());
    wrong.password = Some("wrong".into());
    let err = resolve(&wrong).await.unwrap_err();
    assert!(matches!(err, ImageError::Unauthorized { .. }), "{err:?}");
    assert!(
        !format!("{wrong:?}").contains("wrong"),
        "the password is not in Debug"
    );
    let dest = tempfile::tempdir().unwrap();
    let (result, _) = fetch_into(&wrong, &pushed, &Platform::host(), dest.path()).await;
    assert!(
        matches!(result, Err(ImageError::Unauthorized { .. })),
        "{result:?}"
    );
    assert!(listing(dest.path()).is_empty());

    let mut right = anonymous.clone();
    right.username = Some("ci".into());
    right.password = Some("s3cret".into());
    assert_eq!(resolve(&right).await.expect("resolve"), pushed);
    let (result, _) = fetch_into(&right, &pushed, &Platform::host(), dest.path()).await;
    result.expect("fetch");
    assert_eq!(
        std::fs::read(dest.path().join("rootfs/private")).unwrap(),
        b"data"
    );
}

#[tokio::test]
async fn bad_references_are_the_configurations_fault() {
    for repo in ["", "UPPER/case", "a/b:tag", "a@sha256:00"] {
        let src = Source {
            repository: repo.into(),
            ..Source::default()
        };
        let err = resolve(&src).await.unwrap_err();
        assert!(
            matches!(err, ImageError::BadReference { .. }),
            "{repo}: {err:?}"
        );
        assert!(!err.is_infrastructure());
    }
    let dest = tempfile::tempdir().unwrap();
    let src = Source {
        repository: "127.0.0.1:1/x".into(),
        ..Source::default()
    };
    let err = fetch(&src, "latest", &Platform::host(), dest.path(), |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, ImageError::BadReference { .. }), "{err:?}");
    let src = Source {
        repository: "x".into(),
        ca_certs: vec!["not a pem".into()],
        ..Source::default()
    };
    assert!(matches!(resolve(&src).await, Err(ImageError::BadSource(_))));
}

#[test]
fn fetch_with_a_send_callback_is_a_send_future() {
    fn assert_send<T: Send>(_: &T) {}
    let src = Source::default();
    let platform = Platform::host();
    let dest = std::path::PathBuf::from("/nonexistent");
    let mut seen = 0usize;
    let future = fetch(&src, "sha256:00", &platform, &dest, |_| seen += 1);
    assert_send(&future);
}

#[tokio::test]
async fn docker_registry_an_image_past_its_unpacked_limits_is_refused() {
    let registry = Registry::start().await;
    let mut many = TarBuilder::new();
    for i in 0..20 {
        many.file(&format!("f{i}"), b"x");
    }
    let image = TestImage {
        config: config_json(&[], "", "amd64"),
        layers: vec![
            TestLayer::new(many.finish(), Compression::Gzip),
            // Highly compressible: small on the wire, large unpacked.
            TestLayer::new(
                TarBuilder::new()
                    .file("zeros", &vec![0u8; 1 << 20])
                    .finish(),
                Compression::Zstd,
            ),
        ],
        docker: false,
    };
    let (digest, _) = registry.push_image("bomb", Some("latest"), &image).await;
    let src = source(&registry, "bomb", "latest");
    let cases = [
        (
            Limits {
                max_bytes: 1 << 30,
                max_entries: 10,
            },
            "more than 10 entries",
        ),
        (
            Limits {
                max_bytes: 512 * 1024,
                max_entries: 1000,
            },
            "more than 524288 bytes",
        ),
    ];
    for (limits, why) in cases {
        let dest = tempfile::tempdir().unwrap();
        let err = fetch_with_limits(
            &src,
            &digest,
            &Platform::host(),
            dest.path(),
            &limits,
            |_| {},
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ImageError::HostileLayer { .. }), "{err:?}");
        assert!(err.to_string().contains(why), "{err}");
        assert!(listing(dest.path()).is_empty());
    }
    // Within them it is fetched.
    let dest = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_bytes: 4 << 20,
        max_entries: 30,
    };
    fetch_with_limits(
        &src,
        &digest,
        &Platform::host(),
        dest.path(),
        &limits,
        |_| {},
    )
    .await
    .expect("fetch within the limits");
}
