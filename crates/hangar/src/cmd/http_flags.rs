//! The limits of web's and the worker's HTTP servers (`hangar_http`), as
//! flags: how long a connection may take to send a request head, and how
//! many connections may be open at once, in all and from one address.

use std::time::Duration;

use hangar_http::Limits;

use crate::duration;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct HttpFlags {
    /// How long a connection may take to send a request's head (the wait
    /// for the next request on a kept-alive connection too) before it is
    /// closed.
    #[arg(long, env = "HANGAR_HTTP_HEADER_TIMEOUT", default_value = "30s", value_parser = duration::parse)]
    pub http_header_timeout: Duration,
    /// Connections open at once, every client together (default: web
    /// 16384, a worker 4096, or half the descriptor limit if lower); past
    /// it a new connection is closed at once.
    #[arg(long, env = "HANGAR_HTTP_MAX_CONNECTIONS")]
    pub http_max_connections: Option<usize>,
    /// Connections open at once from one IP address (default: web 4096,
    /// behind an ingress every user is one address; a worker 1024).
    #[arg(long, env = "HANGAR_HTTP_MAX_CONNECTIONS_PER_CLIENT")]
    pub http_max_connections_per_client: Option<usize>,
}

impl HttpFlags {
    /// `defaults` (web's or a worker's) with what the flags set.
    pub(crate) fn limits(&self, defaults: Limits) -> anyhow::Result<Limits> {
        let limits = Limits {
            header_read_timeout: self.http_header_timeout,
            max_connections: self
                .http_max_connections
                .unwrap_or(defaults.max_connections),
            max_per_peer: self
                .http_max_connections_per_client
                .unwrap_or(defaults.max_per_peer),
        };
        if limits.header_read_timeout.is_zero()
            || limits.max_connections == 0
            || limits.max_per_peer == 0
        {
            anyhow::bail!(
                "--http-header-timeout, --http-max-connections and --http-max-connections-per-client must be more than 0"
            );
        }
        if limits.max_per_peer > limits.max_connections {
            anyhow::bail!(
                "--http-max-connections-per-client ({}) is more than --http-max-connections ({})",
                limits.max_per_peer,
                limits.max_connections
            );
        }
        Ok(limits)
    }
}
