//! The error shape on the server side, shared by web and the worker's API
//! (feature `server`): every refusal is an [`ErrorBody`], including the
//! ones axum makes itself (a path parameter that does not parse, a query
//! that does not deserialize, a method a route lacks, a body over its
//! limit), and every 413 names the limit of the route that refused.
//!
//! * [`ApiError`] is every error answer: a status, a stable code and a
//!   message. Each server turns its own errors into one in a single place
//!   (its `error.rs`); handlers return `Result<_, ApiError>`.
//! * [`json_errors`] (outermost middleware) rewrites any error answer that
//!   is not JSON into the shape, with the code of its status and the
//!   rejection's own words as the message.
//! * [`limited`] / [`limited_router`] set a body limit and note it in the
//!   request, so [`Json`] and the 413 say the real number.

use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use axum::Router;
use serde::de::DeserializeOwned;

use crate::{codes, ErrorBody, ErrorDetail};

/// An error answer: a status and the shape's code and message. Each
/// server decides in one place (its `error.rs`) which of its errors become
/// which answer; this type is how every one of them goes on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// The code of a status, for errors that come with nothing else.
    pub fn from_status(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError::new(status, code_for_status(status), message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, codes::BAD_REQUEST, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, codes::UNAUTHORIZED, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::FORBIDDEN, codes::FORBIDDEN, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, codes::NOT_FOUND, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::CONFLICT, codes::CONFLICT, message)
    }

    /// Busy or out of reach for now: the client may try again.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, codes::UNAVAILABLE, message)
    }

    /// The disk (or a quota) is full: try elsewhere, or later.
    pub fn insufficient_storage(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            codes::INSUFFICIENT_STORAGE,
            message,
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL, message)
    }

    /// A body over `limit` bytes.
    pub fn too_large(limit: usize) -> Self {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            codes::TOO_LARGE,
            format!("the body is larger than this route's limit of {limit} bytes"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        (self.status, axum::Json(body)).into_response()
    }
}

/// The code scripts see for a status that has no more specific one.
pub fn code_for_status(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => codes::UNAUTHORIZED,
        StatusCode::FORBIDDEN => codes::FORBIDDEN,
        StatusCode::NOT_FOUND => codes::NOT_FOUND,
        StatusCode::METHOD_NOT_ALLOWED => codes::METHOD_NOT_ALLOWED,
        StatusCode::CONFLICT => codes::CONFLICT,
        StatusCode::PAYLOAD_TOO_LARGE => codes::TOO_LARGE,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => codes::UNSUPPORTED_MEDIA,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT => {
            codes::UNAVAILABLE
        }
        StatusCode::INSUFFICIENT_STORAGE => codes::INSUFFICIENT_STORAGE,
        s if s.is_client_error() => codes::BAD_REQUEST,
        _ => codes::INTERNAL,
    }
}

/// The body limit of the route a request reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimit(pub usize);

/// Notes the limit in the request (an inner route's note replaces an outer
/// one, as its `DefaultBodyLimit` does) and names it in a plain 413.
async fn note_limit(State(limit): State<BodyLimit>, mut req: Request, next: Next) -> Response {
    req.extensions_mut().insert(limit);
    let resp = next.run(req).await;
    if resp.status() == StatusCode::PAYLOAD_TOO_LARGE && !is_json(&resp) {
        return ApiError::too_large(limit.0).into_response();
    }
    resp
}

/// A route with a body limit of `limit` bytes.
pub fn limited<S>(
    route: MethodRouter<S, std::convert::Infallible>,
    limit: usize,
) -> MethodRouter<S, std::convert::Infallible>
where
    S: Clone + Send + Sync + 'static,
{
    route
        .layer::<_, std::convert::Infallible>(middleware::from_fn_with_state(
            BodyLimit(limit),
            note_limit,
        ))
        .layer::<_, std::convert::Infallible>(DefaultBodyLimit::max(limit))
}

/// Every route of `router` (that sets none of its own) limited to `limit`.
pub fn limited_router<S>(router: Router<S>, limit: usize) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    router
        .layer(middleware::from_fn_with_state(BodyLimit(limit), note_limit))
        .layer(DefaultBodyLimit::max(limit))
}

