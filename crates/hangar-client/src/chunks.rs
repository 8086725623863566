//! A blocking writer whose bytes become an HTTP body (a worker's stream-out
//! response, the CLI's upload request): gathered into chunks of [`CHUNK`]
//! and handed to the body's stream through a bounded channel. A pipe
//! between the two (a duplex and a reader of it) copied every byte twice
//! more and woke the runtime for each write.

use std::io::{self, Write};

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use tokio::sync::mpsc;

/// The size of a chunk of the body.
pub const CHUNK: usize = 256 * 1024;
/// Chunks written and not yet sent: the writer waits past this many.
const IN_FLIGHT: usize = 4;

pub struct ChunkWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: BytesMut,
}

/// A writer for the blocking pool and the stream of the body it feeds.
/// The stream ends when the writer is dropped; when the stream is dropped
/// (the peer went away), the writer's next chunk fails with `BrokenPipe`.
pub fn chunked() -> (
    ChunkWriter,
    impl Stream<Item = io::Result<Bytes>> + Send + 'static,
) {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(IN_FLIGHT);
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
    let writer = ChunkWriter {
        tx,
        buf: BytesMut::with_capacity(CHUNK),
    };
    (writer, stream)
}

impl ChunkWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, BytesMut::with_capacity(CHUNK)).freeze();
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the peer went away"))
    }
}

impl ChunkWriter {
    /// Ends the body as broken rather than complete: the client sees its
    /// stream fail, not a shorter archive that ends as if whole.
    pub fn abort(mut self, why: String) {
        self.buf.clear();
        let _ = self.tx.blocking_send(Err(io::Error::other(why)));
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

impl Drop for ChunkWriter {
    fn drop(&mut self) {
        // What a writer that ended without a flush wrote still goes out;
        // one whose client is gone has nobody to send it to.
        let _ = self.send();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_is_written_arrives_in_order_in_chunks_of_at_most_chunk() {
        let (mut w, body) = chunked();
        let data: Vec<u8> = (0..CHUNK * 3 + 1000).map(|i| (i % 253) as u8).collect();
        let sent = data.clone();
        let writer = tokio::task::spawn_blocking(move || {
            for piece in sent.chunks(1000) {
                w.write_all(piece).unwrap();
            }
            w.flush().unwrap();
        });
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        let mut body = Box::pin(body);
        while let Some(chunk) = futures_util::StreamExt::next(&mut body).await {
            let chunk = chunk.unwrap();
            sizes.push(chunk.len());
            got.extend_from_slice(&chunk);
        }
        writer.await.unwrap();
        assert_eq!(got, data);
        assert_eq!(sizes, [CHUNK, CHUNK, CHUNK, 1000]);
    }

    #[tokio::test]
    async fn an_aborted_writer_breaks_the_body_rather_than_end_it() {
        let (mut w, body) = chunked();
        tokio::task::spawn_blocking(move || {
            w.write_all(b"part of an archive").unwrap();
            w.abort("the disk failed".into());
        })
        .await
        .unwrap();
        let mut body = Box::pin(body);
        let mut results = Vec::new();
        while let Some(chunk) = futures_util::StreamExt::next(&mut body).await {
            results.push(chunk.map(|b| b.len()).map_err(|e| e.to_string()));
        }
        assert_eq!(results.len(), 1, "{results:?}");
        assert!(results[0].as_ref().unwrap_err().contains("the disk failed"));
    }

    #[tokio::test]
    async fn a_writer_whose_body_is_gone_fails_with_a_broken_pipe() {
        let (mut w, body) = chunked();
        drop(body);
        let err =
            tokio::task::spawn_blocking(move || w.write_all(&vec![0u8; CHUNK * 2]).unwrap_err())
                .await
                .unwrap();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }
}
