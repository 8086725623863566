//! A JSON body extractor whose rejections are [`ApiError`]s with clear words,
//! so a malformed body gets the same error shape as every other failure.
//! The words are the ones the worker's API uses too
//! ([`hangar_api::http::Json`]); a body over the limit names the limit of
//! the route it was sent to.

use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

pub(crate) struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        hangar_api::http::Json::<T>::from_request(req, state)
            .await
            .map(|hangar_api::http::Json(value)| Json(value))
            .map_err(ApiError::from)
    }
}
