//! Artifact bytes in S3 (the bucket encrypts at rest; keys are content-addressed).

use tools::blobs::{BlobError, BlobStore, DOWNLOAD_LINK_TTL, Download};

/// The artifact bucket.
#[derive(Clone, Debug)]
pub struct S3Blobs {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3Blobs {
    /// Artifact storage in `bucket`.
    pub fn new(aws: &aws_config::SdkConfig, bucket: &str) -> Self {
        // With an endpoint override (an emulator, LocalStack) bucket names cannot be host names:
        // address buckets by path there. Deployments set no override and keep virtual hosts.
        let conf = aws_sdk_s3::config::Builder::from(aws).force_path_style(aws.endpoint_url().is_some()).build();
        Self { client: aws_sdk_s3::Client::from_conf(conf), bucket: bucket.to_owned() }
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

    /// A presigned `GetObject` URL, valid [`DOWNLOAD_LINK_TTL`], that makes the browser save
    /// the file under its name (signed locally: no request to S3).
    async fn download_url(&self, what: &Download<'_>) -> Result<String, BlobError> {
        let failed =
            |e: Box<dyn std::error::Error + Send + Sync>| BlobError::Backend { key: what.key.to_owned(), source: e };
        let config =
            aws_sdk_s3::presigning::PresigningConfig::expires_in(DOWNLOAD_LINK_TTL).map_err(|e| failed(e.into()))?;
        let presigned = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(what.key)
            .response_content_type(what.content_type)
            .response_content_disposition(tools::blobs::content_disposition(what.name))
            .presigned(config)
            .await
            .map_err(|e| failed(e.into()))?;
        Ok(presigned.uri().to_owned())
    }
}
