//! Who is calling: a user (admin token) or a worker (worker key). Both come as
//! `Authorization: Bearer …`; each route says which it accepts.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use crate::error::ApiError;
use crate::Web;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal {
    Admin,
    Worker,
}

impl Principal {
    /// Who asked, in the words recorded with an event.
    pub fn describe(self) -> &'static str {
        match self {
            Principal::Admin => "an operator",
            Principal::Worker => "the worker",
        }
    }
}

/// Compares secrets in time independent of where they first differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub fn principal_of(parts: &Parts, web: &Web) -> Result<Principal, ApiError> {
    let header = parts.headers.get(AUTHORIZATION).ok_or_else(|| {
        ApiError::unauthorized("missing credentials: send Authorization: Bearer <token>")
    })?;
    let token = header
        .to_str()
        .ok()
        .and_then(|h| h.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::unauthorized("malformed credentials: expected Authorization: Bearer <token>")
        })?;
    let cfg = web.config();
    if same_secret(token.as_bytes(), cfg.admin_token.as_bytes()) {
        Ok(Principal::Admin)
    } else if same_secret(token.as_bytes(), cfg.worker_key.as_bytes()) {
        Ok(Principal::Worker)
    } else {
        Err(ApiError::unauthorized("invalid credentials"))
    }
}

/// A request from a user holding the admin token.
pub struct Admin;

/// A request from a worker holding the worker key.
pub struct WorkerKey;

/// A request from either; the principal is kept for the event's cause.
pub struct AdminOrWorker(pub Principal);

impl FromRequestParts<Web> for Admin {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, web: &Web) -> Result<Self, ApiError> {
        match principal_of(parts, web)? {
            Principal::Admin => Ok(Admin),
            Principal::Worker => Err(ApiError::forbidden(
                "this needs the admin token, not the worker key",
            )),
        }
    }
}

impl FromRequestParts<Web> for WorkerKey {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, web: &Web) -> Result<Self, ApiError> {
        match principal_of(parts, web)? {
            Principal::Worker => Ok(WorkerKey),
            Principal::Admin => Err(ApiError::forbidden(
                "this needs the worker key, not the admin token",
            )),
        }
    }
}

impl FromRequestParts<Web> for AdminOrWorker {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, web: &Web) -> Result<Self, ApiError> {
        principal_of(parts, web).map(AdminOrWorker)
    }
}

#[cfg(test)]
mod tests {
    use super::same_secret;

    #[test]
    fn secrets_match_only_when_equal() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"a"));
    }
}
