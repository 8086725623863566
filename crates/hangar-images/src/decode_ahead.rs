//! Layers decompressed ahead of their turn, in parallel with the applying.
//!
//! Layers must be *applied* in order (a layer's whiteouts act on the layers
//! below it), but nothing orders their *decompression*. Inflating is about
//! half the cost of applying a gzip layer, so while layer `i` is unpacked
//! into files, [`DECODERS_AT_ONCE`] threads decompress the layers from `i`
//! on, each into a queue of chunks, taking layers in the manifest's order.
//!
//! Decoded bytes waiting in the queues are bounded by one
//! [`MemoryBudget`]: a reserve only the layer being applied (the *head*)
//! may use, and a shared pool for every layer. Layers ahead can fill the
//! pool but never the reserve, so the head's decoder always has room once
//! the applier reads: it cannot starve behind layers that wait for it.
//!
//! Decoders only read (each layer's file, as [`crate::pull`] writes it);
//! only the applier writes the root filesystem, so none of the fetch's
//! guarantees moves here. A decoder stops when its input ends or fails,
//! when its layer's reader is dropped (the applier stopped early, at the
//! tar stream's end or at a refused entry), or when the [`Decoding`] handle
//! is dropped (the fetch ended, whichever way).

use std::collections::VecDeque;
use std::io::{self, Read};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::layer::{ApplyError, Compression};

/// Decoder threads: one for the layer being applied and one ahead keeps
/// both cores of a small worker busy next to the applier and downloads.
pub(crate) const DECODERS_AT_ONCE: usize = 2;

/// Bytes per chunk handed over.
const CHUNK: usize = 256 * 1024;

/// What only the layer being applied may hold: 8 chunks, enough for its
/// decoder to stay ahead of its applier.
const HEAD_RESERVE: usize = 8 * CHUNK;

/// What the layers together may hold on top of that. Decoding more than a
/// layer or two ahead gains nothing once the downloads are done, and this
/// bounds a fetch's memory whatever the image's size.
const SHARED_POOL: usize = 48 * 1024 * 1024;

/// Which part of the budget a queued chunk counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Charge {
    Reserve,
    Shared,
}

/// The decoded bytes that may wait in the queues, and who may add them.
/// Pure accounting, no locking: [`Pipeline`] holds it under its lock.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    reserve: usize,
    shared: usize,
    reserve_used: usize,
    shared_used: usize,
    /// The layer being applied.
    head: usize,
}

impl MemoryBudget {
    pub(crate) fn new(reserve: usize, shared: usize) -> Self {
        MemoryBudget {
            reserve,
            shared,
            reserve_used: 0,
            shared_used: 0,
            head: 0,
        }
    }

    /// Charges `bytes` of `layer`, or `None` when it has to wait. The head
    /// uses its reserve first, so the pool stays for the layers ahead.
    pub(crate) fn take(&mut self, layer: usize, bytes: usize) -> Option<Charge> {
        if layer == self.head && self.reserve_used + bytes <= self.reserve {
            self.reserve_used += bytes;
            Some(Charge::Reserve)
        } else if layer >= self.head && self.shared_used + bytes <= self.shared {
            self.shared_used += bytes;
            Some(Charge::Shared)
        } else {
            None
        }
    }

    pub(crate) fn give_back(&mut self, charge: Charge, bytes: usize) {
        let used = match charge {
            Charge::Reserve => &mut self.reserve_used,
            Charge::Shared => &mut self.shared_used,
        };
        *used = used
            .checked_sub(bytes)
            .expect("gives back only what was taken");
    }

    /// The applier moved on to `layer`. The old head gave back what it
    /// held when its reader was dropped, so the reserve is whole again.
    pub(crate) fn advance(&mut self, layer: usize) {
        self.head = self.head.max(layer);
    }
}

/// How one layer's decompressed stream is made: open its blob, sniff its
/// compression. Runs on a decoder thread; its error is the layer's.
pub(crate) type Source =
    Box<dyn FnOnce() -> Result<(Compression, Box<dyn Read + Send>), ApplyError> + Send>;

/// One layer's decoded bytes on their way to the applier.
#[derive(Default)]
struct Queue {
    source: Option<Source>,
    chunks: VecDeque<(Vec<u8>, Charge)>,
    /// Known once the decoder opened the layer; or why it could not.
    ready: Option<Result<Compression, ApplyError>>,
    /// The decoder is done: at the input's end, or with its failure.
    end: Option<io::Result<()>>,
    /// Its reader is gone: nothing more is wanted.
    dropped: bool,
}

