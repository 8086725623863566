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
.graph-scroll{overflow:auto;max-width:100%;border:1px solid #333;background:#15181b}
.node text{font:12px ui-monospace,DejaVu Sans Mono,monospace}.node .state{font-size:11px}
.node rect{stroke:#111;stroke-width:1}.node:hover rect,.node:focus rect{stroke:#fff;stroke-width:2}
.node.running rect{stroke:#fff;stroke-width:3;animation:pulse 1.2s ease-in-out infinite}
@keyframes pulse{50%{stroke-opacity:.15}}@media (prefers-reduced-motion:reduce){.node.running rect{animation:none}}
.node.pinned rect{stroke:#c792ea;stroke-width:3}.node.checks-off rect{stroke-dasharray:5 3;stroke:#9b9b9b;stroke-width:2}
.node.check-failed rect{stroke:#ff5c47;stroke-width:3}
.edge{fill:none;stroke:#8a96a3;stroke-width:1.5}.edge.untriggered{stroke-dasharray:5 4}#arrow path{fill:#8a96a3}
nav.tabs{display:flex;gap:.3em;margin:.5em 0}nav.tabs a{padding:.3em .8em;border:1px solid #333;text-decoration:none}
nav.tabs a[aria-current]{background:#e6e6e6;color:#111;font-weight:600}
pre.check-error{white-space:pre-wrap;overflow-wrap:anywhere;max-width:100%;color:#ff8a7a}
pre.check-output{white-space:pre-wrap;overflow-wrap:anywhere;max-width:100%;background:#000;padding:.4em}
.pinned-badge{background:#c792ea;color:#000}tr.pinned td{background:#2a2335}
pre.log{background:#000;padding:.6em;white-space:pre-wrap;max-height:70vh;overflow:auto}
.infra{color:#f5a623}.error{color:#ed4b35}.notice{color:#9b9b9b}
form.inline{display:inline}
";

/// Each status's fill and the text written on it, for badges and graph
/// nodes alike; every pair is WCAG AA (4.5:1) readable (see the test).
/// `paused` comes last: a paused job is drawn paused whatever its builds.
const PALETTE: &[(&str, &str, &str)] = &[
    ("succeeded", "#11c560", "#000"),
    ("failed", "#ed4b35", "#000"),
    ("errored", "#f5a623", "#000"),
    ("aborted", "#8b572a", "#fff"),
    ("started", "#fbdb00", "#000"),
    ("running", "#fbdb00", "#000"),
    ("pending", "#9b9b9b", "#000"),
    ("none", "#3a3f45", "#e6e6e6"),
    ("resource", "#2b3036", "#e6e6e6"),
    ("paused", "#3d7bd9", "#000"),
];

/// The palette as CSS: a badge's background and text, a node's fill and
/// its text's (SVG text takes `fill`, not a link's `color`).
fn palette_css() -> String {
    PALETTE
        .iter()
        .map(|(class, fill, text)| {
            format!(
                ".{class}{{background:{fill};color:{text}}}\
                 .node.{class} rect{{fill:{fill}}}.node.{class} text{{fill:{text}}}\n"
            )
        })
        .collect()
}

/// A whole page: `title` in the tab, `body` under the navigation.
pub(crate) fn page(title: &str, viewer: &Viewer, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · hangar" }
                style { (PreEscaped(STYLE)) (PreEscaped(palette_css())) }
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

/// A job's page, `/teams/T/pipelines/P/jobs/J`, each name one segment;
/// its actions and its builds' pages are below it.
pub(crate) fn job_path(team: &str, pipeline: &str, job: &str) -> String {
    format!(
        "/teams/{}/pipelines/{}/jobs/{}",
        seg(team),
        seg(pipeline),
        seg(job)
    )
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

    /// WCAG 2's relative luminance of `#rgb` or `#rrggbb`.
    fn luminance(hex: &str) -> f64 {
        let hex = hex.trim_start_matches('#');
        let hex: String = if hex.len() == 3 {
            hex.chars().flat_map(|c| [c, c]).collect()
        } else {
            hex.to_string()
        };
        let channel = |i: usize| {
            let c = f64::from(u8::from_str_radix(&hex[i..i + 2], 16).unwrap()) / 255.0;
            if c <= 0.03928 {
                c / 12.92
            } else {
                ((c + 0.055) / 1.055).powf(2.4)
            }
        };
        0.2126 * channel(0) + 0.7152 * channel(2) + 0.0722 * channel(4)
    }

    fn contrast(a: &str, b: &str) -> f64 {
        let (la, lb) = (luminance(a), luminance(b));
        (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
    }

    #[test]
    fn the_contrast_formula_is_wcag_s() {
        assert!((contrast("#000", "#fff") - 21.0).abs() < 1e-9);
        assert!((contrast("#777", "#777") - 1.0).abs() < 1e-9);
        // WebAIM's checker: #767676 on white is 4.54:1.
        assert!((contrast("#767676", "#ffffff") - 4.54).abs() < 0.01);
    }

    /// Text on every status fill, and the page's own text and links on
    /// its background, meet WCAG AA for normal text.
    #[test]
    fn every_fill_and_its_text_meet_wcag_aa() {
        let others = [
            ("#1b1f23", "#e6e6e6"), // the page's text
            ("#1b1f23", "#7cc4ff"), // its links
            ("#15181b", "#7cc4ff"), // links around the graph
            ("#1b1f23", "#ff8a7a"), // a check's error
            ("#2a2335", "#e6e6e6"), // the pinned version's row
            ("#2a2335", "#7cc4ff"),
            ("#c792ea", "#000"), // the pinned badge
            ("#e6e6e6", "#111"), // the group tab shown
        ];
        for (fill, text) in PALETTE.iter().map(|(_, f, t)| (*f, *t)).chain(others) {
            let ratio = contrast(fill, text);
            assert!(ratio >= 4.5, "{text} on {fill}: {ratio:.2}:1");
        }
        let css = palette_css();
        for (class, fill, text) in PALETTE {
            assert!(
                css.contains(&format!(
                    ".node.{class} rect{{fill:{fill}}}.node.{class} text{{fill:{text}}}"
                )),
                "{css}"
            );
        }
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
