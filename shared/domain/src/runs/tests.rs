//! Tests of the module above.

use super::*;

fn completion(result: Option<String>) -> Completion {
    Completion {
        execution_id: uuid::Uuid::new_v4().to_string(),
        status: FinalStatus::Completed,
        result,
        result_truncated: false,
        error: None,
        total_tokens: None,
        reported_cost: None,
    }
}

#[test]
fn ninety_nine_thousand_eight_hundred_ninety_nine_japanese_characters_fit() {
    let text = "日".repeat(99_899);
    assert_eq!(text.len(), 299_697);
    let c = completion(Some(text.clone())).bounded();
    assert!(!c.result_truncated);
    assert_eq!(c.result.as_deref(), Some(text.as_str()));
    assert!(c.validate().is_ok());
}

#[test]
fn a_hundred_thousand_and_one_characters_are_truncated_whole() {
    let c = completion(Some("a".repeat(100_001))).bounded();
    assert!(c.result_truncated);
    assert_eq!(c.result, None);
    assert!(c.validate().is_ok());
    let raw = completion(Some("a".repeat(100_001)));
    assert!(raw.validate().unwrap_err().to_string().starts_with("result: the completion JSON is"));
}

#[test]
fn four_byte_text_that_cannot_be_stored_is_truncated() {
    let c = completion(Some("😀".repeat(95_000))).bounded();
    assert!(c.result_truncated);
}

#[test]
fn errors_are_cut_to_two_thousand_characters() {
    let mut c = completion(None);
    c.status = FinalStatus::Failed;
    c.error = Some("é".repeat(5_000));
    assert!(c.validate().is_err());
    let c = c.bounded();
    assert_eq!(c.error.as_deref().map(char_len), Some(2_000));
    assert!(c.validate().is_ok());
}

fn meta(n: usize) -> SessionMeta {
    SessionMeta {
        graph_session_id: GraphSessionId::parse("g", &format!("gs_{n:032x}")).unwrap(),
        name: format!("Graph {n}"),
        description: String::new(),
        slug: format!("graph-{n}"),
        version: "1".into(),
        status: "ready".into(),
    }
}

#[test]
fn shared_session_sets_are_bounded_and_checked_field_by_field() {
    let hundred: Vec<_> = (0..100).map(meta).collect();
    assert!(validate_sessions(&hundred).is_ok());
    let too_many: Vec<_> = (0..101).map(meta).collect();
    assert_eq!(
        validate_sessions(&too_many).unwrap_err().to_string(),
        "sessions: at most 100 sessions per project (got 101)"
    );
    let dup = vec![meta(1), meta(1)];
    assert!(validate_sessions(&dup).unwrap_err().to_string().contains("appears more than once"));
    let mut blank = meta(1);
    blank.slug = " ".into();
    assert_eq!(validate_sessions(&[blank]).unwrap_err().field, "sessions[].slug");
    let mut long = meta(1);
    long.description = "x".repeat(1_001);
    assert_eq!(validate_sessions(&[long]).unwrap_err().field, "sessions[].description");
}

#[test]
fn request_hash_ignores_key_order_but_not_values() {
    let base = QueueRun {
        owner: OwnerId::new("o").unwrap(),
        agent: AgentId::new("c", "s").unwrap(),
        project_id: None,
        graph_session_id: GraphSessionId::parse("g", &format!("gs_{}", "a".repeat(32))).unwrap(),
        arguments: serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap(),
        idempotency_key: IdempotencyKey::parse("key-0001").unwrap(),
    };
    let mut same = base.clone();
    same.arguments = serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap();
    assert_eq!(base.request_hash(), same.request_hash());
    let mut other = base.clone();
    other.arguments = serde_json::from_str(r#"{"a":1,"b":3}"#).unwrap();
    assert_ne!(base.request_hash(), other.request_hash());
    // Another session, or a project given: another request (a retried key must not replay
    // the first run for them).
    let mut session = base.clone();
    session.graph_session_id = GraphSessionId::parse("g", &format!("gs_{}", "b".repeat(32))).unwrap();
    assert_ne!(base.request_hash(), session.request_hash(), "the session is part of the request");
    let mut project = base.clone();
    project.project_id = Some(crate::ids::ProjectId::generate());
    assert_ne!(base.request_hash(), project.request_hash(), "the project is part of the request");
}