struct State {
    budget: MemoryBudget,
    layers: Vec<Queue>,
    /// The next layer a free decoder takes.
    next: usize,
    /// The fetch ended: every decoder stops.
    cancelled: bool,
}

struct Pipeline {
    state: Mutex<State>,
    changed: Condvar,
}

impl Pipeline {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(guard).unwrap_or_else(|p| p.into_inner())
    }

    /// A decoder thread: takes the next layer until none is left.
    fn decoder(&self) {
        loop {
            let (index, source) = {
                let mut st = self.lock();
                if st.cancelled || st.next == st.layers.len() {
                    return;
                }
                let index = st.next;
                st.next += 1;
                let source = st.layers[index].source.take().expect("taken once");
                (index, source)
            };
            let mut ending = Ending {
                pipeline: self,
                index,
                end: None,
            };
            ending.end = Some(self.decode(index, source));
        }
    }

    fn decode(&self, index: usize, source: Source) -> io::Result<()> {
        let opened = source();
        let mut input = {
            let mut st = self.lock();
            self.changed.notify_all();
            match opened {
                Ok((compression, input)) => {
                    st.layers[index].ready = Some(Ok(compression));
                    input
                }
                Err(e) => {
                    st.layers[index].ready = Some(Err(e));
                    return Ok(());
                }
            }
        };
        loop {
            let mut chunk = vec![0; CHUNK];
            let (n, failed) = fill(&mut input, &mut chunk);
            if n > 0 {
                chunk.truncate(n);
                if !self.push(index, chunk) {
                    // Its reader is gone (then nobody reads this) or the
                    // fetch ended.
                    return Err(io::Error::other("the fetch was cancelled"));
                }
            }
            match failed {
                Some(e) => return Err(e),
                None if n < CHUNK => return Ok(()),
                None => {}
            }
        }
    }

    /// Queues a chunk once the budget has room; `false` when it is no
    /// longer wanted.
    fn push(&self, index: usize, chunk: Vec<u8>) -> bool {
        let mut st = self.lock();
        loop {
            if st.cancelled || st.layers[index].dropped {
                return false;
            }
            if let Some(charge) = st.budget.take(index, chunk.len()) {
                st.layers[index].chunks.push_back((chunk, charge));
                self.changed.notify_all();
                return true;
            }
            st = self.wait(st);
        }
    }
}

/// Hands a layer's end to its reader however its decoding ends. A decoder
/// that panicked ends the fetch: its layer can never be complete, and the
/// layers after it would wait for a decoder that is gone.
struct Ending<'a> {
    pipeline: &'a Pipeline,
    index: usize,
    end: Option<io::Result<()>>,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        let mut st = self.pipeline.lock();
        let queue = &mut st.layers[self.index];
        match self.end.take() {
            Some(end) => queue.end = Some(end),
            None => {
                let why = "the layer's decoder failed";
                queue.end = Some(Err(io::Error::other(why)));
                queue.ready.get_or_insert(Err(ApplyError::Io {
                    context: "decode a layer".into(),
                    source: io::Error::other(why),
                }));
                st.cancelled = true;
            }
        }
        self.pipeline.changed.notify_all();
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

/// Stops every decoder when dropped: hold it as long as the fetch runs.
pub(crate) struct Decoding(Arc<Pipeline>);

impl Drop for Decoding {
    fn drop(&mut self) {
        let untaken: Vec<Source> = {
            let mut st = self.0.lock();
            st.cancelled = true;
            st.layers
                .iter_mut()
                .filter_map(|q| q.source.take())
                .collect()
        };
        self.0.changed.notify_all();
        // Layers no decoder took are let go now, not with the last reader.
        drop(untaken);
    }
}

/// Starts decoding `sources`, in their order, and returns a reader for
/// each. The readers are to be read in order: dropping one hands the
/// reserve to the next.
pub(crate) fn start(sources: Vec<Source>) -> io::Result<(Vec<LayerStream>, Decoding)> {
    start_with(sources, MemoryBudget::new(HEAD_RESERVE, SHARED_POOL))
}

