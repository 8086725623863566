//! A response or request body read as a blocking `Read` on the blocking
//! pool, for extracting a tar as it arrives.
//!
//! A bridge that turns each read into a wait on the runtime returns at most
//! one network chunk per read (tens of KiB), and hands the thread over to
//! the runtime and back for each: a large file went to disk in writes of
//! that size, with a wake-up per write. Here a task on the runtime forwards
//! the chunks through a bounded queue, and a read takes every chunk that is
//! already there, up to the reader's buffer, waiting only when none is.

use std::collections::VecDeque;
use std::io::{self, Read};

use bytes::{Buf, Bytes};
use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;

/// Chunks received and not yet read: the network waits past this many.
const QUEUED: usize = 16;

pub struct BlockingBodyReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
    /// An error that came after bytes a read already returned.
    pending: VecDeque<io::Error>,
    ended: bool,
}

/// Starts forwarding `stream` on the current runtime; read the result on
/// a blocking thread (never on the runtime). Dropping the reader stops
/// the forwarding and drops the stream.
pub fn blocking_body_reader<S>(stream: S) -> BlockingBodyReader
where
    S: Stream<Item = io::Result<Bytes>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(QUEUED);
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                break;
            }
        }
    });
    BlockingBodyReader {
        rx,
        current: Bytes::new(),
        pending: VecDeque::new(),
        ended: false,
    }
}

impl BlockingBodyReader {
    /// The next chunk: waiting for it only when `wait`; `None` when there
    /// is none now (or the stream ended).
    fn next_chunk(&mut self, wait: bool) -> Option<io::Result<Bytes>> {
        if self.ended {
            return None;
        }
        let next = if wait {
            self.rx.blocking_recv()
        } else {
            match self.rx.try_recv() {
                Ok(item) => Some(item),
                Err(mpsc::error::TryRecvError::Empty) => return None,
                Err(mpsc::error::TryRecvError::Disconnected) => None,
            }
        };
        if next.is_none() {
            self.ended = true;
        }
        next
    }
}

impl Read for BlockingBodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(e) = self.pending.pop_front() {
            return Err(e);
        }
        let mut n = 0;
        while n < buf.len() {
            if self.current.has_remaining() {
                let k = self.current.remaining().min(buf.len() - n);
                self.current.copy_to_slice(&mut buf[n..n + k]);
                n += k;
                continue;
            }
            match self.next_chunk(n == 0) {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) if n == 0 => return Err(e),
                Some(Err(e)) => {
                    self.pending.push_back(e);
                    break;
                }
                None => break,
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(parts: Vec<io::Result<&'static [u8]>>) -> BlockingBodyReader {
        let items: Vec<io::Result<Bytes>> = parts
            .into_iter()
            .map(|p| p.map(Bytes::from_static))
            .collect();
        blocking_body_reader(futures_util::stream::iter(items))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_read_gathers_the_chunks_that_are_there_up_to_its_buffer() {
        let mut r = chunks(vec![Ok(b"abc"), Ok(b"defg"), Ok(b"h")]);
        let got = tokio::task::spawn_blocking(move || {
            // Let the forwarder queue all three.
            while r.rx.len() < 3 {
                std::thread::yield_now();
            }
            let mut buf = [0u8; 6];
            let first = r.read(&mut buf).unwrap();
            let mut rest = Vec::new();
            r.read_to_end(&mut rest).unwrap();
            (buf[..first].to_vec(), rest)
        })
        .await
        .unwrap();
        assert_eq!(got.0, b"abcdef");
        assert_eq!(got.1, b"gh");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_error_after_bytes_comes_on_the_next_read_and_nothing_follows_it() {
        let r = chunks(vec![
            Ok(b"ab"),
            Err(io::Error::other("the stream broke off")),
            Ok(b"never"),
        ]);
        let (bytes, err) = tokio::task::spawn_blocking(move || {
            let mut r = r;
            while r.rx.len() < 2 {
                std::thread::yield_now();
            }
            let mut buf = [0u8; 16];
            let n = r.read(&mut buf).unwrap();
            let err = r.read(&mut buf).unwrap_err();
            (buf[..n].to_vec(), err)
        })
        .await
        .unwrap();
        assert_eq!(bytes, b"ab");
        assert_eq!(err.to_string(), "the stream broke off");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_empty_stream_reads_as_its_end() {
        let mut r = chunks(vec![]);
        let n = tokio::task::spawn_blocking(move || r.read(&mut [0u8; 8]).unwrap())
            .await
            .unwrap();
        assert_eq!(n, 0);
    }
}
