//! Asks the Kubernetes API server whether a worker's token is its pod's
//! service-account token (TokenReview), for workers that register with
//! that token instead of a key (`--kubernetes-worker-account`). What the
//! answer admits is `hangar_core::tenancy::pod_admission`'s to say.
//!
//! Web's own service account must be allowed to create TokenReviews
//! (bound to the `system:auth-delegator` cluster role).

use std::path::PathBuf;
use std::time::Duration;

use hangar_core::tenancy::pod_admission::{admit, AdmittedAccount, PodWorker, ReviewRefusal};
use serde_json::json;

/// How long one review may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read.
const MAX_ANSWER: usize = 1024 * 1024;
/// The longest token sent for review: service-account tokens are a few
/// KiB; anything much larger is not one.
pub(crate) const MAX_TOKEN: usize = 16 * 1024;

/// How web reaches the API server, and whom it admits.
#[derive(Debug, Clone)]
pub struct TokenReviewConfig {
    /// `https://HOST:PORT` (plain `http://` for tests).
    pub api_base: String,
    /// Web's own bearer token for the API server, read at each review (the
    /// kubelet rotates it).
    pub token_file: PathBuf,
    /// The API server's CA bundle (default: the system's roots).
    pub ca_file: Option<PathBuf>,
    /// The audience workers' tokens must be for.
    pub audience: String,
    pub accounts: Vec<AdmittedAccount>,
}

/// Why a review admitted nothing.
pub(crate) enum ReviewFailure {
    Refused(ReviewRefusal),
    /// The API server could not be asked.
    Unavailable(String),
}

pub(crate) struct TokenReviewer {
    config: TokenReviewConfig,
    http: reqwest::Client,
}

impl TokenReviewer {
    pub(crate) fn new(config: TokenReviewConfig) -> Result<TokenReviewer, String> {
        let mut http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(ca) = &config.ca_file {
            let pem = std::fs::read(ca).map_err(|e| format!("read {}: {e}", ca.display()))?;
            // A CA being rotated is two certificates in one file.
            for cert in reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("the CA in {}: {e}", ca.display()))?
            {
                http = http.add_root_certificate(cert);
            }
        }
        if config.accounts.is_empty() {
            return Err("TokenReview admits no service account".into());
        }
        Ok(TokenReviewer {
            http: http.build().map_err(|e| e.to_string())?,
            config,
        })
    }

    /// The worker `token` may register as.
    pub(crate) async fn review(&self, token: &str) -> Result<PodWorker, ReviewFailure> {
        let own = std::fs::read_to_string(&self.config.token_file).map_err(|e| {
            ReviewFailure::Unavailable(format!(
                "read web's API server token {}: {e}",
                self.config.token_file.display()
            ))
        })?;
        let url = format!(
            "{}/apis/authentication.k8s.io/v1/tokenreviews",
            self.config.api_base.trim_end_matches('/')
        );
        let body = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [self.config.audience]},
        });
        let unavailable = |e: String| ReviewFailure::Unavailable(e);
        let mut response = self
            .http
            .post(&url)
            .bearer_auth(own.trim())
            .json(&body)
            .send()
            .await
            .map_err(|e| unavailable(format!("cannot reach the API server: {e}")))?;
        let status = response.status();
        let mut answer = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unavailable(format!("the API server's answer: {e}")))?
        {
            if answer.len() + chunk.len() > MAX_ANSWER {
                return Err(unavailable(format!(
                    "the API server's answer is larger than {MAX_ANSWER} bytes"
                )));
            }
            answer.extend_from_slice(&chunk);
        }
        match status.as_u16() {
            200 | 201 => admit(&answer, &self.config.audience, &self.config.accounts)
                .map_err(ReviewFailure::Refused),
            401 | 403 => Err(unavailable(format!(
                "the API server refused web's TokenReview (HTTP {status}): bind web's service \
                 account to the system:auth-delegator cluster role"
            ))),
            _ => Err(unavailable(format!(
                "the API server answered a TokenReview with HTTP {status}"
            ))),
        }
    }
}

/// Whether `token` has the shape of a JWT (three base64url parts), as a
/// service-account token does: only those are sent for review.
pub(crate) fn looks_like_jwt(token: &str) -> bool {
    token.len() <= MAX_TOKEN
        && token.split('.').count() == 3
        && token.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}
