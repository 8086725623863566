//! Test support (feature `testing`): a real registry (Debian's
//! `docker-registry`, the distribution registry) started on a loopback port
//! with a storage dir of its own, optionally behind htpasswd basic auth, and
//! images built in Rust and pushed to it with plain calls of the
//! distribution API. No image comes from outside.
//!
//! A test that uses it needs `docker-registry` (and `htpasswd` for basic
//! auth) and fails without them, naming `scripts/install-deps`.

#![allow(clippy::disallowed_methods)] // test support: blocking on purpose

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

/// A running registry; killed when dropped.
pub struct Registry {
    child: Child,
    dir: tempfile::TempDir,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Basic credentials the registry requires, if any.
    pub credentials: Option<(String, String)>,
    http: reqwest::Client,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn need(program: &str, package: &str) -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(program);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "this test needs `{program}` (Debian package {package}); run scripts/install-deps \
         to install it"
    );
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a loopback port")
        .local_addr()
        .expect("local addr")
        .port()
}

impl Registry {
    /// Starts a registry that anyone may pull from and push to.
    pub async fn start() -> Registry {
        Self::start_with(None).await
    }

    /// Starts a registry that requires these basic credentials.
    pub async fn start_with_auth(user: &str, password: &str) -> Registry {
        Self::start_with(Some((user.to_string(), password.to_string()))).await
    }

    async fn start_with(credentials: Option<(String, String)>) -> Registry {
        let program = need("docker-registry", "docker-registry");
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = dir.path().join("storage");
        std::fs::create_dir(&storage).expect("storage dir");
        let auth = match &credentials {
            Some((user, password)) => {
                let htpasswd = need("htpasswd", "apache2-utils");
                let out = Command::new(htpasswd)
                    .args(["-nbB", user, password])
                    .output()
                    .expect("run htpasswd");
                assert!(out.status.success(), "htpasswd failed: {out:?}");
                let file = dir.path().join("htpasswd");
                std::fs::write(&file, &out.stdout).expect("write htpasswd");
                format!(
                    "auth:\n  htpasswd:\n    realm: hangar-test\n    path: {}\n",
                    file.display()
                )
            }
            None => String::new(),
        };
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n{auth}",
            storage.display()
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("write config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("log file");
        let child = Command::new(program)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        let registry = Registry {
            child,
            dir,
            addr,
            credentials,
            http: reqwest::Client::new(),
        };
        registry.wait_ready().await;
        registry
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = self
                .http
                .get(format!("http://{}/v2/", self.addr))
                .send()
                .await
            {
                if r.status().is_success() || r.status().as_u16() == 401 {
                    return;
                }
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.path().join("registry.log"))
                    .unwrap_or_default();
                panic!(
                    "docker-registry did not answer on {} within 20 s; its log:\n{log}",
                    self.addr
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Where the registry keeps a blob's bytes (its filesystem driver's
    /// layout), for tests that corrupt one.
    pub fn blob_data_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    fn req(&self, b: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.credentials {
            Some((u, p)) => b.basic_auth(u, Some(p)),
            None => b,
        }
    }

    /// Pushes a blob, returns its digest.
    pub async fn push_blob(&self, repo: &str, data: &[u8]) -> String {
        let digest = sha256(data);
        let start = self
            .req(
                self.http
                    .post(format!("http://{}/v2/{repo}/blobs/uploads/", self.addr)),
            )
            .send()
            .await
            .expect("start upload");
        assert_eq!(start.status().as_u16(), 202, "start upload: {start:?}");
        let location = start
            .headers()
            .get("location")
            .expect("location")
            .to_str()
            .expect("ascii")
            .to_string();
        let url = if location.starts_with("http") {
            location
        } else {
            format!("http://{}{location}", self.addr)
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        let done = self
            .req(self.http.put(format!("{url}{sep}digest={digest}")))
            .header("content-type", "application/octet-stream")
            .body(data.to_vec())
            .send()
            .await
            .expect("finish upload");
        assert_eq!(
            done.status().as_u16(),
            201,
            "finish upload: {:?}",
            done.text().await
        );
        digest
    }

    /// Pushes a manifest (or index) under `reference` (a tag or its
    /// digest), returns its digest.
    pub async fn push_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        body: &[u8],
    ) -> String {
        let r = self
            .req(self.http.put(format!(
                "http://{}/v2/{repo}/manifests/{reference}",
                self.addr
            )))
            .header("content-type", media_type)
            .body(body.to_vec())
            .send()
            .await
            .expect("push manifest");
        assert_eq!(
            r.status().as_u16(),
            201,
            "push manifest: {:?}",
            r.text().await
        );
        sha256(body)
    }

    /// Pushes an image (config and layers as given, already compressed or
    /// not) with a manifest of `manifest_type` (OCI or Docker v2); returns
    /// the manifest's digest and its size.
    pub async fn push_image(
        &self,
        repo: &str,
        tag: Option<&str>,
        image: &TestImage,
    ) -> (String, usize) {
        let config_digest = self.push_blob(repo, &image.config).await;
        let mut layers = Vec::new();
        for layer in &image.layers {
            let digest = self.push_blob(repo, &layer.data).await;
            layers.push(serde_json::json!({
                "mediaType": layer.media_type(image.docker),
                "digest": digest,
                "size": layer.data.len(),
            }));
        }
        let (manifest_type, config_type) = if image.docker {
            (
                "application/vnd.docker.distribution.manifest.v2+json",
                "application/vnd.docker.container.image.v1+json",
            )
        } else {
            (
                "application/vnd.oci.image.manifest.v1+json",
                "application/vnd.oci.image.config.v1+json",
            )
        };
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": manifest_type,
            "config": {"mediaType": config_type, "digest": config_digest, "size": image.config.len()},
            "layers": layers,
        });
        let body = serde_json::to_vec(&manifest).expect("json");
        let digest = sha256(&body);
        self.push_manifest(repo, tag.unwrap_or(&digest), manifest_type, &body)
            .await;
        (digest, body.len())
    }
}

/// The sha256 digest of bytes, as `sha256:hex`.
pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(data))
}

