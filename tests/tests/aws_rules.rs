//! What AWS refuses (or breaks at run time) that cfn-lint, `sam validate` and moto let through,
//! as checks of `template.yaml` (issue 32). Each rule cites the AWS page it encodes, and each
//! has a mutation of the template that it alone must catch (`each_rule_catches_its_mutation`);
//! docs/deploy.md, "What AWS refuses, checked here", lists them.
//!
//! The Cognito app-client rule is shared with the harness's Cognito (`infra/aws_rules.py`, which
//! `infra/moto_serialized.py` enforces on every `CreateUserPoolClient`): the template's clients
//! here, the clients the code registers in the cloud tests.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_norway::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn template() -> String {
    std::fs::read_to_string(root().join("template.yaml")).unwrap()
}

/// A rule: its name, the AWS page it encodes, and the check.
struct Rule {
    name: &'static str,
    source: &'static str,
    check: fn(&Value) -> Vec<String>,
}

fn resources(t: &Value) -> impl Iterator<Item = (&str, &Value)> {
    t["Resources"].as_mapping().into_iter().flatten().map(|(k, v)| (k.as_str().unwrap_or_default(), v))
}

fn of_type<'a>(t: &'a Value, ty: &'a str) -> impl Iterator<Item = (&'a str, &'a Value)> {
    resources(t).filter(move |(_, r)| r["Type"].as_str() == Some(ty))
}

fn tag(v: &Value) -> Option<(String, &Value)> {
    match v {
        Value::Tagged(t) => Some((t.tag.to_string().trim_start_matches('!').to_owned(), &t.value)),
        _ => None,
    }
}

fn strings(v: &Value, out: &mut Vec<String>) {
    foundry_tests::yaml_strings(v, out);
}

/// A function's timeout (its own, else the Globals').
fn timeout(t: &Value, f: &Value) -> u64 {
    f["Properties"]["Timeout"].as_u64().or_else(|| t["Globals"]["Function"]["Timeout"].as_u64()).unwrap_or(3)
}

/// The logical id a `!Ref X` / `!GetAtt X.Arn` / `"integrations/${X}"` names.
fn named(v: &Value) -> Option<String> {
    let (kind, inner) = tag(v)?;
    let s = inner.as_str()?;
    Some(match kind.as_str() {
        "Ref" => s.to_owned(),
        "GetAtt" => s.split('.').next()?.to_owned(),
        "Sub" => s.split("${").nth(1)?.split(['}', '.']).next()?.to_owned(),
        _ => return None,
    })
}

// ---- the worst-case length of a value, for the size and name limits -------------------------

/// The longest a `${…}` or `!Ref` can resolve to, in characters.
fn worst_ref(t: &Value, name: &str) -> usize {
    match name {
        // "must start with an alphabetical character and can't be longer than 128 characters"
        "AWS::StackName" => 128,
        "AWS::Region" => "ap-southeast-4".len(),
        "AWS::URLSuffix" => "amazonaws.com.cn".len(),
        "AWS::AccountId" => 12,
        "AWS::Partition" => "aws-us-gov".len(),
        "AWS::StackId" => 128 + 100,
        _ => {
            let p = &t["Parameters"][name];
            if !p.is_null() {
                return match (p["Type"].as_str(), p["MaxLength"].as_u64(), p["AllowedValues"].as_sequence()) {
                    (Some("Number"), ..) => 20,
                    (_, _, Some(values)) => values.iter().filter_map(|v| v.as_str()).map(str::len).max().unwrap_or(0),
                    (_, Some(max), _) => max as usize,
                    // No bound: a check that needs one says so.
                    _ => usize::MAX / 4,
                };
            }
            match t["Resources"][name]["Type"].as_str() {
                // CloudFormation's generated names: a function's at most 64, a table's 255.
                Some("AWS::Serverless::Function") => 64,
                Some("AWS::DynamoDB::Table") => 255,
                Some("AWS::S3::Bucket") => 63,
                Some("AWS::SQS::Queue") => "https://sqs.ap-southeast-4.amazonaws.com.cn/123456789012/".len() + 80,
                Some("AWS::ApiGatewayV2::Api") => 10,
                Some("AWS::Cognito::UserPool") => "ap-southeast-4_".len() + 9,
                Some("AWS::Cognito::UserPoolClient") => 26,
                Some("AWS::Cognito::UserPoolResourceServer") => 256,
                _ => 256,
            }
        }
    }
}

/// The longest `v` can be once CloudFormation resolves it.
fn worst_len(t: &Value, v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Number(n) => n.to_string().len(),
        Value::Bool(b) => b.to_string().len(),
        _ => match tag(v) {
            Some((k, inner)) if k == "Ref" => worst_ref(t, inner.as_str().unwrap_or_default()),
            Some((k, inner)) if k == "GetAtt" => {
                let s = inner.as_str().unwrap_or_default();
                if s.ends_with(".QueueName") {
                    80
                } else {
                    2048.min(140 + worst_ref(t, s.split('.').next().unwrap_or("")))
                }
            }
            Some((k, inner)) if k == "Sub" => {
                let s = inner.as_str().unwrap_or_default();
                let mut total = 0;
                let mut rest = s;
                while let Some(i) = rest.find("${") {
                    total += i;
                    let Some(j) = rest[i..].find('}') else { break };
                    let var = &rest[i + 2..i + j];
                    let base = var.split('.').next().unwrap_or(var);
                    total = total.saturating_add(if var.contains('.') { 140 } else { worst_ref(t, base) });
                    rest = &rest[i + j + 1..];
                }
                total + rest.len()
            }
            _ => 2048,
        },
    }
}

