//! The table's definition, for tests and `infra/` (`template.yaml` declares the same table).

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, StreamSpecification, StreamViewType, TimeToLiveSpecification,
};

use domain::store::StoreResult;

use crate::error::{build, sdk};
use crate::{OPEN_TASKS_INDEX, OWNER_RUNS_INDEX, QUEUE_INDEX, TTL_ATTRIBUTE};

/// Creates the table with its sparse indexes and TTL, on demand billing; waits until it
/// is active. Used by tests and `infra/`; `template.yaml` declares the same table for deploys.
///
/// # Errors
/// [`StoreError`](domain::store::StoreError) when DynamoDB refuses.
pub async fn create_table(client: &Client, table: &str) -> StoreResult<()> {
    let attr = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(build)
    };
    let key = |name: &str, kind: KeyType| {
        KeySchemaElement::builder().attribute_name(name).key_type(kind).build().map_err(build)
    };
    let index = |name: &str, pk: &str, sk: &str, projected: ProjectionType| -> StoreResult<GlobalSecondaryIndex> {
        GlobalSecondaryIndex::builder()
            .index_name(name)
            .key_schema(key(pk, KeyType::Hash)?)
            .key_schema(key(sk, KeyType::Range)?)
            .projection(Projection::builder().projection_type(projected).build())
            .build()
            .map_err(build)
    };
    client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .set_attribute_definitions(Some(vec![
            attr("pk")?,
            attr("sk")?,
            attr("gsi1pk")?,
            attr("gsi1sk")?,
            attr("gsi2pk")?,
            attr("gsi2sk")?,
            attr("gsi3pk")?,
            attr("gsi3sk")?,
        ]))
        .key_schema(key("pk", KeyType::Hash)?)
        .key_schema(key("sk", KeyType::Range)?)
        .global_secondary_indexes(index(QUEUE_INDEX, "gsi1pk", "gsi1sk", ProjectionType::All)?)
        .global_secondary_indexes(index(OPEN_TASKS_INDEX, "gsi2pk", "gsi2sk", ProjectionType::All)?)
        .global_secondary_indexes(index(OWNER_RUNS_INDEX, "gsi3pk", "gsi3sk", ProjectionType::KeysOnly)?)
        // The events publisher reads the stream (SPEC §8).
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .map_err(build)?,
        )
        .send()
        .await
        .map_err(sdk)?;
    for _ in 0..120 {
        let out = client.describe_table().table_name(table).send().await.map_err(sdk)?;
        if out.table().and_then(|t| t.table_status()).map(|s| s.as_str()) == Some("ACTIVE") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder().attribute_name(TTL_ATTRIBUTE).enabled(true).build().map_err(build)?,
        )
        .send()
        .await
        .map_err(sdk)?;
    Ok(())
}
