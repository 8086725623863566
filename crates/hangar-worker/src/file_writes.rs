//! Wakes a follower of a file as soon as something writes to it: the
//! kernel's inotify, read through tokio. A container writes its log
//! straight into a file (no process of the worker's sits in between), so
//! without this a follower at the end of the file could only look again
//! after a while, and a task's first line would wait for that while.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;

/// The inotify instance, as tokio needs it (a raw fd).
struct Instance(Inotify);

impl AsRawFd for Instance {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Writes to one file, as they happen.
pub(crate) struct FileWrites {
    fd: AsyncFd<Instance>,
}

impl FileWrites {
    /// Watches `path` from now on: a write after this call wakes the next
    /// [`FileWrites::wait`], however soon after it is called. Fails where
    /// inotify is out of instances or watches (the caller then polls).
    pub(crate) fn watch(path: &Path) -> std::io::Result<FileWrites> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        // Written, or closed by a writer (the container's end).
        inotify.add_watch(
            path,
            AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CLOSE_WRITE,
        )?;
        // `AsyncFd::new` is deprecated as unsound for a type whose raw fd
        // may be closed or change while it is registered; `Instance` owns
        // its fd for its whole life and always names the same one, which is
        // what the safe constructor needs (`register` would need `unsafe`,
        // which this workspace forbids).
        #[allow(deprecated)]
        let fd = AsyncFd::with_interest(Instance(inotify), tokio::io::Interest::READABLE)?;
        Ok(FileWrites { fd })
    }

    /// Returns once the file was written to since the last call (at once if
    /// it already was), or when `within` has passed.
    pub(crate) async fn wait(&self, within: Duration) {
        let Ok(Ok(mut ready)) = tokio::time::timeout(within, self.fd.readable()).await else {
            return;
        };
        // The events only say "written": the follower reads the file
        // itself, so they are drained and dropped.
        loop {
            match ready.get_inner().0.read_events() {
                Ok(_) => continue,
                Err(Errno::EAGAIN) => {
                    ready.clear_ready();
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read inotify events");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Instant;

    #[tokio::test]
    async fn a_write_wakes_the_waiter_and_silence_lets_it_time_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut file = std::fs::File::create(&path).unwrap();
        let writes = FileWrites::watch(&path).unwrap();

        // Nothing written: the wait runs its course.
        let quiet = Instant::now();
        writes.wait(Duration::from_millis(100)).await;
        assert!(quiet.elapsed() >= Duration::from_millis(100));

        // Written before the wait: it returns at once, far inside its while.
        file.write_all(b"line\n").unwrap();
        let woken = Instant::now();
        writes.wait(Duration::from_secs(60)).await;
        assert!(woken.elapsed() < Duration::from_secs(30));

        // The events were drained: the next wait is quiet again.
        let again = Instant::now();
        writes.wait(Duration::from_millis(100)).await;
        assert!(again.elapsed() >= Duration::from_millis(100));

        // Written while it waits.
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            file.write_all(b"more\n").unwrap();
        });
        let during = Instant::now();
        writes.wait(Duration::from_secs(60)).await;
        assert!(during.elapsed() < Duration::from_secs(30));
        writer.await.unwrap();
    }

    #[test]
    fn a_missing_file_cannot_be_watched() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _in_runtime = rt.enter();
        assert!(FileWrites::watch(&dir.path().join("absent")).is_err());
    }
}