// ---- the rules -----------------------------------------------------------------------------

fn alarms(t: &Value) -> impl Iterator<Item = (&str, &Value)> {
    of_type(t, "AWS::CloudWatch::Alarm")
}

fn no_search_alarms(t: &Value) -> Vec<String> {
    alarms(t)
        .filter(|(_, a)| {
            let mut exprs = Vec::new();
            for q in a["Properties"]["Metrics"].as_sequence().into_iter().flatten() {
                strings(&q["Expression"], &mut exprs);
            }
            exprs.iter().any(|e| e.contains("SEARCH("))
        })
        .map(|(id, _)| format!("{id}: CloudWatch refuses alarms on a SEARCH expression"))
        .collect()
}

fn metrics_insights_alarms_have_a_period(t: &Value) -> Vec<String> {
    let mut p = Vec::new();
    for (id, a) in alarms(t) {
        for q in a["Properties"]["Metrics"].as_sequence().into_iter().flatten() {
            let mut e = Vec::new();
            strings(&q["Expression"], &mut e);
            if e.iter().any(|e| e.trim_start().to_ascii_uppercase().starts_with("SELECT"))
                && q["Period"].as_u64().is_none()
            {
                p.push(format!("{id}: a Metrics Insights query in an alarm needs its Period"));
            }
        }
    }
    p
}

fn alarm_queries_within_limits(t: &Value) -> Vec<String> {
    let mut p = Vec::new();
    for (id, a) in alarms(t) {
        let Some(qs) = a["Properties"]["Metrics"].as_sequence() else { continue };
        let stats = qs.iter().filter(|q| !q["MetricStat"].is_null()).count();
        let exprs = qs.iter().filter(|q| !q["Expression"].is_null()).count();
        let returned = qs.iter().filter(|q| q["ReturnData"].as_bool().unwrap_or(true)).count();
        if qs.len() > 20 || stats > 10 || exprs > 10 {
            p.push(format!("{id}: at most 20 queries, 10 metrics and 10 expressions per alarm"));
        }
        if returned != 1 {
            p.push(format!("{id}: exactly one query of an alarm returns data ({returned} do)"));
        }
    }
    p
}

/// Whether `v` can be true when the stack is first created (a literal, or a parameter default).
fn may_be_on_at_create(t: &Value, v: &Value, on: &str) -> bool {
    match v {
        // Left out: off (both services' default).
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => s.eq_ignore_ascii_case(on),
        _ => match tag(v) {
            Some((k, inner)) if k == "Ref" => {
                let d = &t["Parameters"][inner.as_str().unwrap_or_default()]["Default"];
                d.as_str().is_some_and(|s| s.eq_ignore_ascii_case(on)) || d.as_bool() == Some(true)
            }
            // A condition or another intrinsic: assume the worst.
            _ => true,
        },
    }
}

fn no_deletion_protection_under_a_create_rollback(t: &Value) -> Vec<String> {
    let mut p = Vec::new();
    for (id, r) in resources(t) {
        // Deleted on a create rollback: RetainExceptOnCreate, Delete, or no policy at all.
        let deleted_on_rollback = !matches!(r["DeletionPolicy"].as_str(), Some("Retain" | "Snapshot"));
        let props = &r["Properties"];
        let protected = match r["Type"].as_str() {
            Some("AWS::DynamoDB::Table") => may_be_on_at_create(t, &props["DeletionProtectionEnabled"], "true"),
            Some("AWS::Cognito::UserPool") => may_be_on_at_create(t, &props["DeletionProtection"], "ACTIVE"),
            _ => false,
        };
        if deleted_on_rollback && protected {
            p.push(format!(
                "{id}: deletion protection can be on at the first create, whose rollback must delete it (ROLLBACK_FAILED)"
            ));
        }
    }
    p
}

/// The app client's properties as the API takes them (intrinsics as placeholders).
fn as_api_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::json!(b),
        Value::Number(n) => n.as_i64().map_or_else(|| serde_json::json!(n.as_f64()), |i| serde_json::json!(i)),
        Value::String(s) => serde_json::json!(s),
        Value::Sequence(s) => serde_json::Value::Array(s.iter().map(as_api_json).collect()),
        Value::Mapping(m) => serde_json::Value::Object(
            m.iter().map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), as_api_json(v))).collect(),
        ),
        Value::Tagged(_) => serde_json::json!("<intrinsic>"),
    }
}

fn cognito_clients_are_ones_cognito_creates(t: &Value) -> Vec<String> {
    let mut p = Vec::new();
    for (id, c) in of_type(t, "AWS::Cognito::UserPoolClient") {
        let json = as_api_json(&c["Properties"]).to_string();
        let out = std::process::Command::new("python3")
            .arg(root().join("infra/aws_rules.py"))
            .args(["cognito-client", &json])
            .output()
            .unwrap();
        if !out.status.success() {
            p.push(format!("{id}: Cognito refuses it: {}", String::from_utf8_lossy(&out.stdout).trim()));
        }
    }
    p
}

