//! A JSON body extractor whose rejections are [`ApiError`]s with clear words,
//! so a malformed body gets the same error shape as every other failure.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use hangar_api::codes;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

pub struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Json(value)),
            Err(rejection) => Err(match rejection {
                JsonRejection::MissingJsonContentType(_) => ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    codes::UNSUPPORTED_MEDIA,
                    "the body must be JSON (content-type: application/json)",
                ),
                JsonRejection::JsonSyntaxError(e) => {
                    ApiError::bad_request(format!("malformed json: {}", e.body_text()))
                }
                JsonRejection::JsonDataError(e) => {
                    ApiError::bad_request(format!("invalid request: {}", e.body_text()))
                }
                other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    codes::TOO_LARGE,
                    format!(
                        "the body is larger than {} bytes",
                        hangar_api::MAX_JSON_BODY
                    ),
                ),
                other => ApiError::bad_request(format!("unreadable body: {}", other.body_text())),
            }),
        }
    }
}
