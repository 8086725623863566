//! The shell every page shares: head, style, navigation, and the small
//! pieces (status badges, times) pages repeat. maud escapes every value
//! it interpolates, so a `<script>` in a job name or log line is text.

use crate::ApiError;
use hangar_core::build_log::ago_words;
use hangar_core::dashboard::{duration_words, utc_words};
use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::auth::Viewer;

const STYLE: &str = "
body{font-family:system-ui,sans-serif;margin:0;background:#1b1f23;color:#e6e6e6}
header{display:flex;gap:1.5em;align-items:center;padding:.6em 1em;background:#111}
header a{color:#e6e6e6;text-decoration:none;font-weight:600}
header form{margin-left:auto}
main{padding:1em}
a{color:#7cc4ff}
table{border-collapse:collapse}td,th{padding:.25em .6em;border-bottom:1px solid #333;text-align:left;vertical-align:top}
.status{padding:.1em .5em;border-radius:3px;font-size:.9em}
.succeeded{background:#11c560;color:#000}.failed{background:#ed4b35}.errored{background:#f5a623;color:#000}
.aborted{background:#8b572a}.started,.running{background:#fbdb00;color:#000}.pending{background:#9b9b9b;color:#000}
.paused{background:#3d7bd9}.none{background:#444}
.graph{display:flex;gap:2em;align-items:flex-start}.column{display:flex;flex-direction:column;gap:.8em}
.job{border:1px solid #555;padding:.4em .6em;min-width:10em}.job ul{margin:.2em 0;padding-left:1.2em;font-size:.85em}
pre.log{background:#000;padding:.6em;white-space:pre-wrap;max-height:70vh;overflow:auto}
.infra{color:#f5a623}.error{color:#ed4b35}.notice{color:#9b9b9b}
form.inline{display:inline}
";

/// A whole page: `title` in the tab, `body` under the navigation.
pub(crate) fn page(title: &str, viewer: &Viewer, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · hangar" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    a href="/" { "pipelines" }
                    @if viewer.logged_in {
                        a href="/builds" { "builds" }
                        a href="/workers" { "workers" }
                        span #user { (viewer.caller.describe()) }
                        form method="post" action="/logout" {
                            (csrf_field(viewer))
                            button type="submit" { "log out" }
                        }
                    } @else if viewer.known {
                        a href="/login" style="margin-left:auto" { "log in" }
                    }
                }
                main { (body) }
                script { (PreEscaped(super::live::SCRIPT)) }
            }
        }
    }
}

/// The page for an error, with a way on.
pub(crate) fn error_page(error: &ApiError) -> Markup {
    let unknown = Viewer::unknown();
    page(
        error.status.as_str(),
        &unknown,
        html! {
            h1 { (error.status) }
            p.error { (error.message) }
            @if error.asks_for_login() { p { a href="/login" { "log in" } } }
            p { a href="/" { "back to the pipelines" } }
        },
    )
}

/// The hidden field every action form carries (see `auth`).
pub(crate) fn csrf_field(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name="csrf" value=(viewer.csrf); }
}

/// A button that POSTs to `action` with the CSRF token.
pub(crate) fn action_button(viewer: &Viewer, action: &str, label: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            (csrf_field(viewer))
            button type="submit" { (label) }
        }
    }
}

pub(crate) fn status(word: &str) -> Markup {
    html! { span class={"status " (word)} { (word) } }
}

/// A moment as words relative to `now` (`5m ago`) and, beside them, as
/// the UTC time an operator lines up with other logs.
pub(crate) fn moment(ms: Option<i64>, now: i64) -> Markup {
    match ms {
        Some(ms) => html! {
            time datetime=(iso(ms)) title={(utc_words(ms)) " UTC"} { (ago_words(ms, now)) }
            " " small.abs { (utc_words(ms)) }
        },
        None => html! { "–" },
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ`, for `<time datetime>`.
fn iso(ms: i64) -> String {
    format!("{}Z", utc_words(ms).replacen(' ', "T", 1))
}

/// How long something ran: to its end, or so far.
pub(crate) fn took(started: Option<i64>, finished: Option<i64>, now: i64) -> String {
    match (started, finished) {
        (Some(s), Some(f)) => duration_words(f - s),
        (Some(s), None) => format!("{} so far", duration_words(now - s)),
        _ => "–".into(),
    }
}

/// A name as one segment of a link's path (`#`, `?`, `/` and spaces in a
/// name would otherwise break or redirect the link).
pub(crate) fn seg(name: impl AsRef<str>) -> String {
    super::auth::segment(name.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page's `<main>`: what a person reads of an error page.
    fn main_of(page: &Markup) -> String {
        let html = page.clone().into_string();
        let start = html.find("<main>").expect("a <main>");
        let end = html.find("</main>").expect("a </main>") + "</main>".len();
        html[start..end].replace("><", ">\n<")
    }

    // The words and the ways on are the page's contract with a person: the
    // fragment is compared whole.
    #[test]
    fn an_error_page_says_the_status_the_cause_and_the_way_on() {
        let login = main_of(&error_page(&ApiError::unauthorized(
            "log in to see this page <script>",
        )));
        expect_test::expect![[r#"
            <main>
            <h1>401 Unauthorized</h1>
            <p class="error">log in to see this page &lt;script&gt;</p>
            <p>
            <a href="/login">log in</a>
            </p>
            <p>
            <a href="/">back to the pipelines</a>
            </p>
            </main>"#]]
        .assert_eq(&login);
        let missing = main_of(&error_page(&ApiError::not_found("pipeline p not found")));
        expect_test::expect![[r#"
            <main>
            <h1>404 Not Found</h1>
            <p class="error">pipeline p not found</p>
            <p>
            <a href="/">back to the pipelines</a>
            </p>
            </main>"#]]
        .assert_eq(&missing);
    }

    /// An error page does not know who is looking: its header neither
    /// offers a logged-in person "log in" nor a stranger "log out".
    #[test]
    fn a_moment_reads_relative_and_absolute() {
        let now = 1_700_000_000_000;
        let html = moment(Some(now - 300_000), now).into_string();
        assert_eq!(
            html,
            "<time datetime=\"2023-11-14T22:08:20Z\" title=\"2023-11-14 22:08:20 UTC\">5m ago</time> \
             <small class=\"abs\">2023-11-14 22:08:20</small>"
        );
        assert_eq!(moment(None, now).into_string(), "–");
    }

    #[test]
    fn an_error_page_s_header_claims_no_session() {
        let html = error_page(&ApiError::not_found("x")).into_string();
        let header = &html[html.find("<header>").unwrap()..html.find("</header>").unwrap()];
        assert!(header.contains("pipelines"), "{header}");
        assert!(
            !header.contains("log in") && !header.contains("log out"),
            "{header}"
        );
    }
}