fn custom_scopes_wait_for_their_resource_server(t: &Value) -> Vec<String> {
    let mut p = Vec::new();
    for (id, c) in of_type(t, "AWS::Cognito::UserPoolClient") {
        let mut scopes = Vec::new();
        strings(&c["Properties"]["AllowedOAuthScopes"], &mut scopes);
        let mut deps = Vec::new();
        strings(&c["DependsOn"], &mut deps);
        let servers: Vec<&str> = of_type(t, "AWS::Cognito::UserPoolResourceServer").map(|(i, _)| i).collect();
        if scopes.iter().any(|s| s.contains('/')) && !servers.iter().all(|s| deps.iter().any(|d| d == s)) {
            p.push(format!("{id}: custom scopes need DependsOn its resource server (ScopeDoesNotExistException)"));
        }
    }
    p
}

/// Every event source of a type, as (function id, function, event properties).
fn events<'a>(t: &'a Value, ty: &'a str) -> Vec<(&'a str, &'a Value, &'a Value)> {
    let mut out = Vec::new();
    for (id, f) in of_type(t, "AWS::Serverless::Function") {
        for (_, e) in f["Properties"]["Events"].as_mapping().into_iter().flatten() {
            if e["Type"].as_str() == Some(ty) {
                out.push((id, f, &e["Properties"]));
            }
        }
    }
    out
}

fn sqs_maximum_concurrency_is_two_to_a_thousand(t: &Value) -> Vec<String> {
    events(t, "SQS")
        .into_iter()
        .filter_map(|(id, _, e)| {
            let c = &e["ScalingConfig"]["MaximumConcurrency"];
            (!c.is_null() && c.as_u64().is_none_or(|c| !(2..=1000).contains(&c)))
                .then(|| format!("{id}: ScalingConfig.MaximumConcurrency must be 2 to 1000"))
        })
        .collect()
}

fn sqs_visibility_covers_the_function(t: &Value) -> Vec<String> {
    let mut p = Vec::new();
    for (id, f, e) in events(t, "SQS") {
        let Some(queue) = named(&e["Queue"]) else { continue };
        // SQS's default visibility timeout is 30 s.
        let vis = t["Resources"][&queue]["Properties"]["VisibilityTimeout"].as_u64().unwrap_or(30);
        if vis < timeout(t, f) {
            p.push(format!(
                "{id}: {queue}'s visibility timeout ({vis} s) is less than the function's ({} s)",
                timeout(t, f)
            ));
        }
    }
    p
}

fn sqs_big_batches_have_a_window(t: &Value) -> Vec<String> {
    events(t, "SQS")
        .into_iter()
        .filter(|(_, _, e)| {
            e["BatchSize"].as_u64().unwrap_or(10) > 10 && e["MaximumBatchingWindowInSeconds"].as_u64().unwrap_or(0) < 1
        })
        .map(|(id, _, _)| format!("{id}: a BatchSize over 10 needs MaximumBatchingWindowInSeconds of at least 1"))
        .collect()
}

/// The function a value names (`!GetAtt XFunction.Arn`, or `${XFunction.Arn}` inside a `!Sub`).
fn function_in(v: &Value) -> Option<String> {
    if let Some(n) = named(v).filter(|n| n.ends_with("Function")) {
        return Some(n);
    }
    let mut s = Vec::new();
    strings(v, &mut s);
    s.iter()
        .flat_map(|u| u.split("${").skip(1))
        .map(|p| p.split(['.', '}']).next().unwrap_or(""))
        .find(|n| n.ends_with("Function"))
        .map(str::to_owned)
}

/// The functions an API's integrations invoke, by API logical id.
fn integrated(t: &Value) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, i) in of_type(t, "AWS::ApiGatewayV2::Integration") {
        if let (Some(api), Some(f)) =
            (named(&i["Properties"]["ApiId"]), function_in(&i["Properties"]["IntegrationUri"]))
        {
            out.entry(api).or_default().push(f);
        }
    }
    out
}

fn integrations_end_before_api_gateway_does(t: &Value) -> Vec<String> {
    let mut p = Vec::new();
    for (api, functions) in integrated(t) {
        let websocket = t["Resources"][&api]["Properties"]["ProtocolType"].as_str() == Some("WEBSOCKET");
        // HTTP APIs end an integration at 30 s, WebSocket APIs at 29 s; a function must end first.
        let limit = if websocket { 29 } else { 30 };
        for f in functions {
            let s = timeout(t, &t["Resources"][&f]);
            if s >= limit {
                p.push(format!("{f}: its {s} s timeout meets {api}'s {limit} s integration limit"));
            }
        }
    }
    p
}

fn the_facade_ends_before_its_function(t: &Value) -> Vec<String> {
    let f = &t["Resources"]["RegisterClientFunction"];
    let budget = oauth::facade::UPSTREAM_TIMEOUT.max(lambda::register::COGNITO_OPERATION_TIMEOUT).as_secs();
    let s = timeout(t, f);
    if s < budget + 5 {
        return vec![format!(
            "RegisterClientFunction: its {s} s timeout must outlast its waits on Cognito ({budget} s) by 5 s, or a slow Cognito is API Gateway's bare 500"
        )];
    }
    Vec::new()
}

fn at_most_two_stream_readers(t: &Value) -> Vec<String> {
    let mut by_stream: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (id, _, e) in events(t, "DynamoDB") {
        by_stream.entry(named(&e["Stream"]).unwrap_or_default()).or_default().push(id);
    }
    by_stream
        .into_iter()
        .filter(|(_, readers)| readers.len() > 2)
        .map(|(s, readers)| format!("{s}'s stream has {} readers {readers:?}: at most two per shard", readers.len()))
        .collect()
}

