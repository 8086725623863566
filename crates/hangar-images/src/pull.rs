//! Layers downloaded ahead while earlier ones are applied.
//!
//! A pull is network time plus unpack time; done one after the other they
//! add up. Here up to [`DOWNLOADS_AT_ONCE`] layers download at once, each
//! into its own file, and layer `i`'s decoder (`decode_ahead.rs`, feeding
//! the applier) reads it from that file *while it is being written*: a
//! [`Following`] reader waits for more bytes instead of seeing the end of
//! a file that is still growing. Layers are still applied strictly in
//! order (whiteouts of a layer act on the layers below it).
//!
//! A layer's last bytes reach the applier only after its digest has been
//! verified (`oci-client` checks it at the end of the stream), so a layer
//! is never *completed* from bytes that fail their digest. Its first bytes
//! may be unpacked before the check; that is safe because everything lands
//! in the fetch's staging directory, which is removed on any failure and
//! only renamed into place when every layer verified and applied.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use futures_util::StreamExt;
use oci_client::manifest::OciDescriptor;
use oci_client::Reference;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::{io_ctx, stream_error, ImageError, Progress, Session};

/// Docker's default `max-concurrent-downloads`.
pub(crate) const DOWNLOADS_AT_ONCE: usize = 3;

/// How often a download tells the applier about new bytes: small enough
/// that the applier never waits long, large enough to cost nothing.
const PUBLISH_EVERY: usize = 1024 * 1024;

/// Progress lines about received bytes, at most one per this many bytes.
const REPORT_EVERY: u64 = 8 * 1024 * 1024;

/// How far a download has got, shared with the layer's reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// This many bytes are in the file; more are coming.
    Partial(u64),
    /// The whole blob is in the file and its digest and size checked.
    Verified(u64),
    /// The download failed or was cancelled; its own error says why.
    Failed,
}

#[derive(Debug)]
pub(crate) struct Shared {
    written: Mutex<Written>,
    changed: Condvar,
}

impl Shared {
    fn new() -> Arc<Self> {
        Arc::new(Shared {
            written: Mutex::new(Written::Partial(0)),
            changed: Condvar::new(),
        })
    }

    fn set(&self, to: Written) {
        let mut w = self.written.lock().unwrap_or_else(|p| p.into_inner());
        // Final states are final: a late `Failed` from the drop guard
        // does not undo a verified blob.
        if matches!(*w, Written::Partial(_)) {
            *w = to;
        }
        self.changed.notify_all();
    }
}

/// Marks the download failed if it ends any way but verified: an error, a
/// panic, or the task aborted because the fetch was dropped. Without it an
/// applier waiting for more bytes would wait forever.
struct FailUnlessVerified(Arc<Shared>);

impl Drop for FailUnlessVerified {
    fn drop(&mut self) {
        self.0.set(Written::Failed);
    }
}

/// Reads a layer file as its download writes it.
pub(crate) struct Following {
    file: File,
    shared: Arc<Shared>,
    read: u64,
}

impl Read for Following {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let available = {
            let mut w = self
                .shared
                .written
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            loop {
                match *w {
                    Written::Partial(n) if n > self.read => break n,
                    Written::Partial(_) => {
                        w = self
                            .shared
                            .changed
                            .wait(w)
                            .unwrap_or_else(|p| p.into_inner());
                    }
                    Written::Verified(n) if n > self.read => break n,
                    Written::Verified(_) => return Ok(0),
                    Written::Failed => return Err(io::Error::other("the layer's download failed")),
                }
            }
        };
        let want = usize::try_from(available - self.read)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = self.file.read(&mut buf[..want])?;
        if n == 0 {
            // The download said these bytes are written: a file that is
            // shorter than that was changed under us.
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the layer file is shorter than its download wrote",
            ));
        }
        self.read += n as u64;
        Ok(n)
    }
}

/// One layer on its way: its file, how far it is, and the task writing it.
pub(crate) struct Incoming {
    pub(crate) path: PathBuf,
    shared: Arc<Shared>,
    task: JoinHandle<Result<(), ImageError>>,
}

/// What the applier needs to read one layer, on its own thread.
pub(crate) struct Opener {
    path: PathBuf,
    shared: Arc<Shared>,
}

