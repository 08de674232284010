//! Small conversions between Rust values and SQLite columns (JSON text, limits).

use rusqlite::Row;
use rusqlite::types::Type;
use serde::de::DeserializeOwned;

/// Reads a JSON text column and decodes it; a bad value surfaces as a conversion error.
pub(crate) fn json_col<T: DeserializeOwned>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    serde_json::from_str(&text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e)))
}

/// Reads a nullable JSON text column and decodes it.
pub(crate) fn opt_json_col<T: DeserializeOwned>(
    row: &Row<'_>,
    idx: usize,
) -> rusqlite::Result<Option<T>> {
    let text: Option<String> = row.get(idx)?;
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e)))
    })
    .transpose()
}

/// Converts a row limit to SQLite's integer, saturating.
pub(crate) fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}
