//! `hangar login` without a password: the login happens in the browser
//! (a local user's form, or the OIDC provider), and web hands the CLI a
//! one-time code on a loopback port the CLI listens on; the CLI trades
//! it, with a secret only it holds, for a session (web's
//! `cli_login.rs` tells the whole exchange).

use std::time::Duration;

use anyhow::Context;
use hangar_api::teams::Session;
use hangar_client::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long the CLI waits for the browser.
const WAIT: Duration = Duration::from_secs(10 * 60);
/// How long one connection to the listener may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The most of a request the listener reads.
const MAX_REQUEST: usize = 8 * 1024;

pub(crate) async fn log_in(client: &Client, url: &str, open: bool) -> anyhow::Result<Session> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("listen on a loopback port for the browser's login")?;
    let port = listener.local_addr()?.port();
    let verifier = hangar_api::credentials::new_secret()?;
    let challenge = hangar_api::credentials::pkce_challenge(&verifier);
    let page = format!(
        "{}/login?cli_port={port}&cli_challenge={challenge}",
        url.trim_end_matches('/')
    );
    eprintln!("navigate to the following URL in your browser:\n\n  {page}\n");
    if open {
        open_browser(&page);
    }
    let code = tokio::time::timeout(WAIT, wait_for_code(&listener))
        .await
        .map_err(|_| anyhow::anyhow!("no login came back from the browser within 10 minutes"))??;
    Ok(client.login_with_code(&code, &verifier).await?)
}

/// Hands `url` to the desktop's browser; a failure only says so (the URL
/// is printed).
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    if let Err(e) = std::process::Command::new(opener)
        .arg(url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        eprintln!("cannot open a browser ({opener}: {e}): open the URL above yourself");
    }
}

/// Answers connections until one is the browser coming back with a code.
async fn wait_for_code(listener: &TcpListener) -> anyhow::Result<String> {
    loop {
        let (socket, _) = listener.accept().await?;
        match tokio::time::timeout(REQUEST_TIMEOUT, answer(socket)).await {
            Ok(Ok(Some(code))) => return Ok(code),
            Ok(Ok(None)) | Err(_) => {}
            Ok(Err(e)) => eprintln!("a connection to the login listener failed: {e}"),
        }
    }
}

/// Reads one request: the code, if it is `GET /auth/callback?code=…`.
async fn answer(mut socket: TcpStream) -> std::io::Result<Option<String>> {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < MAX_REQUEST {
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let code = code_of(&String::from_utf8_lossy(&request));
    let (status, body) = match &code {
        Some(_) => (
            "200 OK",
            "<!DOCTYPE html><title>hangar</title><p>logged in: the hangar CLI carries on; you may close this page.</p>",
        ),
        None => ("404 Not Found", "not found"),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(response.as_bytes()).await?;
    socket.shutdown().await.ok();
    Ok(code)
}

/// The code of a request whose first line is
/// `GET /auth/callback?code=CODE HTTP/1.1`; web's codes are hex.
fn code_of(request: &str) -> Option<String> {
    let line = request.lines().next()?;
    let mut parts = line.split(' ');
    let (method, target) = (parts.next()?, parts.next()?);
    let query = target.strip_prefix("/auth/callback?")?;
    if method != "GET" {
        return None;
    }
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("code="))
        .filter(|c| !c.is_empty() && c.len() <= 128 && c.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::code_of;

    #[test]
    fn only_the_callback_with_a_code_is_read() {
        let code = "a".repeat(64);
        let cases = [
            (
                format!("GET /auth/callback?code={code} HTTP/1.1\r\n"),
                Some(code.as_str()),
            ),
            (
                format!("GET /auth/callback?x=1&code={code} HTTP/1.1\r\n"),
                Some(code.as_str()),
            ),
            (
                format!("POST /auth/callback?code={code} HTTP/1.1\r\n"),
                None,
            ),
            (format!("GET /other?code={code} HTTP/1.1\r\n"), None),
            ("GET /auth/callback?code= HTTP/1.1\r\n".into(), None),
            ("GET /auth/callback?code=<script> HTTP/1.1\r\n".into(), None),
            (
                format!("GET /auth/callback?code={} HTTP/1.1\r\n", "a".repeat(129)),
                None,
            ),
            (String::new(), None),
        ];
        for (request, want) in cases {
            assert_eq!(code_of(&request).as_deref(), want, "{request:?}");
        }
    }
}
