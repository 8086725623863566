//! A layer's decompression on a thread of its own, a bounded distance
//! ahead of the unpacking. Inflating and writing files are each about half
//! of applying a layer; on two cores they overlap instead of taking turns.
//!
//! The thread ends when its input ends or fails, or when the reader is
//! dropped (its next send fails), so an unpacking that stops early (a
//! hostile entry) leaves nothing running once the input is done.

use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver};

/// Bytes per chunk handed over.
const CHUNK: usize = 256 * 1024;
/// Chunks decoded ahead of the reader: at most 2 MiB per layer in memory.
const DEPTH: usize = 8;

pub(crate) struct ReadAhead {
    source: Source,
    current: Vec<u8>,
    at: usize,
}

enum Source {
    Thread(Receiver<io::Result<Vec<u8>>>),
    /// No thread could be started: read in place.
    Inline(Box<dyn Read + Send>),
    Done,
}

impl ReadAhead {
    pub(crate) fn start(inner: Box<dyn Read + Send>) -> ReadAhead {
        let (tx, rx) = sync_channel(DEPTH);
        // The reader is moved into the thread only if it starts, so a
        // failed spawn can still read in place.
        let (hand, taken) = sync_channel::<Box<dyn Read + Send>>(1);
        let spawned = std::thread::Builder::new()
            .name("layer-decode".into())
            .spawn(move || {
                let Ok(mut inner) = taken.recv() else { return };
                loop {
                    let mut chunk = vec![0; CHUNK];
                    let (n, failed) = fill(&mut inner, &mut chunk);
                    if n > 0 {
                        chunk.truncate(n);
                        if tx.send(Ok(chunk)).is_err() {
                            return;
                        }
                    }
                    match failed {
                        Some(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                        None if n == 0 => return,
                        None => {}
                    }
                }
            });
        let source = match spawned {
            Ok(_) => match hand.send(inner) {
                Ok(()) => Source::Thread(rx),
                Err(back) => Source::Inline(back.0),
            },
            Err(_) => Source::Inline(inner),
        };
        ReadAhead {
            source,
            current: Vec::new(),
            at: 0,
        }
    }
}

/// Reads until `buf` is full or the input ends or fails: how much was
/// read, and the failure that stopped it (after those bytes).
fn fill(inner: &mut impl Read, buf: &mut [u8]) -> (usize, Option<io::Error>) {
    let mut n = 0;
    while n < buf.len() {
        match inner.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (n, Some(e)),
        }
    }
    (n, None)
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at == self.current.len() {
            match &mut self.source {
                Source::Inline(inner) => return inner.read(buf),
                Source::Done => return Ok(0),
                Source::Thread(rx) => match rx.recv() {
                    Ok(Ok(chunk)) => {
                        self.current = chunk;
                        self.at = 0;
                    }
                    Ok(Err(e)) => {
                        self.source = Source::Done;
                        return Err(e);
                    }
                    // The thread ended without an error: the input ended.
                    Err(_) => {
                        self.source = Source::Done;
                        return Ok(0);
                    }
                },
            }
        }
        let n = buf.len().min(self.current.len() - self.at);
        buf[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out a fixed pattern in odd-sized pieces, then
    /// optionally fails.
    struct Pieces {
        left: usize,
        fail_at_end: bool,
        next: u8,
    }

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.left == 0 {
                return if self.fail_at_end {
                    Err(io::Error::new(io::ErrorKind::InvalidData, "bad gzip"))
                } else {
                    Ok(0)
                };
            }
            let n = buf.len().min(self.left).min(7919);
            for b in &mut buf[..n] {
                *b = self.next;
                self.next = self.next.wrapping_add(1);
            }
            self.left -= n;
            Ok(n)
        }
    }

    fn expected(len: usize) -> Vec<u8> {
        (0..len).map(|i| i as u8).collect()
    }

    #[test]
    fn hands_over_every_byte_in_order() {
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 12345] {
            let mut r = ReadAhead::start(Box::new(Pieces {
                left: len,
                fail_at_end: false,
                next: 0,
            }));
            let mut out = Vec::new();
            r.read_to_end(&mut out).unwrap();
            assert_eq!(out.len(), len);
            assert!(out == expected(len), "bytes differ for {len}");
        }
    }

    #[test]
    fn an_error_of_the_input_reaches_the_reader_after_its_bytes() {
        let mut r = ReadAhead::start(Box::new(Pieces {
            left: CHUNK + 10,
            fail_at_end: true,
            next: 0,
        }));
        let mut out = Vec::new();
        let err = r.read_to_end(&mut out).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(
            out == expected(CHUNK + 10),
            "{} bytes before the error",
            out.len()
        );
        // Once failed, it stays at its end.
        assert_eq!(r.read(&mut [0; 16]).unwrap(), 0);
    }

    #[test]
    fn a_dropped_reader_ends_the_thread() {
        // An endless input: only the dropped receiver can end the thread.
        struct Endless(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                Ok(buf.len())
            }
        }
        impl Drop for Endless {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut r = ReadAhead::start(Box::new(Endless(dropped.clone())));
        let mut buf = [0; 1024];
        assert_eq!(r.read(&mut buf).unwrap(), 1024);
        drop(r);
        let waited = std::time::Instant::now();
        while !dropped.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(
                waited.elapsed() < std::time::Duration::from_secs(30),
                "the decode thread kept running after its reader was dropped"
            );
            std::thread::yield_now();
        }
    }
}
