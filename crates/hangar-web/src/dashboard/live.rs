//! Live pages: `GET /live` is a server-sent-event stream that says
//! `change` whenever something a page shows may have changed; the page's
//! script then fetches the page again and puts its new `<main>` in place.
//! A page is whole and readable without the script; the stream is the
//! enhancement.
//!
//! One watcher per web node reads the store's fingerprint
//! (`Store::dashboard_fingerprint`, one cheap query) every second while at
//! least one page is open, and counts up a generation when it changes: it
//! sees what every web node did, and its cost does not grow with the pages
//! open. Each stream sends at most one `change` per [`MIN_GAP`], so a busy
//! fleet costs an open page one fetch every few seconds, not one per
//! change.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use tokio::sync::watch;

use crate::Web;

/// How often the watcher reads the fingerprint while pages are open.
const EVERY: Duration = Duration::from_secs(1);
/// The least time between two `change` events of one stream.
const MIN_GAP: Duration = Duration::from_secs(2);

/// The node's watcher: its generation, and whether it runs.
pub(crate) struct Live {
    generation: watch::Sender<u64>,
    started: AtomicBool,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            generation: watch::Sender::new(0),
            started: AtomicBool::new(false),
        }
    }
}

impl Live {
    /// A receiver of the generation; the first one starts the watcher.
    fn subscribe(&self, web: &Web) -> watch::Receiver<u64> {
        if !self.started.swap(true, Ordering::SeqCst) {
            tokio::spawn(watch_store(web.clone()));
        }
        self.generation.subscribe()
    }
}

/// Reads the fingerprint every [`EVERY`] while anyone listens, until web
/// stops.
async fn watch_store(web: Web) {
    let mut last: Option<String> = None;
    loop {
        tokio::select! {
            _ = web.stopping().cancelled() => return,
            _ = tokio::time::sleep(EVERY) => {}
        }
        let live = web.live();
        if live.generation.receiver_count() == 0 {
            // Nobody is looking: no reads. The next look starts afresh.
            last = None;
            continue;
        }
        match web.store().dashboard_fingerprint().await {
            Ok(now) => {
                if last.as_ref().is_some_and(|l| *l != now) {
                    live.generation.send_modify(|g| *g += 1);
                }
                last = Some(now);
            }
            Err(e) => tracing::debug!(error = %e, "cannot read the dashboard's fingerprint"),
        }
    }
}

pub(crate) async fn stream(State(web): State<Web>) -> Response {
    let rx = web.live().subscribe(&web);
    Sse::new(changes(web, rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn changes(web: Web, rx: watch::Receiver<u64>) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::unfold((web, rx, None), |(web, mut rx, sent)| async move {
        // Spaced out: what changed meanwhile is in the next fetch anyway.
        if let Some(at) = sent {
            let wait = MIN_GAP.saturating_sub(tokio::time::Instant::elapsed(&at));
            tokio::select! {
                _ = web.stopping().cancelled() => return None,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        tokio::select! {
            // A node that stops ends its streams (the page reconnects to
            // another node) rather than hold the shutdown's drain.
            _ = web.stopping().cancelled() => None,
            changed = rx.changed() => {
                changed.ok()?;
                let generation = *rx.borrow_and_update();
                let event = Event::default()
                    .event("change")
                    .data(generation.to_string());
                Some((Ok(event), (web, rx, Some(tokio::time::Instant::now()))))
            }
        }
    })
}

/// The script every page but the live build page and the forms carries:
/// on `change`, fetch the page again and put its `<main>` in place,
/// keeping which sections were open.
pub(crate) const SCRIPT: &str = r#"
(function () {
  if (!window.EventSource || !window.fetch) return;
  var main = document.querySelector("main");
  if (!main || main.querySelector("[data-live=off]")) return;
  var source = new EventSource("/live");
  var busy = false;
  source.addEventListener("change", function () {
    if (busy) return;
    busy = true;
    fetch(location.href, {credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        busy = false;
        if (!text) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
        if (!fresh || fresh.innerHTML === main.innerHTML) return;
        var open = {};
        main.querySelectorAll("details[id]").forEach(function (d) { open[d.id] = d.open; });
        main.innerHTML = fresh.innerHTML;
        main.querySelectorAll("details[id]").forEach(function (d) {
          if (d.id in open) d.open = open[d.id];
        });
        main.dataset.generation = (+(main.dataset.generation || 0) + 1);
      })
      .catch(function () { busy = false; });
  });
})();
"#;