impl Opener {
    /// A reader of the layer that waits for its bytes. Opened only once
    /// the download has created the file (blocks until then).
    pub(crate) fn open(self) -> io::Result<Following> {
        {
            let mut w = self
                .shared
                .written
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            while *w == Written::Partial(0) {
                w = self
                    .shared
                    .changed
                    .wait(w)
                    .unwrap_or_else(|p| p.into_inner());
            }
        }
        Ok(Following {
            file: File::open(&self.path)?,
            shared: self.shared,
            read: 0,
        })
    }
}

impl Incoming {
    pub(crate) fn opener(&self) -> Opener {
        Opener {
            path: self.path.clone(),
            shared: Arc::clone(&self.shared),
        }
    }

    pub(crate) fn abort_handle(&self) -> tokio::task::AbortHandle {
        self.task.abort_handle()
    }

    /// Whether the download ended without a verified blob.
    pub(crate) fn failed(&self) -> bool {
        *self
            .shared
            .written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            == Written::Failed
    }

    /// The download's own outcome (its error is the cause when the
    /// applier saw only "the download failed").
    pub(crate) async fn finish(self) -> Result<(), ImageError> {
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(ImageError::Io {
                context: "download a layer".into(),
                source: io::Error::other(e.to_string()),
            }),
        }
    }
}

/// Starts every layer's download, [`DOWNLOADS_AT_ONCE`] at a time in the
/// manifest's order, and returns them in that order. Progress goes to
/// `events`. Dropping what is returned does not stop the downloads: abort
/// them by their [`Incoming::abort_handle`].
pub(crate) fn start_downloads(
    session: &Session,
    reference: &Reference,
    layers: &[OciDescriptor],
    dir: &Path,
    events: mpsc::UnboundedSender<Progress>,
) -> Vec<Incoming> {
    // Layer `i` starts when layer `i - DOWNLOADS_AT_ONCE` has ended (or
    // at once for the first ones), so downloads begin in the manifest's
    // order, the order the applier needs them in. (A semaphore would let
    // the runtime's scheduling pick who goes first.)
    let mut ended: Vec<oneshot::Receiver<()>> = Vec::new();
    layers
        .iter()
        .enumerate()
        .map(|(index, desc)| {
            let path = dir.join(format!("layer-{index}"));
            let shared = Shared::new();
            let job = Download {
                session: session.clone(),
                reference: reference.clone(),
                desc: desc.clone(),
                index,
                path: path.clone(),
                shared: Arc::clone(&shared),
                events: events.clone(),
            };
            let turn = index
                .checked_sub(DOWNLOADS_AT_ONCE)
                .map(|before| std::mem::replace(&mut ended[before], oneshot::channel().1));
            let (done, done_rx) = oneshot::channel::<()>();
            ended.push(done_rx);
            let task = tokio::spawn(async move {
                let _guard = FailUnlessVerified(Arc::clone(&job.shared));
                // Dropped with this task, however it ends: the next layer's
                // turn comes then.
                let _done = done;
                if let Some(turn) = turn {
                    let _ = turn.await;
                }
                job.run().await
            });
            Incoming { path, shared, task }
        })
        .collect()
}

struct Download {
    session: Session,
    reference: Reference,
    desc: OciDescriptor,
    index: usize,
    path: PathBuf,
    shared: Arc<Shared>,
    events: mpsc::UnboundedSender<Progress>,
}