fn at_most_five_filters(t: &Value) -> Vec<String> {
    let mut p = Vec::new();
    for ty in ["DynamoDB", "SQS"] {
        for (id, _, e) in events(t, ty) {
            let n = e["FilterCriteria"]["Filters"].as_sequence().map_or(0, Vec::len);
            if n > 5 {
                p.push(format!("{id}: {n} filters on one event source (Lambda allows 5)"));
            }
        }
    }
    p
}

/// Environment variables Lambda sets itself and refuses in a function's configuration.
const RESERVED: &[&str] = &[
    "_HANDLER",
    "_X_AMZN_TRACE_ID",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_EXECUTION_ENV",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_INITIALIZATION_TYPE",
    "AWS_LAMBDA_LOG_GROUP_NAME",
    "AWS_LAMBDA_LOG_STREAM_NAME",
    "AWS_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_LAMBDA_RUNTIME_API",
    "LAMBDA_TASK_ROOT",
    "LAMBDA_RUNTIME_DIR",
];

fn env_of(t: &Value, f: &Value) -> Vec<(String, Value)> {
    let mut vars = BTreeMap::new();
    for src in [&t["Globals"]["Function"]["Environment"]["Variables"], &f["Properties"]["Environment"]["Variables"]] {
        for (k, v) in src.as_mapping().into_iter().flatten() {
            vars.insert(k.as_str().unwrap_or_default().to_owned(), v.clone());
        }
    }
    vars.into_iter().collect()
}

fn environments_fit_in_four_kilobytes(t: &Value) -> Vec<String> {
    let mut p = Vec::new();
    for (id, f) in of_type(t, "AWS::Serverless::Function") {
        let mut total = 0usize;
        for (k, v) in env_of(t, f) {
            let n = worst_len(t, &v);
            if n >= usize::MAX / 8 {
                p.push(format!(
                    "{id}: {k} comes from a parameter without a MaxLength (the 4 KB total cannot be bounded)"
                ));
            }
            total = total.saturating_add(k.len() + n);
        }
        if total > 4096 {
            p.push(format!("{id}: its environment can reach {total} bytes (Lambda allows 4 KB)"));
        }
    }
    p
}

fn no_reserved_environment_keys(t: &Value) -> Vec<String> {
    let mut p = Vec::new();
    for (id, f) in of_type(t, "AWS::Serverless::Function") {
        for (k, _) in env_of(t, f) {
            if RESERVED.contains(&k.as_str()) {
                p.push(format!("{id}: {k} is reserved by Lambda"));
            }
        }
    }
    p
}

fn names_fit_for_any_stack_name(t: &Value) -> Vec<String> {
    let mut p = Vec::new();
    for (ty, field, max) in [
        ("AWS::Cognito::UserPool", "UserPoolName", 128),
        ("AWS::ApiGatewayV2::Api", "Name", 128),
        ("AWS::CloudWatch::Dashboard", "DashboardName", 255),
        ("AWS::Logs::LogGroup", "LogGroupName", 512),
        ("AWS::CloudWatch::Alarm", "AlarmName", 255),
        ("AWS::SQS::Queue", "QueueName", 80),
        ("AWS::DynamoDB::Table", "TableName", 255),
        ("AWS::Serverless::Function", "FunctionName", 64),
    ] {
        for (id, r) in of_type(t, ty) {
            let v = &r["Properties"][field];
            if v.is_null() {
                continue;
            }
            let n = worst_len(t, v);
            if n > max {
                p.push(format!("{id}: {field} can be {n} characters for a long stack name (at most {max})"));
            }
        }
    }
    p
}

fn no_reserved_concurrency(t: &Value) -> Vec<String> {
    of_type(t, "AWS::Serverless::Function")
        .filter(|(_, f)| {
            !f["Properties"]["ReservedConcurrentExecutions"].is_null()
                || !t["Globals"]["Function"]["ReservedConcurrentExecutions"].is_null()
        })
        .map(|(id, _)| format!("{id}: reserved concurrency is refused in an account with little concurrency"))
        .collect()
}

/// A table encrypted with the AWS owned key: `SSEEnabled: true` switches it to a KMS key whose
/// requests are billed, and leaving it out encrypts it all the same.
fn tables_keep_the_free_encryption(t: &Value) -> Vec<String> {
    of_type(t, "AWS::DynamoDB::Table")
        .filter(|(_, r)| {
            let sse = &r["Properties"]["SSESpecification"];
            !sse.is_null() && (sse["SSEEnabled"].as_bool() != Some(false) || !sse["KMSMasterKeyId"].is_null())
        })
        .map(|(id, _)| format!("{id}: SSEEnabled switches the table to a billed KMS key (leave it out)"))
        .collect()
}

/// Every app client keeps quiet about which accounts exist (the API's default is `LEGACY`,
/// which answers `UserNotFoundException`).
fn clients_prevent_user_existence_errors(t: &Value) -> Vec<String> {
    of_type(t, "AWS::Cognito::UserPoolClient")
        .filter(|(_, r)| r["Properties"]["PreventUserExistenceErrors"].as_str() != Some("ENABLED"))
        .map(|(id, _)| format!("{id}: PreventUserExistenceErrors is not ENABLED"))
        .collect()
}

