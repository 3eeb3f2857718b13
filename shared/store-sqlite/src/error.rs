//! SQLite failures as [`StoreError`]s, and the errors this store raises itself.

use rusqlite::types::Type;

use domain::store::StoreError;

pub(crate) fn poisoned() -> StoreError {
    StoreError::Corrupt("connection pool lock poisoned".into())
}

pub(crate) fn sql_err(e: rusqlite::Error) -> StoreError {
    match e {
        rusqlite::Error::FromSqlConversionFailure(_, _, inner) => StoreError::Corrupt(inner.to_string()),
        other => StoreError::unavailable(other),
    }
}

pub(crate) fn corrupt(idx: usize, what: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, format!("bad {what}").into())
}

pub(crate) fn missing_target() -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, Type::Text, "idempotency record points at a missing item".into())
}
