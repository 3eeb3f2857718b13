//! Artifact bytes in S3 (the bucket encrypts at rest; keys are content-addressed).

use service::tools::{BlobError, BlobStore};

/// The artifact bucket.
#[derive(Clone, Debug)]
pub struct S3Blobs {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3Blobs {
    /// Artifact storage in `bucket`.
    pub fn new(aws: &aws_config::SdkConfig, bucket: &str) -> Self {
        Self { client: aws_sdk_s3::Client::new(aws), bucket: bucket.to_owned() }
    }
}

#[async_trait::async_trait]
impl BlobStore for S3Blobs {
    async fn put(&self, key: &str, bytes: Vec<u8>, content_type: &str) -> Result<(), BlobError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(bytes.into())
            .send()
            .await
            .map(drop)
            .map_err(|e| {
                tracing::warn!(error = %aws_sdk_s3::error::DisplayErrorContext(&e), key, "S3 PutObject failed");
                BlobError::Backend { key: key.to_owned(), source: e.into() }
            })
    }
}