impl Download {
    async fn run(self) -> Result<(), ImageError> {
        let what = format!("layer {} ({})", self.index + 1, self.desc.digest);
        let expected_size = u64::try_from(self.desc.size).unwrap_or(0);
        let _ = self.events.send(Progress::LayerStart {
            index: self.index,
            digest: self.desc.digest.clone(),
            size: expected_size,
        });
        let mut file = tokio::fs::File::create(&self.path)
            .await
            .map_err(io_ctx(format!("create {}", self.path.display())))?;
        // The reader opens the file once anything is published; an empty
        // layer publishes nothing before it is verified.
        let mut stream = self
            .session
            .client
            .pull_blob_stream(&self.reference, &self.desc)
            .await
            .map_err(|e| self.session.classify(&what, e))?;
        let mut pending: Vec<u8> = Vec::with_capacity(PUBLISH_EVERY);
        let mut received: u64 = 0;
        let mut next_report = REPORT_EVERY;
        // `oci-client` checks the digest as the stream ends: a blob that
        // does not match ends in an error here, never in `None`.
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| stream_error(&self.session, &what, e))?;
            received += chunk.len() as u64;
            if received > expected_size {
                return Err(ImageError::DigestMismatch {
                    what,
                    expected: format!("{} ({expected_size} bytes)", self.desc.digest),
                    actual: format!("more than {expected_size} bytes"),
                });
            }
            pending.extend_from_slice(&chunk);
            if pending.len() >= PUBLISH_EVERY {
                self.write(&mut file, &mut pending, received).await?;
            }
            if received >= next_report {
                let _ = self.events.send(Progress::LayerBytes {
                    index: self.index,
                    received,
                });
                next_report = received + REPORT_EVERY;
            }
        }
        if received != expected_size {
            return Err(ImageError::DigestMismatch {
                what,
                expected: format!("{} ({expected_size} bytes)", self.desc.digest),
                actual: format!("{received} bytes"),
            });
        }
        self.write(&mut file, &mut pending, received).await?;
        let _ = self.events.send(Progress::LayerBytes {
            index: self.index,
            received,
        });
        self.shared.set(Written::Verified(received));
        Ok(())
    }

    async fn write(
        &self,
        file: &mut tokio::fs::File,
        pending: &mut Vec<u8>,
        received: u64,
    ) -> Result<(), ImageError> {
        file.write_all(pending)
            .await
            .map_err(io_ctx(format!("write {}", self.path.display())))?;
        // tokio's file hands writes to a thread: wait until it is done, so
        // the bytes published are in the file.
        file.flush()
            .await
            .map_err(io_ctx(format!("write {}", self.path.display())))?;
        pending.clear();
        if received > 0 {
            // Published only while partial: the final count waits for the
            // digest check at the end of the stream.
            let mut w = self
                .shared
                .written
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if matches!(*w, Written::Partial(_)) {
                *w = Written::Partial(received);
            }
            self.shared.changed.notify_all();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A layer file written in steps by another thread, as a download
    /// writes it, with the state it publishes after each step.
    fn writer(
        path: PathBuf,
        shared: Arc<Shared>,
        pieces: Vec<Vec<u8>>,
        end: Option<Written>,
    ) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let guard = FailUnlessVerified(Arc::clone(&shared));
            let mut file = File::create(&path).unwrap();
            let mut written = 0u64;
            for piece in pieces {
                file.write_all(&piece).unwrap();
                written += piece.len() as u64;
                shared.set_partial(written);
                std::thread::yield_now();
            }
            match end {
                Some(state) => shared.set(state),
                // Ends without a verdict: the guard says failed.
                None => drop(guard),
            }
        })
    }

    impl Shared {
        fn set_partial(&self, n: u64) {
            let mut w = self.written.lock().unwrap();
            *w = Written::Partial(n);
            self.changed.notify_all();
        }
    }

    fn pieces() -> Vec<Vec<u8>> {
        (0u8..40).map(|i| vec![i; 1000 + usize::from(i)]).collect()
    }

    #[test]
    fn a_reader_follows_the_file_to_its_verified_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("layer");
        let shared = Shared::new();
        let all: Vec<u8> = pieces().concat();
        let total = all.len() as u64;
        let w = writer(
            path.clone(),
            Arc::clone(&shared),
            pieces(),
            Some(Written::Verified(total)),
        );
        let mut out = Vec::new();
        Opener { path, shared }
            .open()
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        w.join().unwrap();
        assert_eq!(out.len(), all.len());
        assert!(out == all);
    }

    #[test]
    fn a_download_that_ends_unverified_fails_the_reader_instead_of_ending_the_layer() {
        for end in [Some(Written::Failed), None] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("layer");
            let shared = Shared::new();
            let w = writer(path.clone(), Arc::clone(&shared), pieces(), end);
            let mut out = Vec::new();
            let err = Opener { path, shared }
                .open()
                .unwrap()
                .read_to_end(&mut out)
                .unwrap_err();
            w.join().unwrap();
            assert_eq!(err.to_string(), "the layer's download failed", "{end:?}");
        }
    }

    #[test]
    fn a_verdict_is_final() {
        let shared = Shared::new();
        shared.set(Written::Verified(10));
        // The drop guard of a verified download changes nothing.
        drop(FailUnlessVerified(Arc::clone(&shared)));
        assert_eq!(*shared.written.lock().unwrap(), Written::Verified(10));
    }
}