/// The sign-in domain says which hosted pages it serves: left to a default, a domain made
/// elsewhere (the console) is managed login, which shows no page without a branding style.
fn domains_name_their_login_version(t: &Value) -> Vec<String> {
    of_type(t, "AWS::Cognito::UserPoolDomain")
        .filter(|(_, r)| {
            let v = &r["Properties"]["ManagedLoginVersion"];
            !(v.as_u64() == Some(1)
                || v.as_u64() == Some(2) && of_type(t, "AWS::Cognito::ManagedLoginBranding").count() > 0)
        })
        .map(|(id, _)| format!("{id}: ManagedLoginVersion is not set to 1 (or 2 with a branding style)"))
        .collect()
}

/// A WebSocket stage whose routes are throttled: without, every unauthenticated `$connect`
/// runs a function, up to the account's 500 new connections a second.
fn websocket_stages_are_throttled(t: &Value) -> Vec<String> {
    let websocket: std::collections::BTreeSet<&str> = of_type(t, "AWS::ApiGatewayV2::Api")
        .filter(|(_, r)| r["Properties"]["ProtocolType"].as_str() == Some("WEBSOCKET"))
        .map(|(id, _)| id)
        .collect();
    of_type(t, "AWS::ApiGatewayV2::Stage")
        .filter(|(_, r)| {
            tag(&r["Properties"]["ApiId"])
                .is_some_and(|(k, v)| k == "Ref" && websocket.contains(v.as_str().unwrap_or_default()))
        })
        .filter(|(_, r)| {
            let d = &r["Properties"]["DefaultRouteSettings"];
            let rate = d["ThrottlingRateLimit"].as_f64();
            let burst = d["ThrottlingBurstLimit"].as_u64();
            !(rate.is_some_and(|r| r > 0.0 && r <= 100.0) && burst.is_some_and(|b| b > 0 && b <= 200))
        })
        .map(|(id, _)| format!("{id}: a WebSocket stage without a throttle of at most 100 a second (burst 200)"))
        .collect()
}

/// A user pool that e-mails invitations can send them from SES: Cognito's own sender sends at
/// most 50 e-mails a day for the whole account.
fn invitations_can_go_through_ses(t: &Value) -> Vec<String> {
    of_type(t, "AWS::Cognito::UserPool")
        .filter(|(_, r)| r["Properties"]["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"].as_bool() == Some(true))
        .filter(|(_, r)| {
            let mut words = Vec::new();
            strings(&r["Properties"]["EmailConfiguration"], &mut words);
            !(words.iter().any(|w| w == "DEVELOPER") && words.iter().any(|w| w == "InvitationEmailSource"))
        })
        .map(|(id, _)| format!("{id}: invitations only through Cognito's sender (50 e-mails a day for the account)"))
        .collect()
}

const RULES: &[Rule] = &[
    Rule {
        name: "no alarm on a SEARCH expression",
        source: "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-search-expressions.html",
        check: no_search_alarms,
    },
    Rule {
        name: "a Metrics Insights alarm query has its Period",
        source: "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Create_Metrics_Insights_Alarm.html",
        check: metrics_insights_alarms_have_a_period,
    },
    Rule {
        name: "alarm queries within the PutMetricAlarm limits, one returning data",
        source: "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_MetricDataQuery.html",
        check: alarm_queries_within_limits,
    },
    Rule {
        name: "no deletion protection on what a create rollback deletes",
        source: "https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-deletionpolicy.html",
        check: no_deletion_protection_under_a_create_rollback,
    },
    Rule {
        name: "app clients Cognito creates (auth flows with rotation, token lifetimes)",
        source: "https://docs.aws.amazon.com/cognito/latest/developerguide/amazon-cognito-user-pools-using-the-refresh-token.html",
        check: cognito_clients_are_ones_cognito_creates,
    },
    Rule {
        name: "clients with custom scopes wait for the resource server",
        source: "https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-dependson.html",
        check: custom_scopes_wait_for_their_resource_server,
    },
    Rule {
        name: "SQS MaximumConcurrency 2 to 1000",
        source: "https://docs.aws.amazon.com/lambda/latest/dg/API_ScalingConfig.html",
        check: sqs_maximum_concurrency_is_two_to_a_thousand,
    },
    Rule {
        name: "a queue's visibility timeout covers its consumer's timeout",
        source: "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html",
        check: sqs_visibility_covers_the_function,
    },
    Rule {
        name: "SQS batches over 10 have a batching window",
        source: "https://docs.aws.amazon.com/lambda/latest/dg/API_EventSourceMappingConfiguration.html",
        check: sqs_big_batches_have_a_window,
    },
    Rule {
        name: "integrated functions end before API Gateway's 30 s (HTTP) / 29 s (WebSocket)",
        source: "https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html",
        check: integrations_end_before_api_gateway_does,
    },
    Rule {
        name: "the OAuth facade's waits end inside its function",
        source: "https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html",
        check: the_facade_ends_before_its_function,
    },
    Rule {
        name: "at most two readers of a table stream",
        source: "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html",
        check: at_most_two_stream_readers,
    },
    Rule {
        name: "at most five filters per event source",
        source: "https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html",
        check: at_most_five_filters,
    },
    Rule {
        name: "environments within 4 KB, every parameter in one bounded",
        source: "https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html",
        check: environments_fit_in_four_kilobytes,
    },
    Rule {
        name: "no environment key Lambda reserves",
        source: "https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html",
        check: no_reserved_environment_keys,
    },
    Rule {
        name: "names within their limits for any stack name",
        source: "https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cfn-using-console-create-stack-parameters.html",
        check: names_fit_for_any_stack_name,
    },
    Rule {
        name: "tables encrypted with the AWS owned key, not a billed KMS key",
        source: "https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-dynamodb-table-ssespecification.html",
        check: tables_keep_the_free_encryption,
    },
    Rule {
        name: "app clients prevent user existence errors",
        source: "https://docs.aws.amazon.com/cognito/latest/developerguide/cognito-user-pool-managing-errors.html",
        check: clients_prevent_user_existence_errors,
    },
    Rule {
        name: "the sign-in domain names its login version",
        source: "https://docs.aws.amazon.com/cognito/latest/developerguide/cognito-user-pools-managed-login.html",
        check: domains_name_their_login_version,
    },
    Rule {
        name: "WebSocket stages are throttled",
        source: "https://docs.aws.amazon.com/apigateway/latest/developerguide/apigateway-execution-service-websocket-limits-table.html",
        check: websocket_stages_are_throttled,
    },
    Rule {
        name: "invitations can go through SES (Cognito's sender: 50 a day)",
        source: "https://docs.aws.amazon.com/cognito/latest/developerguide/user-pool-email.html",
        check: invitations_can_go_through_ses,
    },
    Rule {
        name: "no reserved concurrency (new accounts have 10 in all)",
        source: "https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html",
        check: no_reserved_concurrency,
    },
];