fn start_with(
    sources: Vec<Source>,
    budget: MemoryBudget,
) -> io::Result<(Vec<LayerStream>, Decoding)> {
    let count = sources.len();
    let pipeline = Arc::new(Pipeline {
        state: Mutex::new(State {
            budget,
            layers: sources
                .into_iter()
                .map(|source| Queue {
                    source: Some(source),
                    ..Queue::default()
                })
                .collect(),
            next: 0,
            cancelled: false,
        }),
        changed: Condvar::new(),
    });
    let decoding = Decoding(Arc::clone(&pipeline));
    let mut started = 0;
    let mut failure = None;
    for _ in 0..DECODERS_AT_ONCE.min(count) {
        let p = Arc::clone(&pipeline);
        match std::thread::Builder::new()
            .name("layer-decode".into())
            .spawn(move || p.decoder())
        {
            Ok(_) => started += 1,
            Err(e) => failure = Some(e),
        }
    }
    // One decoder decodes every layer, only slower; none would hang.
    if let (0, Some(e)) = (started, failure) {
        return Err(e);
    }
    let streams = (0..count)
        .map(|index| LayerStream {
            pipeline: Arc::clone(&pipeline),
            index,
            current: Vec::new(),
            at: 0,
            done: false,
        })
        .collect();
    Ok((streams, decoding))
}

/// One layer's decompressed tar stream.
pub(crate) struct LayerStream {
    pipeline: Arc<Pipeline>,
    index: usize,
    current: Vec<u8>,
    at: usize,
    done: bool,
}

impl LayerStream {
    /// Waits until the layer is opened: its compression, or why it could
    /// not be read (then the stream has no bytes). Asked once.
    pub(crate) fn ready(&self) -> Result<Compression, ApplyError> {
        let p = &self.pipeline;
        let mut st = p.lock();
        loop {
            match st.layers[self.index].ready.take() {
                Some(Ok(compression)) => {
                    st.layers[self.index].ready = Some(Ok(compression));
                    return Ok(compression);
                }
                Some(Err(e)) => return Err(e),
                None if st.cancelled => return Err(cancelled_error()),
                None => st = p.wait(st),
            }
        }
    }
}

fn cancelled_error() -> ApplyError {
    ApplyError::Io {
        context: "decode a layer".into(),
        source: io::Error::other("the fetch was cancelled"),
    }
}

