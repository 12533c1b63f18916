//! What `INFO lock` reports: the counters, and the token high-water mark.

use std::ffi::CStr;

use crate::state::{MINT, STATS};

/// `(field name, value)` pairs of the INFO section; Redis prefixes them with `lock_`.
pub fn info_fields() -> impl Iterator<Item = (&'static CStr, i64)> {
    STATS
        .fields()
        .into_iter()
        .map(|(name, value)| (name, i64::try_from(value).unwrap_or(i64::MAX)))
        .chain(std::iter::once((c"last_token", MINT.high_water())))
}