fn problems(text: &str) -> Vec<(&'static str, String)> {
    let t: Value = serde_norway::from_str(text).unwrap();
    RULES.iter().flat_map(|r| (r.check)(&t).into_iter().map(move |p| (r.name, p))).collect()
}

#[test]
fn the_template_passes_what_aws_enforces() {
    let p = problems(&template());
    assert!(p.is_empty(), "template.yaml breaks rules AWS enforces:\n{p:#?}");
    for r in RULES {
        assert!(r.source.starts_with("https://docs.aws.amazon.com/"), "{}: cite the AWS page", r.name);
    }
}

/// Each rule's own mutation: the template broken the way the rule forbids, which that rule (by
/// name) must report.
#[test]
fn each_rule_catches_its_mutation() {
    let t = template();
    let search =
        "SELECT SUM(SystemErrors) FROM SCHEMA(\\\"AWS/DynamoDB\\\", Operation, TableName) WHERE TableName = '${Table}'";
    assert!(t.contains(search), "the alarm's query moved: update the mutation");
    let cases: Vec<(&str, String)> = vec![
        (
            "no alarm on a SEARCH expression",
            t.replacen(search, "SUM(SEARCH('{AWS/DynamoDB,Operation,TableName} MetricName=\\\"SystemErrors\\\"', 'Sum', 300))", 1),
        ),
        ("a Metrics Insights alarm query has its Period", t.replacen("          Period: 300\n          Label: system errors\n", "          Label: system errors\n", 1)),
        (
            "alarm queries within the PutMetricAlarm limits, one returning data",
            t.replacen("          Label: throttled requests\n          ReturnData: true\n", "          Label: throttled requests\n          ReturnData: true\n        - Id: again\n          Expression: \"reads\"\n          ReturnData: true\n", 1),
        ),
        (
            "no deletion protection on what a create rollback deletes",
            t.replacen("    AllowedValues: [\"true\", \"false\"]\n    Default: \"false\"\n", "    AllowedValues: [\"true\", \"false\"]\n    Default: \"true\"\n", 1),
        ),
        (
            "app clients Cognito creates (auth flows with rotation, token lifetimes)",
            t.replacen("      ClientName: claude-connector\n", "      ClientName: claude-connector\n      RefreshTokenRotation: { Feature: ENABLED, RetryGracePeriodSeconds: 10 }\n", 1),
        ),
        (
            "app clients Cognito creates (auth flows with rotation, token lifetimes)",
            t.replacen("      RefreshTokenValidity: 1\n", "      RefreshTokenValidity: 0\n", 1),
        ),
        (
            "clients with custom scopes wait for the resource server",
            t.replacen("  OwnerClient:\n    Type: AWS::Cognito::UserPoolClient\n    DependsOn: ResourceServer\n", "  OwnerClient:\n    Type: AWS::Cognito::UserPoolClient\n", 1),
        ),
        ("SQS MaximumConcurrency 2 to 1000", t.replacen("              MaximumConcurrency: 10\n", "              MaximumConcurrency: 1\n", 1)),
        ("a queue's visibility timeout covers its consumer's timeout", t.replacen("      VisibilityTimeout: 180\n", "      VisibilityTimeout: 20\n", 1)),
        (
            "SQS batches over 10 have a batching window",
            t.replacen("            BatchSize: 10\n            FunctionResponseTypes: [ReportBatchItemFailures]", "            BatchSize: 50\n            FunctionResponseTypes: [ReportBatchItemFailures]", 1),
        ),
        (
            "integrated functions end before API Gateway's 30 s (HTTP) / 29 s (WebSocket)",
            t.replacen("      CodeUri: functions/doorbell\n", "      CodeUri: functions/doorbell\n      Timeout: 29\n", 1),
        ),
        (
            "the OAuth facade's waits end inside its function",
            t.replacen("      Timeout: 28\n      Environment:\n        Variables:\n          USER_POOL_ID", "      Environment:\n        Variables:\n          USER_POOL_ID", 1),
        ),
        (
            "at most two readers of a table stream",
            t.replacen("      Events:\n        Events:\n          Type: SQS\n", "      Events:\n        Stream:\n          Type: DynamoDB\n          Properties: { Stream: !GetAtt Table.StreamArn, StartingPosition: LATEST }\n        Events:\n          Type: SQS\n", 1),
        ),
        (
            "at most five filters per event source",
            t.replacen("            FilterCriteria:\n              Filters:\n", "            FilterCriteria:\n              Filters:\n                - Pattern: '{\"a\": [\"1\"]}'\n                - Pattern: '{\"a\": [\"2\"]}'\n                - Pattern: '{\"a\": [\"3\"]}'\n                - Pattern: '{\"a\": [\"4\"]}'\n", 1),
        ),
        ("environments within 4 KB, every parameter in one bounded", t.replacen("    MaxLength: 1000\n", "", 1)),
        ("no environment key Lambda reserves", t.replacen("        RUST_LOG: info\n", "        RUST_LOG: info\n        AWS_REGION: us-east-1\n", 1)),
        ("names within their limits for any stack name", t.replacen("      UserPoolName: !Ref AWS::StackName\n", "      UserPoolName: !Sub \"${AWS::StackName}-owners\"\n", 1)),
        (
            "tables encrypted with the AWS owned key, not a billed KMS key",
            t.replacen("        PointInTimeRecoveryEnabled: true\n", "        PointInTimeRecoveryEnabled: true\n      SSESpecification:\n        SSEEnabled: true\n", 1),
        ),
        ("app clients prevent user existence errors", t.replacen("      PreventUserExistenceErrors: ENABLED\n", "", 1)),
        ("the sign-in domain names its login version", t.replacen("      ManagedLoginVersion: 1\n", "", 1)),
        ("WebSocket stages are throttled", t.replacen("        ThrottlingBurstLimit: 20\n        ThrottlingRateLimit: 10\n", "", 1)),
        (
            "invitations can go through SES (Cognito's sender: 50 a day)",
            t.replacen("        - { EmailSendingAccount: DEVELOPER, SourceArn: !Ref InvitationEmailSource }\n", "        - { EmailSendingAccount: COGNITO_DEFAULT }\n", 1),
        ),
        ("no reserved concurrency (new accounts have 10 in all)", t.replacen("      CodeUri: functions/notify\n", "      CodeUri: functions/notify\n      ReservedConcurrentExecutions: 5\n", 1)),
    ];
    let mut covered: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    for (rule, broken) in cases {
        assert!(broken != t, "{rule}: the mutation did not apply");
        let found = problems(&broken);
        eprintln!("{rule}: {found:?}");
        assert!(found.iter().any(|(r, _)| *r == rule), "{rule}: the rule did not catch its mutation: {found:?}");
        covered.insert(rule);
    }
    for r in RULES {
        assert!(covered.contains(r.name), "{}: no mutation shows it can fail", r.name);
    }
}

