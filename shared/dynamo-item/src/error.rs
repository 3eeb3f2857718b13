//! SDK failures as [`StoreError`]s, retryable or not, and the request layer's own failures.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::CancellationReason;

use domain::store::StoreError;

/// Failures the request layer ([`crate::table`]) reports beyond the SDK's own errors.
#[derive(Debug, thiserror::Error)]
pub enum DynamoError {
    /// A transaction kept losing to concurrent ones (or being throttled): retryable.
    #[error("transaction still cancelled after {attempts} attempts ({reasons})")]
    Contended {
        /// Attempts made.
        attempts: u32,
        /// The last cancellation reason codes.
        reasons: String,
    },
    /// A transaction was cancelled for a reason this code does not expect (validation, item
    /// collection size, a condition on an item that cannot fail): not retryable.
    #[error("{what} cancelled: {reasons}")]
    Cancelled {
        /// Which transaction.
        what: &'static str,
        /// The cancellation reason codes, one per item.
        reasons: String,
    },
    /// `BatchGetItem` still left keys unprocessed (throttled) after every attempt: retryable.
    #[error("{left} keys still unprocessed after {attempts} BatchGetItem attempts")]
    Unprocessed {
        /// Attempts made.
        attempts: u32,
        /// Keys left.
        left: usize,
    },
    /// A request could not be built (a bug in this code).
    #[error("building the request")]
    Build(#[source] aws_sdk_dynamodb::error::BuildError),
}

/// The cancellation reasons' codes, comma-separated (`None` for an item that did not fail).
pub(crate) fn codes(reasons: &[CancellationReason]) -> String {
    reasons.iter().map(|r| r.code().unwrap_or("None")).collect::<Vec<_>>().join(",")
}

/// A transaction cancelled for reasons the caller does not expect: a refusal.
pub fn unexpected(what: &'static str, reasons: &[CancellationReason]) -> StoreError {
    StoreError::refused(DynamoError::Cancelled { what, reasons: codes(reasons) })
}

/// A request that could not be built (a bug in the caller): a refusal.
pub fn build(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::refused(DynamoError::Build(e))
}

/// Service error codes that a later retry can get past.
pub(crate) const RETRYABLE_CODES: &[&str] = &[
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "TransactionConflictException",
    "TransactionInProgressException",
    "InternalServerError",
    "ServiceUnavailable",
];

/// Whether `e` is a `TransactionConflictException` (another transaction held the item).
pub(crate) fn is_transaction_conflict<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> bool {
    matches!(e, SdkError::ServiceError(se) if se.err().code() == Some("TransactionConflictException"))
}

/// An SDK failure as a [`StoreError`], keeping the SDK error as the cause: throttling,
/// transaction conflicts, 5xx, timeouts and network failures are retryable
/// ([`StoreError::Unavailable`]); anything else is a refusal a retry will not fix. Logged here
/// with the SDK's `DisplayErrorContext`, which names the service error and its code.
pub fn sdk<E>(e: SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let retryable = match &e {
        SdkError::ServiceError(se) => {
            se.raw().status().is_server_error() || se.err().code().is_some_and(|c| RETRYABLE_CODES.contains(&c))
        }
        SdkError::ConstructionFailure(_) => false,
        // Timeouts, connection failures and unreadable responses.
        _ => true,
    };
    tracing::warn!(error = %DisplayErrorContext(&e), retryable, "DynamoDB request failed");
    if retryable { StoreError::unavailable(e) } else { StoreError::refused(e) }
}