/// An answer already in its final shape: JSON, or a page (the dashboard's
/// error pages are for a person, not a script).
fn is_json(resp: &Response) -> bool {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"))
}

/// The most of a non-JSON error body kept as the message.
const MAX_MESSAGE: usize = 4 * 1024;

/// Rewrites error answers that are not JSON (axum's own rejections: plain
/// text, or nothing for a 405) into the shape. Answers that are JSON pass.
pub async fn json_errors(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(&resp) {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = match axum::body::to_bytes(body, MAX_MESSAGE).await {
        Ok(b) => String::from_utf8_lossy(&b).trim().to_string(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_lowercase()
    } else {
        text
    };
    let mut out = ApiError::from_status(status, message).into_response();
    // Keep what the rejection said beyond its body (`allow` on a 405).
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    out
}

/// A JSON body whose rejections are in the shape, with clear words; a body
/// over the limit names the route's limit.
pub struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, state: &S) -> Result<Self, Self::Rejection> {
        let limit = req.extensions().get::<BodyLimit>().copied();
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Json(value)),
            Err(rejection) => Err(json_rejection(rejection, limit)),
        }
    }
}

fn json_rejection(rejection: JsonRejection, limit: Option<BodyLimit>) -> ApiError {
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, codes::BAD_REQUEST, m);
    match rejection {
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            codes::UNSUPPORTED_MEDIA,
            "the body must be JSON (content-type: application/json)",
        ),
        JsonRejection::JsonSyntaxError(e) => bad(format!("malformed json: {}", e.body_text())),
        JsonRejection::JsonDataError(e) => bad(format!("invalid request: {}", e.body_text())),
        other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => match limit {
            Some(BodyLimit(n)) => ApiError::too_large(n),
            None => ApiError::from_status(other.status(), other.body_text()),
        },
        other => bad(format!("unreadable body: {}", other.body_text())),
    }
}

/// Whether a request asks to be upgraded to an `intercept` session
/// ([`crate::intercept`]).
pub fn wants_session(headers: &axum::http::HeaderMap) -> bool {
    let has = |name: header::HeaderName, want: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|v| v.trim().eq_ignore_ascii_case(want))
    };
    has(header::CONNECTION, "upgrade") && has(header::UPGRADE, crate::intercept::UPGRADE_PROTOCOL)
}

/// The `101` that starts an `intercept` session.
pub fn switching() -> Response {
    let mut res = axum::http::StatusCode::SWITCHING_PROTOCOLS.into_response();
    let h = res.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(
        header::UPGRADE,
        HeaderValue::from_static(crate::intercept::UPGRADE_PROTOCOL),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_without_a_code_of_their_own_get_the_nearest_one() {
        let cases = [
            (StatusCode::BAD_REQUEST, codes::BAD_REQUEST),
            (StatusCode::UNPROCESSABLE_ENTITY, codes::BAD_REQUEST),
            (StatusCode::NOT_FOUND, codes::NOT_FOUND),
            (StatusCode::METHOD_NOT_ALLOWED, codes::METHOD_NOT_ALLOWED),
            (StatusCode::PAYLOAD_TOO_LARGE, codes::TOO_LARGE),
            (
                StatusCode::INSUFFICIENT_STORAGE,
                codes::INSUFFICIENT_STORAGE,
            ),
            (StatusCode::SERVICE_UNAVAILABLE, codes::UNAVAILABLE),
            (StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL),
        ];
        for (status, code) in cases {
            assert_eq!(code_for_status(status), code, "{status}");
        }
    }

    // Every refusal of both servers goes on the wire in this shape; scripts
    // parse it, so the bytes are the contract.
    #[tokio::test]
    async fn an_error_answer_is_one_json_shape_with_its_status_and_code() {
        let answer = ApiError::conflict("job p/unit is paused: unpause it first").into_response();
        let status = answer.status();
        let kind = answer.headers()[header::CONTENT_TYPE].clone();
        let body = axum::body::to_bytes(answer.into_body(), 1 << 16)
            .await
            .unwrap();
        let shown = format!("{status} {kind:?}\n{}", String::from_utf8_lossy(&body));
        expect_test::expect![[r#"
            409 Conflict "application/json"
            {"error":{"code":"conflict","message":"job p/unit is paused: unpause it first"}}"#]]
        .assert_eq(&shown);
    }
}