impl Read for LayerStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at == self.current.len() {
            if self.done {
                return Ok(0);
            }
            let p = Arc::clone(&self.pipeline);
            let mut st = p.lock();
            loop {
                let st_ref = &mut *st;
                let queue = &mut st_ref.layers[self.index];
                if let Some((chunk, charge)) = queue.chunks.pop_front() {
                    st_ref.budget.give_back(charge, chunk.len());
                    p.changed.notify_all();
                    self.current = chunk;
                    self.at = 0;
                    break;
                }
                // The end is set after the last chunk is queued.
                if let Some(end) = queue.end.take() {
                    self.done = true;
                    return end.map(|()| 0);
                }
                if st_ref.cancelled {
                    self.done = true;
                    return Err(io::Error::other("the fetch was cancelled"));
                }
                st = p.wait(st);
            }
        }
        let n = buf.len().min(self.current.len() - self.at);
        buf[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Drop for LayerStream {
    fn drop(&mut self) {
        let p = &self.pipeline;
        let mut st = p.lock();
        let st = &mut *st;
        let queue = &mut st.layers[self.index];
        queue.dropped = true;
        for (chunk, charge) in queue.chunks.drain(..) {
            st.budget.give_back(charge, chunk.len());
        }
        // The head is the first layer still read (readers are dropped in
        // order, except when a cancelled fetch drops them all).
        let head = (0..st.layers.len())
            .find(|&i| !st.layers[i].dropped)
            .unwrap_or(st.layers.len());
        st.budget.advance(head);
        p.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn the_budget_charges_the_heads_reserve_first_and_the_pool_to_anyone_ahead() {
        use Charge::{Reserve, Shared};
        // (head, layer, reserve used, pool used, bytes) -> charge
        let cases = [
            (0, 0, 0, 0, 10, Some(Reserve)),
            (0, 0, 90, 0, 10, Some(Reserve)),
            (0, 0, 95, 0, 10, Some(Shared)),
            (0, 0, 100, 200, 10, None),
            (0, 1, 0, 0, 10, Some(Shared)),
            (0, 1, 0, 190, 10, Some(Shared)),
            (0, 1, 0, 195, 10, None),
            // Layers ahead never touch the reserve, however empty.
            (0, 3, 0, 200, 10, None),
            // A layer behind the head has been applied: nothing for it.
            (2, 1, 0, 0, 10, None),
        ];
        for (head, layer, reserve_used, shared_used, bytes, expected) in cases {
            let mut b = MemoryBudget::new(100, 200);
            b.head = head;
            b.reserve_used = reserve_used;
            b.shared_used = shared_used;
            assert_eq!(
                b.take(layer, bytes),
                expected,
                "head {head}, layer {layer}, used {reserve_used}/{shared_used}, {bytes} bytes"
            );
        }
    }

    #[test]
    fn the_budget_gives_back_to_the_part_charged_and_a_new_head_gets_the_reserve() {
        let mut b = MemoryBudget::new(100, 100);
        assert_eq!(b.take(0, 100), Some(Charge::Reserve));
        assert_eq!(b.take(1, 100), Some(Charge::Shared));
        assert_eq!(b.take(1, 1), None);
        b.give_back(Charge::Reserve, 100);
        // The freed reserve is still the head's only.
        assert_eq!(b.take(1, 1), None);
        b.advance(1);
        assert_eq!(b.take(1, 100), Some(Charge::Reserve));
        b.give_back(Charge::Shared, 100);
        assert_eq!(b.take(2, 100), Some(Charge::Shared));
        // Advancing never goes back.
        b.give_back(Charge::Reserve, 100);
        b.advance(0);
        assert_eq!(b.head, 1);
    }

    /// A fixed pattern in odd-sized pieces, then optionally a failure.
    struct Pieces {
        left: usize,
        fail_at_end: bool,
        next: u8,
        ended: Option<Arc<AtomicBool>>,
    }

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.left == 0 {
                if let Some(ended) = &self.ended {
                    ended.store(true, Ordering::SeqCst);
                }
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

    fn pieces(len: usize, seed: u8) -> Pieces {
        Pieces {
            left: len,
            fail_at_end: false,
            next: seed,
            ended: None,
        }
    }

    fn source(input: impl Read + Send + 'static) -> Source {
        Box::new(move || Ok((Compression::None, Box::new(input) as Box<dyn Read + Send>)))
    }

    fn expected(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_add(seed)).collect()
    }

    fn read_all(mut s: LayerStream) -> io::Result<Vec<u8>> {
        assert_eq!(s.ready().unwrap(), Compression::None);
        let mut out = Vec::new();
        s.read_to_end(&mut out).map(|_| out)
    }

    fn wait_for(what: &str, flag: &AtomicBool) {
        let started = Instant::now();
        while !flag.load(Ordering::SeqCst) {
            assert!(started.elapsed() < Duration::from_secs(30), "{what}");
            std::thread::yield_now();
        }
    }

    #[test]
    fn every_layer_reads_its_own_bytes_in_order() {
        let lens = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 12345];
        let sources = lens
            .iter()
            .enumerate()
            .map(|(i, &len)| source(pieces(len, i as u8)))
            .collect();
        // A pool smaller than one layer: the layers ahead wait for room.
        let (streams, _decoding) = start_with(sources, MemoryBudget::new(CHUNK, CHUNK)).unwrap();
        for (i, (stream, len)) in streams.into_iter().zip(lens).enumerate() {
            let out = read_all(stream).unwrap();
            assert_eq!(out.len(), len, "layer {i}");
            assert!(out == expected(len, i as u8), "bytes of layer {i} differ");
        }
    }

    #[test]
    fn later_layers_decode_while_the_first_is_not_read_yet() {
        let ended = Arc::new(AtomicBool::new(false));
        let second = Pieces {
            ended: Some(Arc::clone(&ended)),
            ..pieces(3 * CHUNK, 1)
        };
        let (streams, _decoding) = start_with(
            vec![source(pieces(CHUNK, 0)), source(second)],
            MemoryBudget::new(CHUNK, 4 * CHUNK),
        )
        .unwrap();
        // Nobody reads: the second layer is decoded to its end anyway.
        wait_for("the second layer was not decoded ahead", &ended);
        let mut streams = streams.into_iter();
        assert!(read_all(streams.next().unwrap()).unwrap() == expected(CHUNK, 0));
        assert!(read_all(streams.next().unwrap()).unwrap() == expected(3 * CHUNK, 1));
    }

    #[test]
    fn the_head_is_never_starved_by_the_layers_ahead_filling_the_pool() {
        // Layer 1 fills the pool (one chunk) while layer 0 is still being
        // opened; then layer 0's decoder can only use its reserve.
        let go = Arc::new(AtomicBool::new(false));
        let opened = Arc::clone(&go);
        let first: Source = Box::new(move || {
            wait_for("layer 0 was never let open", &opened);
            Ok((
                Compression::None,
                Box::new(pieces(4 * CHUNK, 0)) as Box<dyn Read + Send>,
            ))
        });
        let sources = vec![
            first,
            source(pieces(4 * CHUNK, 1)),
            source(pieces(4 * CHUNK, 2)),
        ];
        let (streams, _decoding) = start_with(sources, MemoryBudget::new(CHUNK, CHUNK)).unwrap();
        let started = Instant::now();
        while streams[1].pipeline.lock().layers[1].chunks.is_empty() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the pool never filled"
            );
            std::thread::yield_now();
        }
        go.store(true, Ordering::SeqCst);
        for (i, stream) in streams.into_iter().enumerate() {
            assert!(read_all(stream).unwrap() == expected(4 * CHUNK, i as u8));
        }
    }

    #[test]
    fn an_error_of_the_input_reaches_the_reader_after_its_bytes() {
        let failing = Pieces {
            fail_at_end: true,
            ..pieces(CHUNK + 10, 0)
        };
        let (mut streams, _decoding) = start(vec![source(failing)]).unwrap();
        let mut s = streams.pop().unwrap();
        let mut out = Vec::new();
        let err = s.read_to_end(&mut out).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(
            out == expected(CHUNK + 10, 0),
            "{} bytes before the error",
            out.len()
        );
        // Once failed, it stays at its end.
        assert_eq!(s.read(&mut [0; 16]).unwrap(), 0);
    }

    #[test]
    fn a_layer_that_cannot_be_opened_says_why_and_the_next_still_reads() {
        let broken: Source = Box::new(|| Err(ApplyError::Corrupt("zstd: bad frame".into())));
        let (streams, _decoding) = start(vec![broken, source(pieces(10, 0))]).unwrap();
        let mut streams = streams.into_iter();
        let first = streams.next().unwrap();
        match first.ready() {
            Err(ApplyError::Corrupt(m)) => assert_eq!(m, "zstd: bad frame"),
            other => panic!("{:?}", other.map(|_| ())),
        }
        drop(first);
        assert!(read_all(streams.next().unwrap()).unwrap() == expected(10, 0));
    }

    #[test]
    fn a_decoder_that_panics_fails_its_layer_and_ends_the_fetch_instead_of_hanging() {
        let panics: Source = Box::new(|| panic!("a decoder bug"));
        let (streams, _decoding) = start_with(
            vec![source(pieces(10, 0)), panics, source(pieces(10, 2))],
            // No room ahead: the third layer waits for the second's end.
            MemoryBudget::new(CHUNK, 0),
        )
        .unwrap();
        let mut streams = streams.into_iter();
        // The first layer was whole before the panic or is cut by it.
        let mut first = streams.next().unwrap();
        let _ = first.read_to_end(&mut Vec::new());
        drop(first);
        match streams.next().unwrap().ready() {
            Err(ApplyError::Io { source, .. }) => {
                assert_eq!(source.to_string(), "the layer's decoder failed");
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        let mut third = streams.next().unwrap();
        assert!(third.read_to_end(&mut Vec::new()).is_err());
    }

    /// Endless input that records being dropped: only a stopped decoder
    /// drops it.
    struct Endless(Arc<AtomicBool>);
    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            Ok(buf.len())
        }
    }
    impl Drop for Endless {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_dropped_reader_stops_its_decoder() {
        let dropped = Arc::new(AtomicBool::new(false));
        let (mut streams, _decoding) = start(vec![source(Endless(Arc::clone(&dropped)))]).unwrap();
        let mut s = streams.pop().unwrap();
        assert_eq!(s.read(&mut [0; 1024]).unwrap(), 1024);
        drop(s);
        wait_for(
            "the decoder kept running after its reader was dropped",
            &dropped,
        );
    }

    #[test]
    fn a_dropped_pipeline_stops_every_decoder_and_fails_its_readers() {
        let flags: Vec<Arc<AtomicBool>> =
            (0..2).map(|_| Arc::new(AtomicBool::new(false))).collect();
        let sources = flags
            .iter()
            .map(|f| source(Endless(Arc::clone(f))))
            .collect();
        let (streams, decoding) = start(sources).unwrap();
        drop(decoding);
        for f in &flags {
            wait_for("a decoder kept running after the fetch ended", f);
        }
        for mut s in streams {
            let mut out = Vec::new();
            // What was queued may still come; then the cancellation.
            assert_eq!(
                s.read_to_end(&mut out).unwrap_err().to_string(),
                "the fetch was cancelled"
            );
        }
    }
}
