//! A request of the page's JSON API as the handlers see it: its parameters ([`Params`]) and the
//! one-line error ([`ApiError`]) any handler may answer with. Apart from the handlers ([`crate::api`],
//! [`crate::diff`]) so that both use them without importing each other.

use std::collections::HashMap;

use serde_json::Value;

/// A request the API cannot answer: HTTP status and a one-line message.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

pub(crate) fn bad(message: impl Into<String>) -> ApiError {
    ApiError { status: 400, message: message.into() }
}

impl From<clrprof_query::QueryError> for ApiError {
    fn from(e: clrprof_query::QueryError) -> Self {
        bad(e.to_string())
    }
}

pub(crate) type ApiResult = Result<Value, ApiError>;

/// The request's parameters.
pub struct Params(pub HashMap<String, String>);

impl Params {
    pub(crate) fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str).filter(|s| !s.is_empty())
    }

    pub(crate) fn num<T: std::str::FromStr>(&self, k: &str, default: T) -> Result<T, ApiError> {
        match self.get(k) {
            None => Ok(default),
            Some(s) => s.parse().map_err(|_| bad(format!("parameter '{k}' is not a number: '{}'", clip(s)))),
        }
    }

    pub(crate) fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("1" | "true" | "yes"))
    }
}

pub(crate) fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}