/// The harness's Cognito refuses what Cognito refuses (and `--cognito-as-moto` would not):
/// rotation beside `ALLOW_REFRESH_TOKEN_AUTH` (or the default flows), explicit flows without
/// it; and it creates the client the code registers, with the flows and no rotation.
#[tokio::test]
async fn the_harness_cognito_refuses_what_cognito_refuses_and_registers_the_codes_clients() {
    use aws_sdk_cognitoidentityprovider::types::{ExplicitAuthFlowsType, FeatureType, RefreshTokenRotationType};
    use domain::store::RegisterClients;
    let Some(account) = foundry_tests::cloud::account().await else { return };
    let cognito = aws_sdk_cognitoidentityprovider::Client::new(&account.aws);
    let pool = &account.resources.user_pool;
    let rotation = RefreshTokenRotationType::builder().feature(FeatureType::Enabled).build().unwrap();
    let refused = [
        (
            "rotation with the refresh flow",
            Some(vec![ExplicitAuthFlowsType::AllowRefreshTokenAuth]),
            Some(rotation.clone()),
        ),
        ("rotation with the default flows", None, Some(rotation)),
        ("flows without the refresh flow", Some(vec![ExplicitAuthFlowsType::AllowUserSrpAuth]), None),
    ];
    for (what, flows, rotation) in refused {
        let r = cognito
            .create_user_pool_client()
            .user_pool_id(pool)
            .client_name("rule-check")
            .set_explicit_auth_flows(flows)
            .set_refresh_token_rotation(rotation)
            .send()
            .await;
        let e = r.expect_err(what);
        let code =
            aws_sdk_cognitoidentityprovider::error::ProvideErrorMetadata::code(&e).unwrap_or_default().to_owned();
        assert_eq!(code, "InvalidParameterException", "{what}: {e:?}");
    }
    // Cognito's input rules (API model): a callback with white space or past 1,024 characters,
    // and an id outside `[\w+]+`, are InvalidParameterException — which the code never sends.
    for (what, callback) in [
        ("white space", "https://a.example/a b".to_owned()),
        ("1,025 characters", format!("https://a.example/{}", "x".repeat(1007))),
    ] {
        let e = cognito
            .create_user_pool_client()
            .user_pool_id(pool)
            .client_name("rule-check")
            .callback_urls(callback)
            .send()
            .await
            .expect_err(what);
        let code =
            aws_sdk_cognitoidentityprovider::error::ProvideErrorMetadata::code(&e).unwrap_or_default().to_owned();
        assert_eq!(code, "InvalidParameterException", "{what}: {e:?}");
    }
    let e = cognito
        .describe_user_pool_client()
        .user_pool_id(pool)
        .client_id("https://chatgpt.com/oauth/client.json")
        .send()
        .await
        .expect_err("a URL as a client id");
    assert_eq!(
        aws_sdk_cognitoidentityprovider::error::ProvideErrorMetadata::code(&e),
        Some("InvalidParameterException")
    );
    let redirects = Arc::new(Redirects::default());
    let callback = "https://api.example.com/oauth/callback";
    let registry = lambda::register::CognitoClients::new(&account.aws, pool, callback, Arc::clone(&redirects) as _);
    assert_eq!(
        registry.get_client("https://chatgpt.com/oauth/client.json").await.unwrap(),
        None,
        "never sent to Cognito"
    );
    let scopes = ["osfoundry/read".to_owned(), "osfoundry/run".to_owned()];
    // What hosts register, none of which Cognito would take as a callback.
    let long = format!("http://127.0.0.1:1/{}", "x".repeat(1500));
    let uris = ["cursor://anysphere.cursor-mcp/oauth/callback".to_owned(), long, callback.to_owned()];
    let c = registry.create_client("fc-rule-check", &uris, &scopes).await;
    let c = c.expect("the code's registered clients are ones Cognito creates");
    let d = cognito.describe_user_pool_client().user_pool_id(pool).client_id(&c.client_id).send().await.unwrap();
    let d = d.user_pool_client().unwrap();
    assert_eq!(d.explicit_auth_flows(), [ExplicitAuthFlowsType::AllowRefreshTokenAuth]);
    assert!(d.refresh_token_rotation().is_none_or(|r| r.feature() != &FeatureType::Enabled), "{d:?}");
    assert_eq!(d.callback_urls(), [callback], "Cognito holds only the facade's callback");
    let got = registry.get_client(&c.client_id).await.unwrap().unwrap();
    assert_eq!(got.redirect_uris, uris, "the client's own redirect URIs, kept beside it, then the callback");
    registry.delete_client(&c.client_id).await.unwrap();
    assert!(redirects.0.lock().unwrap().is_empty(), "deleting the client forgets its redirect URIs");
}