/// How a test layer is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// A layer as pushed.
pub struct TestLayer {
    pub data: Vec<u8>,
    pub compression: Compression,
}

impl TestLayer {
    /// Compresses a tar stream.
    pub fn new(tar: Vec<u8>, compression: Compression) -> Self {
        let data = match compression {
            Compression::None => tar,
            Compression::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(&tar).expect("gzip");
                e.finish().expect("gzip")
            }
            Compression::Zstd => zstd::encode_all(&tar[..], 3).expect("zstd"),
        };
        TestLayer { data, compression }
    }

    fn media_type(&self, docker: bool) -> &'static str {
        match (docker, self.compression) {
            (false, Compression::None) => "application/vnd.oci.image.layer.v1.tar",
            (false, Compression::Gzip) => "application/vnd.oci.image.layer.v1.tar+gzip",
            (false, Compression::Zstd) => "application/vnd.oci.image.layer.v1.tar+zstd",
            (true, Compression::None) => "application/vnd.docker.image.rootfs.diff.tar",
            (true, Compression::Gzip) => "application/vnd.docker.image.rootfs.diff.tar.gzip",
            (true, Compression::Zstd) => "application/vnd.docker.image.rootfs.diff.tar.zstd",
        }
    }
}

/// An image to push: a config blob and layers.
pub struct TestImage {
    pub config: Vec<u8>,
    pub layers: Vec<TestLayer>,
    /// Docker v2 media types instead of OCI's.
    pub docker: bool,
}

/// A config blob with these env and user.
pub fn config_json(env: &[&str], user: &str, arch: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "architecture": arch,
        "os": "linux",
        "config": {"Env": env, "User": user, "WorkingDir": "/", "Labels": {"org.example": "yes"}},
        "rootfs": {"type": "layers", "diff_ids": []},
    }))
    .expect("json")
}

/// Builds a tar stream entry by entry, writing names and link targets as
/// given (`../x` and `/abs` included: the `tar` crate's own setters refuse
/// them, and hostile layers are the point of some tests).
#[derive(Default)]
pub struct TarBuilder {
    out: Vec<u8>,
}

impl TarBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    fn raw(
        &mut self,
        name: &str,
        kind: tar::EntryType,
        mode: u32,
        link: Option<&str>,
        data: &[u8],
    ) -> &mut Self {
        self.raw_owned(name, kind, mode, link, data, (0, 0))
    }

    fn raw_owned(
        &mut self,
        name: &str,
        kind: tar::EntryType,
        mode: u32,
        link: Option<&str>,
        data: &[u8],
        (uid, gid): (u64, u64),
    ) -> &mut Self {
        let mut header = tar::Header::new_gnu();
        {
            let gnu = header.as_gnu_mut().expect("gnu header");
            assert!(name.len() < gnu.name.len(), "test names are short");
            gnu.name[..name.len()].copy_from_slice(name.as_bytes());
            if let Some(link) = link {
                assert!(link.len() < gnu.linkname.len(), "test links are short");
                gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
            }
        }
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(data.len() as u64);
        header.set_uid(uid);
        header.set_gid(gid);
        header.set_mtime(0);
        header.set_cksum();
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.out.extend(std::iter::repeat_n(0u8, pad));
        self
    }

    pub fn dir(&mut self, name: &str) -> &mut Self {
        self.raw(name, tar::EntryType::Directory, 0o755, None, &[])
    }

    pub fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.raw(name, tar::EntryType::Regular, 0o644, None, data)
    }

    /// A file owned by `uid:gid`.
    pub fn file_owned(&mut self, name: &str, uid: u64, gid: u64, data: &[u8]) -> &mut Self {
        self.raw_owned(name, tar::EntryType::Regular, 0o644, None, data, (uid, gid))
    }

    /// A directory owned by `uid:gid`.
    pub fn dir_owned(&mut self, name: &str, uid: u64, gid: u64) -> &mut Self {
        self.raw_owned(
            name,
            tar::EntryType::Directory,
            0o755,
            None,
            &[],
            (uid, gid),
        )
    }

    pub fn file_mode(&mut self, name: &str, mode: u32, data: &[u8]) -> &mut Self {
        self.raw(name, tar::EntryType::Regular, mode, None, data)
    }

    pub fn symlink(&mut self, name: &str, target: &str) -> &mut Self {
        self.raw(name, tar::EntryType::Symlink, 0o777, Some(target), &[])
    }

    pub fn hardlink(&mut self, name: &str, target: &str) -> &mut Self {
        self.raw(name, tar::EntryType::Link, 0o644, Some(target), &[])
    }

    pub fn dir_mode(&mut self, name: &str, mode: u32) -> &mut Self {
        self.raw(name, tar::EntryType::Directory, mode, None, &[])
    }

    pub fn char_device(&mut self, name: &str) -> &mut Self {
        self.raw(name, tar::EntryType::Char, 0o666, None, &[])
    }

    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.out);
        out.extend(std::iter::repeat_n(0u8, 1024));
        out
    }
}
