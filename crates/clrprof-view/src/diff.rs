//! The baseline comparison the page shows.

use clrprof_query::explore::StackView;
use serde_json::Value;

use crate::api::ApiError;

pub fn diff(
    _base: &StackView,
    _new: &StackView,
    _normalize: bool,
    _limit: usize,
    _search: Option<&str>,
    _regex: bool,
) -> Result<Value, ApiError> {
    Err(ApiError { status: 501, message: "diff is not available yet".into() })
}