/// A [`domain::store::ClientRedirects`] in memory.
#[derive(Default)]
struct Redirects(std::sync::Mutex<BTreeMap<String, Vec<String>>>);

#[async_trait::async_trait]
impl domain::store::ClientRedirects for Redirects {
    async fn keep_client_redirects(&self, id: &str, uris: &[String]) -> domain::store::StoreResult<()> {
        self.0.lock().unwrap().insert(id.to_owned(), uris.to_vec());
        Ok(())
    }
    async fn client_redirects(&self, id: &str) -> domain::store::StoreResult<Option<Vec<String>>> {
        Ok(self.0.lock().unwrap().get(id).cloned())
    }
    async fn forget_client_redirects(&self, id: &str) -> domain::store::StoreResult<()> {
        self.0.lock().unwrap().remove(id);
        Ok(())
    }
}

/// The emulator's speed-ups (`infra/moto_patches.py`: a transaction's rollback from copies of
/// the items it names instead of whole tables) answer as moto does: the same transactions,
/// succeeding and failing, leave the same items and stream records in moto as it is and
/// patched, and a patch without the rollback is caught (`infra/moto_patches_test.py`).
#[test]
fn the_emulators_speed_ups_answer_as_moto_does_and_a_missing_rollback_is_caught() {
    let Some(summary) = foundry_tests::python::run_check("FOUNDRY_MOTO_PYTHON", "moto_patches_test.py") else { return };
    assert!(summary.contains("the same in moto and patched; a patch without rollback differs"), "{summary}");
}

/// The emulator counts capacity units as DynamoDB bills them (`infra/moto_capacity.py`): item
/// sizes by the documented rules, 1 KB writes and 4 KB reads rounded up, eventual reads at half,
/// queries paying for what their filter dropped, transactions twice, index writes by what they
/// project; and each of six counting mistakes fails an expectation
/// (`infra/moto_capacity_test.py`). The cost model prices these counts (docs/cost.md).
#[test]
fn the_emulator_counts_capacity_as_dynamodb_bills_it_and_counting_mistakes_are_caught() {
    let Some(summary) = foundry_tests::python::run_check("FOUNDRY_MOTO_PYTHON", "moto_capacity_test.py") else {
        return;
    };
    assert!(summary.contains("expectations hold; 6 mutants each caught"), "{summary}");
    // docs/scale.md's counts are the script's.
    let count = summary.split(" expectations hold").next().and_then(|s| s.rsplit(' ').next()).unwrap_or_default();
    let scale = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scale.md")).unwrap();
    let said = format!(
        "`infra/moto_capacity_test.py`: {count} expectations on items whose sizes are worked out by hand, then six mutants"
    );
    assert!(foundry_tests::says(&scale, &said), "docs/scale.md does not say {said:?} ({summary})");
}
