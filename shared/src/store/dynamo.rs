//! DynamoDB store (in progress).
