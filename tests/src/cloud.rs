//! The deployed shape on one machine: the real function binaries, run by a small Lambda emulator
//! of our own, behind an API Gateway HTTP API shim, configured only from `template.yaml`.
//!
//! - **Runtime API** (one port per function): `GET …/runtime/invocation/next` long-polls the
//!   function's queue; `…/response` and `…/error` answer the waiting invoke; `…/init/error`
//!   records a failed start (bad configuration fails the test with the function's message).
//! - **Invoke API** (`POST /2015-03-31/functions/{name}/invocations`, what `aws-sdk-lambda`
//!   calls): the `mcp` function's dispatch reaches the tool functions through it, exactly as in
//!   the cloud; an error answer carries `X-Amz-Function-Error`.
//! - **API Gateway**: HTTP requests become payload-v2 events for the function the template's
//!   `AWS::ApiGatewayV2::Route`s name, and the function's answer becomes the HTTP response.
//! - **Configuration**: every function gets exactly the environment variables its template
//!   resource declares (names from the template, so drift fails), with CloudFormation's
//!   intrinsics resolved to the emulated resources: the moto table, bucket and queue, the
//!   gateway's URL for the API's own, a JWKS served on 127.0.0.1 for Cognito's. An intrinsic the
//!   resolver does not know panics, naming it.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::{Value, json};
use serde_norway::Value as Yaml;
use tokio::sync::{Mutex as AsyncMutex, mpsc, oneshot};

/// What the emulated AWS resources are called.
#[derive(Debug, Clone)]
pub struct Resources {
    /// The DynamoDB table (moto).
    pub table: String,
    /// The artifact bucket (moto).
    pub bucket: String,
    /// The events queue URL (moto).
    pub events_queue: String,
    /// The Cognito user pool id the issuer names.
    pub user_pool: String,
    /// App client ids by logical id (`ClaudeClient`, `ChatGptClient`, `OwnerClient`).
    pub clients: BTreeMap<String, String>,
    /// The JWKS URL served on 127.0.0.1 (replaces Cognito's).
    pub jwks_url: String,
    /// Cognito's hosted domain, emulated on 127.0.0.1 ([`crate::hosted_ui`]).
    pub hosted_url: String,
    /// The doorbell's WebSocket API, emulated on 127.0.0.1 (`host:port`, [`crate::doorbell_shim`]).
    pub doorbell: String,
}

/// The stack name functions are named after.
pub const STACK: &str = "fc";
/// The region everything claims to be in.
pub const REGION: &str = "us-east-1";
/// The account moto serves.
pub const ACCOUNT: &str = "123456789012";

/// One function resource of the template.
#[derive(Debug, Clone)]
pub struct FunctionDef {
    /// Logical id (`McpFunction`).
    pub logical_id: String,
    /// Crate / binary name (`mcp`).
    pub binary: String,
    /// Deployed name (`fc-mcp`).
    pub name: String,
    /// Environment as the template declares it, resolved.
    pub env: BTreeMap<String, String>,
    /// Its role's IAM statements (`Policies`), resolved to the emulated ARNs, as the
    /// emulator's IAM check takes them (`infra/moto_iam.py`).
    pub statements: serde_json::Value,
}

/// A route of the HTTP API: method (`ANY` too), path pattern, function logical id.
#[derive(Debug, Clone)]
pub struct Route {
    /// `POST`, `GET`, `ANY`.
    pub method: String,
    /// Whether API Gateway may invoke the function: the template grants it an
    /// `AWS::Lambda::Permission` for `apigateway.amazonaws.com`. Without one, API Gateway
    /// answers 500 `Internal Server Error` without reaching the function, and so does the shim.
    pub invokable: bool,
    /// `/mcp`, `/owner/{proxy+}`.
    pub path: String,
    /// The function serving it.
    pub function: String,
}

/// The template, read.
pub struct Template {
    yaml: Yaml,
}

fn tag_name(t: &serde_norway::value::TaggedValue) -> String {
    t.tag.to_string().trim_start_matches('!').to_owned()
}

impl Template {
    /// Reads `template.yaml` (or `FOUNDRY_TEMPLATE`, to try a modified copy).
    ///
    /// # Panics
    /// When the file cannot be read or parsed.
    pub fn load() -> Template {
        let path = std::env::var("FOUNDRY_TEMPLATE")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../template.yaml"));
        #[allow(clippy::expect_used)]
        let text = std::fs::read_to_string(&path).expect("read template.yaml");
        Self::from_text(&text)
    }

    /// A template from its text (tests try broken copies of `template.yaml`).
    ///
    /// # Panics
    /// When the text is not YAML.
    pub fn from_text(text: &str) -> Template {
        #[allow(clippy::expect_used)]
        Template { yaml: serde_norway::from_str(text).expect("parse template.yaml") }
    }

    /// This template with parameter `name` defaulting to `value` (a benchmark lifting a cap).
    ///
    /// # Panics
    /// When the template has no such parameter.
    #[must_use]
    pub fn with_parameter(mut self, name: &str, value: &str) -> Template {
        let param = self.yaml.get_mut("Parameters").and_then(|p| p.get_mut(name)).and_then(|p| p.as_mapping_mut());
        #[allow(clippy::expect_used)]
        let param = param.expect("no such parameter in the template");
        param.insert(Yaml::String("Default".into()), Yaml::String(value.into()));
        self
    }

    /// The filter patterns (parsed) of function `logical`'s DynamoDB stream events: what
    /// Lambda lets through to it ([`crate::passes_filters`]).
    pub fn stream_filters(&self, logical: &str) -> Vec<serde_json::Value> {
        let Some((_, f)) = self.resources().find(|(id, _)| id == logical) else { return Vec::new() };
        let Some(events) = f["Properties"]["Events"].as_mapping() else { return Vec::new() };
        events
            .values()
            .filter(|e| e["Type"].as_str() == Some("DynamoDB"))
            .flat_map(|e| e["Properties"]["FilterCriteria"]["Filters"].as_sequence().cloned().unwrap_or_default())
            .filter_map(|f| f["Pattern"].as_str().and_then(|p| serde_json::from_str(p).ok()))
            .collect()
    }

    /// The functions API Gateway may invoke (an `AWS::Lambda::Permission` with principal
    /// `apigateway.amazonaws.com` naming them).
    fn invokable_by_gateway(&self) -> std::collections::BTreeSet<String> {
        self.resources()
            .filter(|(_, v)| {
                v["Type"].as_str() == Some("AWS::Lambda::Permission")
                    && v["Properties"]["Principal"].as_str() == Some("apigateway.amazonaws.com")
                    && v["Properties"]["Action"].as_str() == Some("lambda:InvokeFunction")
            })
            .filter_map(|(_, v)| match &v["Properties"]["FunctionName"] {
                Yaml::Tagged(t) => t.value.as_str().map(|s| s.split('.').next().unwrap_or(s).to_owned()),
                _ => None,
            })
            .collect()
    }

    fn resources(&self) -> impl Iterator<Item = (String, &Yaml)> {
        self.yaml["Resources"]
            .as_mapping()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), v))
    }

    /// Resolves an intrinsic (or a plain value) to the emulated world.
    fn resolve(&self, v: &Yaml, r: &Resources, gateway: &str) -> String {
        match v {
            Yaml::String(s) => s.clone(),
            Yaml::Number(n) => n.to_string(),
            Yaml::Bool(b) => b.to_string(),
            Yaml::Tagged(t) => match tag_name(t).as_str() {
                "Ref" => self.reference(t.value.as_str().unwrap_or_default(), r, gateway),
                "GetAtt" => {
                    let (name, attr) = match &t.value {
                        Yaml::Sequence(p) => (
                            p.first().and_then(|x| x.as_str()).unwrap_or_default().to_owned(),
                            p.get(1).and_then(|x| x.as_str()).unwrap_or_default().to_owned(),
                        ),
                        other => {
                            let text = other.as_str().unwrap_or_default();
                            let (n, a) = text.split_once('.').unwrap_or((text, ""));
                            (n.to_owned(), a.to_owned())
                        }
                    };
                    self.attribute(&name, &attr, r)
                }
                "Sub" => self.substitute(t.value.as_str().unwrap_or_default(), r, gateway),
                "Join" => {
                    let parts = t.value.as_sequence().cloned().unwrap_or_default();
                    let sep = parts.first().and_then(|s| s.as_str()).unwrap_or_default().to_owned();
                    let items: Vec<String> = parts
                        .get(1)
                        .and_then(|l| l.as_sequence())
                        .into_iter()
                        .flatten()
                        .map(|x| self.resolve(x, r, gateway))
                        .collect();
                    items.join(&sep)
                }
                other => panic!("the cloud harness cannot resolve !{other} {:?}", t.value),
            },
            other => panic!("the cloud harness cannot resolve {other:?}"),
        }
    }

    fn reference(&self, name: &str, r: &Resources, gateway: &str) -> String {
        match name {
            "Table" => r.table.clone(),
            "ArtifactBucket" => r.bucket.clone(),
            "EventsQueue" => r.events_queue.clone(),
            "UserPool" => r.user_pool.clone(),
            "ResourceServer" => "osfoundry".into(),
            "CustomDomainHosts" => String::new(),
            "AuthDomainPrefix" => "fc-test".into(),
            "HttpApi" => gateway.into(),
            "DoorbellApi" => "doorbell".into(),
            n if r.clients.contains_key(n) => r.clients[n].clone(),
            // A parameter: its default, as `sam deploy` would take it.
            n if !self.yaml["Parameters"][n].is_null() => self.parameter_default(n),
            n if n.ends_with("Function") => self.function_name(n),
            other => panic!("the cloud harness cannot resolve !Ref {other}"),
        }
    }

    fn substitute(&self, s: &str, r: &Resources, gateway: &str) -> String {
        // The API's own URL is the gateway's; Cognito's key set is the local one.
        let own = "https://${HttpApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}";
        let jwks = "https://cognito-idp.${AWS::Region}.amazonaws.com/${UserPool}/.well-known/jwks.json";
        if s == jwks {
            return r.jwks_url.clone();
        }
        if s == "https://${AuthDomainPrefix}.auth.${AWS::Region}.amazoncognito.com" {
            return r.hosted_url.clone();
        }
        // The doorbell's socket URL and its stage's management endpoint: the shim's.
        let s = s
            .replace(
                "wss://${DoorbellApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}",
                &format!("ws://{}", r.doorbell),
            )
            .replace(
                "https://${DoorbellApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}",
                &format!("http://{}", r.doorbell),
            );
        let s = s.replace(own, gateway);
        let mut out = String::new();
        let mut rest = s.as_str();
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let Some(j) = rest[i..].find('}') else { break };
            let var = &rest[i + 2..i + j];
            out.push_str(&match var {
                "AWS::Region" => REGION.to_owned(),
                "AWS::URLSuffix" => "amazonaws.com".to_owned(),
                "AWS::StackName" => STACK.to_owned(),
                "AWS::AccountId" => ACCOUNT.to_owned(),
                "AWS::Partition" => "aws".to_owned(),
                other => match other.split_once('.') {
                    Some((name, attribute)) => self.attribute(name, attribute, r),
                    None => self.reference(other, r, gateway),
                },
            });
            rest = &rest[i + j + 1..];
        }
        out.push_str(rest);
        out
    }

    /// The deployed name of a function resource: its `FunctionName`, or the stack name and
    /// logical id as CloudFormation generates it (without the random suffix).
    fn function_name(&self, logical_id: &str) -> String {
        let f = &self.yaml["Resources"][logical_id]["Properties"]["FunctionName"];
        match f {
            Yaml::Tagged(t) if tag_name(t) == "Sub" => {
                t.value.as_str().unwrap_or_default().replace("${AWS::StackName}", STACK)
            }
            _ => format!("{STACK}-{logical_id}"),
        }
    }

    /// The crate (and binary) each function resource builds, by logical id: its `CodeUri`
    /// (`functions/<crate>`).
    pub fn function_crates(&self) -> BTreeMap<String, String> {
        self.resources()
            .filter(|(_, v)| v["Type"].as_str() == Some("AWS::Serverless::Function"))
            .map(|(id, v)| (id, Self::crate_of(v)))
            .collect()
    }

    fn crate_of(function: &Yaml) -> String {
        function["Properties"]["CodeUri"].as_str().unwrap_or_default().trim_start_matches("functions/").to_owned()
    }

    /// Every function resource, its environment resolved (globals included).
    pub fn functions(&self, r: &Resources, gateway: &str) -> Vec<FunctionDef> {
        let globals: Vec<(String, String)> = self.yaml["Globals"]["Function"]["Environment"]["Variables"]
            .as_mapping()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), self.resolve(v, r, gateway)))
            .collect();
        self.resources()
            .filter(|(_, v)| v["Type"].as_str() == Some("AWS::Serverless::Function"))
            .map(|(id, v)| {
                let mut env: BTreeMap<String, String> = globals.iter().cloned().collect();
                for (k, val) in v["Properties"]["Environment"]["Variables"].as_mapping().into_iter().flatten() {
                    env.insert(k.as_str().unwrap_or_default().to_owned(), self.resolve(val, r, gateway));
                }
                FunctionDef {
                    binary: Self::crate_of(v),
                    name: self.function_name(&id),
                    statements: self.statements(v, r, gateway),
                    logical_id: id,
                    env,
                }
            })
            .collect()
    }

    /// A function's IAM statements: every `Statement` of its `Policies`, with `Resource`
    /// resolved. A SAM policy template (a named policy) has no statements here: the harness
    /// refuses it rather than enforce less than AWS would.
    fn statements(&self, function: &Yaml, r: &Resources, gateway: &str) -> serde_json::Value {
        let mut out = Vec::new();
        for policy in function["Properties"]["Policies"].as_sequence().into_iter().flatten() {
            let Some(list) = policy["Statement"].as_sequence() else {
                panic!("the cloud harness enforces only inline policy statements, not {policy:?}");
            };
            for st in list {
                let resources: Vec<String> = match &st["Resource"] {
                    Yaml::Sequence(items) => items.iter().map(|x| self.resolve(x, r, gateway)).collect(),
                    other => vec![self.resolve(other, r, gateway)],
                };
                #[allow(clippy::expect_used)]
                let mut json = serde_json::json!({
                    "Effect": st["Effect"].as_str().unwrap_or_default(),
                    "Action": serde_json::to_value(&st["Action"]).expect("an action list"),
                    "Resource": resources,
                });
                if !st["Condition"].is_null() {
                    #[allow(clippy::expect_used)]
                    let condition = serde_json::to_value(&st["Condition"]).expect("a condition block");
                    json["Condition"] = condition;
                }
                out.push(json);
            }
        }
        serde_json::Value::Array(out)
    }

    /// `!GetAtt <name>.<attribute>` in the emulated world: the ARNs IAM statements name.
    fn attribute(&self, name: &str, attribute: &str, r: &Resources) -> String {
        let account = ACCOUNT;
        match (name, attribute) {
            ("Table", "Arn") => format!("arn:aws:dynamodb:{REGION}:{account}:table/{}", r.table),
            ("ArtifactBucket", "Arn") => format!("arn:aws:s3:::{}", r.bucket),
            ("EventsQueue", "Arn") => {
                format!("arn:aws:sqs:{REGION}:{account}:{}", r.events_queue.rsplit('/').next().unwrap_or_default())
            }
            ("UserPool", "Arn") => format!("arn:aws:cognito-idp:{REGION}:{account}:userpool/{}", r.user_pool),
            (n, "Arn") if n.ends_with("Function") => {
                format!("arn:aws:lambda:{REGION}:{account}:function:{}", self.function_name(n))
            }
            // Resources the emulator does not model as AWS ones (a queue only the Lambda
            // service writes to): an ARN of their own that no call of a function names.
            (n, a) => format!("arn:aws:emulated:{REGION}:{account}:{n}/{a}"),
        }
    }

    /// A stack output, resolved as CloudFormation would (the gateway's URL for the API's own).
    ///
    /// # Panics
    /// When the template has no such output.
    pub fn output(&self, name: &str, r: &Resources, gateway: &str) -> String {
        let v = &self.yaml["Outputs"][name]["Value"];
        assert!(!v.is_null(), "template.yaml has no output {name}");
        self.resolve(v, r, gateway)
    }

    /// Whether condition `name` holds with the parameters' defaults (`!Not`, `!Equals`, `!And`,
    /// `!Or` over parameter `!Ref`s and strings: what the template's conditions use).
    ///
    /// # Panics
    /// On a condition the harness cannot evaluate.
    pub fn holds(&self, name: &str) -> bool {
        let c = &self.yaml["Conditions"][name];
        assert!(!c.is_null(), "template.yaml has no condition {name}");
        self.truth(c)
    }

    fn truth(&self, v: &Yaml) -> bool {
        let Yaml::Tagged(t) = v else { panic!("the cloud harness cannot evaluate the condition {v:?}") };
        let args = t.value.as_sequence().cloned().unwrap_or_default();
        match tag_name(t).as_str() {
            "Not" => !self.truth(&args[0]),
            "And" => args.iter().all(|a| self.truth(a)),
            "Or" => args.iter().any(|a| self.truth(a)),
            "Equals" => self.operand(&args[0]) == self.operand(&args[1]),
            "Condition" => self.holds(t.value.as_str().unwrap_or_default()),
            other => panic!("the cloud harness cannot evaluate !{other} in a condition"),
        }
    }

    /// Parameter `name`'s default, as `sam deploy` takes it when it is given no value.
    fn parameter_default(&self, name: &str) -> String {
        let d = &self.yaml["Parameters"][name]["Default"];
        d.as_str().map(str::to_owned).or_else(|| d.as_u64().map(|n| n.to_string())).unwrap_or_default()
    }

    fn operand(&self, v: &Yaml) -> String {
        match v {
            Yaml::Tagged(t) if tag_name(t) == "Ref" => self.parameter_default(t.value.as_str().unwrap_or_default()),
            Yaml::String(s) => s.clone(),
            other => panic!("the cloud harness cannot evaluate {other:?} in a condition"),
        }
    }

    /// The table's `ImportSourceSpecification` as CloudFormation deploys this template (its
    /// `!If` resolved with the parameters' defaults): `(bucket, key prefix)`, or `None` for an
    /// ordinary deploy.
    ///
    /// # Panics
    /// When the property is there but not in the shape the template writes it.
    pub fn table_import_source(&self) -> Option<(String, String)> {
        let spec = &self.yaml["Resources"]["Table"]["Properties"]["ImportSourceSpecification"];
        let chosen = match spec {
            Yaml::Null => return None,
            Yaml::Tagged(t) if tag_name(t) == "If" => {
                let branches = t.value.as_sequence().cloned().unwrap_or_default();
                let condition = branches[0].as_str().unwrap_or_default();
                branches[if self.holds(condition) { 1 } else { 2 }].clone()
            }
            other => other.clone(),
        };
        if matches!(&chosen, Yaml::Tagged(t) if tag_name(t) == "Ref" && t.value.as_str() == Some("AWS::NoValue")) {
            return None;
        }
        assert_eq!(chosen["InputFormat"].as_str(), Some("DYNAMODB_JSON"), "the import's format");
        assert_eq!(chosen["InputCompressionType"].as_str(), Some("GZIP"), "exports are gzipped");
        let source = &chosen["S3BucketSource"];
        Some((self.operand(&source["S3Bucket"]), self.operand(&source["S3KeyPrefix"])))
    }

    /// A value anywhere in the template, by path (`["Resources", "ResourceServer", …]`).
    pub fn value(&self, path: &[&str]) -> Yaml {
        path.iter().fold(self.yaml.clone(), |v, k| v[*k].clone())
    }

    /// The routes of the WebSocket API that answer a client's message without a function: a
    /// route whose target is a `MOCK` integration, made two-way by a route response (API
    /// Gateway sends an integration's answer back only then), with the integration response's
    /// `$default` template as the answer. Route key → answer.
    pub fn websocket_mock_answers(&self) -> BTreeMap<String, String> {
        let of_type = |ty: &str| -> Vec<(String, Yaml)> {
            self.resources().filter(|(_, r)| r["Type"].as_str() == Some(ty)).map(|(id, r)| (id, r.clone())).collect()
        };
        let refers = |v: &Yaml, id: &str| match v {
            Yaml::Tagged(t) => tag_name(t) == "Ref" && t.value.as_str() == Some(id),
            _ => false,
        };
        let mut out = BTreeMap::new();
        for (route_id, route) in of_type("AWS::ApiGatewayV2::Route") {
            let p = &route["Properties"];
            let target = match &p["Target"] {
                Yaml::Tagged(t) => t.value.as_str().unwrap_or_default().to_owned(),
                other => other.as_str().unwrap_or_default().to_owned(),
            };
            let Some(integration) = target.strip_prefix("integrations/${").and_then(|t| t.strip_suffix('}')) else {
                continue;
            };
            if self.yaml["Resources"][integration]["Properties"]["IntegrationType"].as_str() != Some("MOCK") {
                continue;
            }
            let two_way = p["RouteResponseSelectionExpression"].as_str().is_some()
                && of_type("AWS::ApiGatewayV2::RouteResponse")
                    .iter()
                    .any(|(_, r)| refers(&r["Properties"]["RouteId"], &route_id));
            let answer = of_type("AWS::ApiGatewayV2::IntegrationResponse").into_iter().find_map(|(_, r)| {
                refers(&r["Properties"]["IntegrationId"], integration)
                    .then(|| r["Properties"]["ResponseTemplates"]["$default"].as_str().map(str::to_owned))
                    .flatten()
            });
            if let (true, Some(answer), Some(key)) = (two_way, answer, p["RouteKey"].as_str()) {
                out.insert(key.to_owned(), answer);
            }
        }
        out
    }

    /// The HTTP API's routes.
    pub fn routes(&self) -> Vec<Route> {
        let invokable = self.invokable_by_gateway();
        let integration_fn = |name: &str| -> String {
            let uri = &self.yaml["Resources"][name]["Properties"]["IntegrationUri"];
            match uri {
                Yaml::Tagged(t) => t.value.as_str().unwrap_or_default().trim_end_matches(".Arn").to_owned(),
                _ => String::new(),
            }
        };
        self.resources()
            .filter(|(_, v)| v["Type"].as_str() == Some("AWS::ApiGatewayV2::Route"))
            .filter_map(|(_, v)| {
                let key = v["Properties"]["RouteKey"].as_str()?.to_owned();
                let target = match &v["Properties"]["Target"] {
                    Yaml::Tagged(t) => t.value.as_str().unwrap_or_default().to_owned(),
                    _ => return None,
                };
                let integration = target.trim_start_matches("integrations/${").trim_end_matches('}');
                let (method, path) = key.split_once(' ')?;
                let function = integration_fn(integration);
                let invokable = invokable.contains(&function);
                Some(Route { method: method.into(), path: path.into(), function, invokable })
            })
            .collect()
    }
}

impl Route {
    /// Whether this route serves `method path` (a route table's path: its `{name}` segments
    /// are matched like any other segment).
    pub fn serves(&self, method: &str, path: &str) -> bool {
        (self.method == "ANY" || self.method == method) && matches(&self.path, path).is_some()
    }
}

/// Whether `path` matches the route pattern (`{name}` one segment, `{proxy+}` the rest).
fn matches(pattern: &str, path: &str) -> Option<HashMap<String, String>> {
    let (ps, xs): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), path.split('/').collect());
    let mut params = HashMap::new();
    for (i, p) in ps.iter().enumerate() {
        if let Some(name) = p.strip_prefix('{').and_then(|p| p.strip_suffix("+}")) {
            let rest = xs.get(i..)?.join("/");
            if rest.is_empty() {
                return None;
            }
            params.insert(name.to_owned(), rest);
            return Some(params);
        }
        let x = xs.get(i)?;
        if let Some(name) = p.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            params.insert(name.to_owned(), (*x).to_owned());
        } else if p != x {
            return None;
        }
    }
    (ps.len() == xs.len()).then_some(params)
}

/// An invocation waiting for its function.
struct Pending {
    id: String,
    event: Bytes,
    reply: oneshot::Sender<Result<Bytes, Bytes>>,
}

/// One running function.
pub struct Slot {
    /// Deployed name.
    pub name: String,
    queue: mpsc::UnboundedSender<Pending>,
    next: AsyncMutex<mpsc::UnboundedReceiver<Pending>>,
    inflight: Mutex<HashMap<String, oneshot::Sender<Result<Bytes, Bytes>>>>,
    /// When the process was started.
    pub spawned_at: Instant,
    /// When it first asked for an invocation (end of its init).
    pub first_next: Mutex<Option<Instant>>,
    /// What it reported to `init/error`.
    pub init_error: Mutex<Option<String>>,
    child: Mutex<Option<std::process::Child>>,
    /// How the process was started: the binary and its whole environment.
    spawn: (PathBuf, Vec<(String, String)>),
    /// Woken when the process is replaced.
    restarted: tokio::sync::Notify,
}

impl Slot {
    fn start(spawn: &(PathBuf, Vec<(String, String)>), name: &str) -> std::process::Child {
        let (out, err) = log_file(name);
        let mut cmd = std::process::Command::new(&spawn.0);
        cmd.env_clear().envs(spawn.1.iter().cloned()).stdout(out).stderr(err);
        #[allow(clippy::expect_used)]
        cmd.spawn().expect("spawn function")
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut c) = self.child.lock()
            && let Some(mut child) = c.take()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn next(State(slot): State<Arc<Slot>>) -> axum::response::Response {
    {
        let mut first = slot.first_next.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert_with(Instant::now);
    }
    // A process replaced by `Emulator::cold_start` may still be parked here (its connection
    // gone, the handler not dropped): it lets go as soon as the slot restarts, so the next
    // invocation goes to the new process.
    let restarted = slot.restarted.notified();
    tokio::pin!(restarted);
    restarted.as_mut().enable();
    let mut rx = tokio::select! {
        rx = slot.next.lock() => rx,
        () = &mut restarted => return StatusCode::GONE.into_response(),
    };
    let received = tokio::select! {
        p = rx.recv() => p,
        () = &mut restarted => None,
    };
    let Some(p) = received else { return StatusCode::GONE.into_response() };
    drop(rx);
    if let Ok(mut m) = slot.inflight.lock() {
        m.insert(p.id.clone(), p.reply);
    }
    let deadline = (std::time::SystemTime::now() + Duration::from_secs(30))
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let mut res = axum::response::Response::new(Body::from(p.event));
    let h = res.headers_mut();
    let mut set = |k: &'static str, v: String| {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    };
    set("lambda-runtime-aws-request-id", p.id);
    set("lambda-runtime-deadline-ms", deadline.to_string());
    set("lambda-runtime-invoked-function-arn", format!("arn:aws:lambda:{REGION}:123456789012:function:{}", slot.name));
    set("lambda-runtime-trace-id", "Root=1-00000000-000000000000000000000000".into());
    res
}

use axum::response::IntoResponse;

async fn respond(State(slot): State<Arc<Slot>>, Path((id, kind)): Path<(String, String)>, body: Bytes) -> StatusCode {
    let reply = slot.inflight.lock().ok().and_then(|mut m| m.remove(&id));
    if let Some(r) = reply {
        let _ = r.send(if kind == "response" { Ok(body) } else { Err(body) });
    }
    StatusCode::ACCEPTED
}

async fn init_error(State(slot): State<Arc<Slot>>, body: Bytes) -> StatusCode {
    if let Ok(mut e) = slot.init_error.lock() {
        *e = Some(String::from_utf8_lossy(&body).into_owned());
    }
    StatusCode::ACCEPTED
}

/// The emulator: functions by deployed name, the invoke API and the gateway.
pub struct Emulator {
    /// Running functions by deployed name.
    pub functions: HashMap<String, Arc<Slot>>,
    /// The API Gateway shim's URL (`http://127.0.0.1:<port>`).
    pub gateway: String,
    routes: Vec<Route>,
    logical: HashMap<String, String>,
    /// The WebSocket API's routes answered by a mock integration: route key → the answer
    /// ([`Template::websocket_mock_answers`]).
    pub websocket_mocks: BTreeMap<String, String>,
}

/// Where a function's stderr (its JSON logs) goes: `$TMPDIR/foundry-cloud-logs/<name>.log`.
pub fn log_path(name: &str) -> PathBuf {
    // One folder per test process: tests running at once must not truncate each other's logs.
    std::env::temp_dir().join("foundry-cloud-logs").join(std::process::id().to_string()).join(format!("{name}.log"))
}

/// The function's stdout (its JSON log lines, as CloudWatch gets them) and stderr, both into
/// [`log_path`].
fn log_file(name: &str) -> (std::process::Stdio, std::process::Stdio) {
    let path = log_path(name);
    let _ = std::fs::create_dir_all(path.parent().unwrap_or(&path));
    match std::fs::File::create(&path).and_then(|f| Ok((f.try_clone()?, f))) {
        Ok((out, err)) => (out.into(), err.into()),
        Err(_) => (std::process::Stdio::null(), std::process::Stdio::null()),
    }
}

async fn bind() -> (tokio::net::TcpListener, SocketAddr) {
    #[allow(clippy::expect_used)]
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    #[allow(clippy::expect_used)]
    let a = l.local_addr().expect("addr");
    (l, a)
}

impl Emulator {
    /// Starts every function of the template as a process on its own Runtime API port, the
    /// invoke API and the gateway. `base_env` adds what the Lambda service itself provides
    /// (credentials, region, the emulated AWS endpoint).
    ///
    /// # Panics
    /// When a binary is missing (build with `cargo build --workspace --bins`).
    pub async fn start(template: &Template, r: &Resources, base_env: &[(String, String)]) -> Arc<Emulator> {
        Self::start_only(template, r, base_env, |_| true).await
    }

    /// Like [`Emulator::start`], with only the functions `keep` selects.
    ///
    /// # Panics
    /// When a binary is missing.
    pub async fn start_only(
        template: &Template,
        r: &Resources,
        base_env: &[(String, String)],
        keep: impl Fn(&FunctionDef) -> bool,
    ) -> Arc<Emulator> {
        let (gw_listener, gw_addr) = bind().await;
        let gateway = format!("http://{gw_addr}");
        let (invoke_listener, invoke_addr) = bind().await;
        let defs: Vec<FunctionDef> = template.functions(r, &gateway).into_iter().filter(|d| keep(d)).collect();
        let mut functions = HashMap::new();
        let mut logical = HashMap::new();
        for def in &defs {
            let (listener, addr) = bind().await;
            let (tx, rx) = mpsc::unbounded_channel();
            let bin = crate::built_binary(&def.binary, &["shared", &format!("functions/{}", def.binary)]);
            let mut env: Vec<(String, String)> = vec![
                ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
                ("AWS_LAMBDA_RUNTIME_API".into(), addr.to_string()),
                ("AWS_LAMBDA_FUNCTION_NAME".into(), def.name.clone()),
                ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE".into(), "256".into()),
                ("AWS_LAMBDA_FUNCTION_VERSION".into(), "$LATEST".into()),
                ("AWS_ENDPOINT_URL_LAMBDA".into(), format!("http://{invoke_addr}")),
            ];
            env.extend(base_env.iter().cloned());
            env.extend(def.env.iter().map(|(k, v)| (k.clone(), v.clone())));
            // Credentials of its own, registered with its role's statements: the emulator
            // refuses what the role would not allow (`infra/moto_iam.py`).
            // (Per emulator: tests side by side run the same function on tables of their own.)
            let key = format!("FC{}{}", def.logical_id, &uuid::Uuid::new_v4().simple().to_string()[..8]);
            env.push(("AWS_ACCESS_KEY_ID".into(), key.clone()));
            register_role(&key, def).await;
            let spawn = (bin, env);
            let slot = Arc::new(Slot {
                name: def.name.clone(),
                queue: tx,
                next: AsyncMutex::new(rx),
                inflight: Mutex::new(HashMap::new()),
                spawned_at: Instant::now(),
                first_next: Mutex::new(None),
                init_error: Mutex::new(None),
                // Killed and waited for when the slot is dropped.
                #[allow(clippy::expect_used)]
                child: Mutex::new(Some(Slot::start(&spawn, &def.name))),
                spawn,
                restarted: tokio::sync::Notify::new(),
            });
            let app = axum::Router::new()
                .route("/2018-06-01/runtime/invocation/next", axum::routing::get(next))
                .route("/2018-06-01/runtime/invocation/{id}/{kind}", axum::routing::post(respond))
                .route("/2018-06-01/runtime/init/error", axum::routing::post(init_error))
                .with_state(slot.clone());
            tokio::spawn(async move {
                let _ = axum::serve(nodelay(listener), app).await;
            });
            logical.insert(def.logical_id.clone(), def.name.clone());
            functions.insert(def.name.clone(), slot);
        }
        let emulator = Arc::new(Emulator {
            functions,
            gateway,
            routes: template.routes(),
            logical,
            websocket_mocks: template.websocket_mock_answers(),
        });
        let invoke_app = axum::Router::new()
            .route("/2015-03-31/functions/{name}/invocations", axum::routing::post(invoke_api))
            .with_state(emulator.clone());
        tokio::spawn(async move {
            let _ = axum::serve(nodelay(invoke_listener), invoke_app).await;
        });
        let gw_app = axum::Router::new().fallback(gateway_handler).with_state(emulator.clone());
        tokio::spawn(async move {
            let _ = axum::serve(nodelay(gw_listener), gw_app.into_make_service_with_connect_info::<SocketAddr>()).await;
        });
        emulator
    }

    /// Invokes `name` with `event`; `Err` carries the function's error payload.
    ///
    /// # Errors
    /// The function answered an error, or is not running.
    pub async fn invoke(&self, name: &str, event: Bytes) -> Result<Bytes, Bytes> {
        let Some(slot) = self.functions.get(name) else {
            return Err(Bytes::from(format!("{{\"errorMessage\":\"no function {name}\"}}")));
        };
        if let Some(e) = slot.init_error.lock().ok().and_then(|e| e.clone()) {
            return Err(Bytes::from(e));
        }
        let (tx, rx) = oneshot::channel();
        let id = uuid::Uuid::new_v4().to_string();
        let _ = slot.queue.send(Pending { id, event, reply: tx });
        match tokio::time::timeout(Duration::from_secs(30), rx).await {
            Ok(Ok(r)) => r,
            _ => Err(Bytes::from_static(b"{\"errorMessage\":\"timed out\"}")),
        }
    }

    /// Replaces the process of the function `logical_id` with a new one (a cold start: nothing
    /// kept in its memory), on the same Runtime API. Only while it has nothing in flight.
    ///
    /// # Panics
    /// When there is no such function.
    pub fn cold_start(&self, logical_id: &str) {
        #[allow(clippy::expect_used)]
        let slot = self.functions.get(self.name_of(logical_id).expect("a function of the template")).expect("its slot");
        let mut child = slot.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(mut old) = child.take() {
            let _ = old.kill();
            let _ = old.wait();
        }
        slot.restarted.notify_waiters();
        *child = Some(Slot::start(&slot.spawn, &slot.name));
    }

    /// The deployed name of a function by logical id.
    pub fn name_of(&self, logical_id: &str) -> Option<&str> {
        self.logical.get(logical_id).map(String::as_str)
    }

    /// Waits until every function asked for its first invocation; panics with the first init
    /// error (a configuration the template got wrong).
    ///
    /// # Panics
    /// When a function fails to start or does not start within 20 s.
    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut waiting = Vec::new();
            for (name, slot) in &self.functions {
                if let Some(e) = slot.init_error.lock().ok().and_then(|e| e.clone()) {
                    panic!("{name} failed to start: {e}");
                }
                let exited =
                    slot.child.lock().ok().and_then(|mut c| c.as_mut().and_then(|c| c.try_wait().ok().flatten()));
                if let Some(status) = exited {
                    let log = std::fs::read_to_string(log_path(name)).unwrap_or_default();
                    panic!("{name} exited during start-up ({status}):\n{log}");
                }
                if slot.first_next.lock().map(|f| f.is_none()).unwrap_or(true) {
                    waiting.push(name.clone());
                }
            }
            if waiting.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "functions did not start: {waiting:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn invoke_api(
    State(emu): State<Arc<Emulator>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    // The SDK may send the name or an ARN.
    let name = name.rsplit(':').next().unwrap_or(&name).to_owned();
    let arn = format!("arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}");
    if let Some(key) = signing_key(&headers)
        && !iam_allows(&key, "lambda:InvokeFunction", &arn).await
    {
        return access_denied(StatusCode::FORBIDDEN, &key, "lambda:InvokeFunction", &arn);
    }
    match emu.invoke(&name, body).await {
        Ok(b) => (StatusCode::OK, [("x-amz-executed-version", "$LATEST")], b).into_response(),
        Err(b) => (StatusCode::OK, [("x-amz-function-error", "Unhandled")], b).into_response(),
    }
}

/// The API Gateway shim: an HTTP request → a payload-v2 event → the route's function → HTTP.
async fn gateway_handler(
    State(emu): State<Arc<Emulator>>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let path = uri.path().to_owned();
    let route = emu.routes.iter().find_map(|r| {
        let method_ok = r.method == "ANY" || r.method == method.as_str();
        matches(&r.path, &path).filter(|_| method_ok).map(|p| (r, p))
    });
    let Some((route, params)) = route else {
        return (StatusCode::NOT_FOUND, "{\"message\":\"Not Found\"}").into_response();
    };
    let Some(function) = emu.name_of(&route.function).map(str::to_owned) else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "route without a function").into_response();
    };
    if !route.invokable {
        // What API Gateway answers when the function's resource policy does not let it invoke.
        return (StatusCode::INTERNAL_SERVER_ERROR, "{\"message\":\"Internal Server Error\"}").into_response();
    }
    let mut hs = serde_json::Map::new();
    // Payload 2.0 as API Gateway builds it: `Cookie` headers are not headers but the `cookies`
    // array, one entry per cookie.
    let cookies: Vec<String> = headers
        .get_all("cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';').map(|c| c.trim().to_owned()).filter(|c| !c.is_empty()).collect::<Vec<_>>())
        .collect();
    for (k, v) in &headers {
        if k == "cookie" {
            continue;
        }
        let v = v.to_str().unwrap_or_default().to_owned();
        let k = k.as_str().to_owned();
        let joined = match hs.get(&k).and_then(|x| x.as_str()) {
            Some(prev) => format!("{prev},{v}"),
            None => v,
        };
        hs.insert(k, json!(joined));
    }
    let text = std::str::from_utf8(&body).ok();
    let (body_field, b64) = match text {
        _ if body.is_empty() => (Value::Null, false),
        Some(t) => (json!(t), false),
        None => {
            use base64::Engine;
            (json!(base64::engine::general_purpose::STANDARD.encode(&body)), true)
        }
    };
    let query = uri.query().unwrap_or_default().to_owned();
    let route_key = format!("{} {}", route.method, route.path);
    let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or_default().to_owned();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    let mut event = json!({
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": query,
        "headers": hs,
        "requestContext": {
            "accountId": "123456789012", "apiId": "emulated", "domainName": host,
            "domainPrefix": host.split('.').next().unwrap_or_default(),
            "http": {"method": method.as_str(), "path": path, "protocol": "HTTP/1.1", "sourceIp": peer.ip().to_string(),
                     "userAgent": headers.get("user-agent").and_then(|h| h.to_str().ok()).unwrap_or_default()},
            "requestId": uuid::Uuid::new_v4().to_string(), "routeKey": route_key, "stage": "$default",
            "time": "30/Nov/2026:00:00:00 +0000", "timeEpoch": now,
        },
        "isBase64Encoded": b64,
    });
    if !body_field.is_null() {
        event["body"] = body_field;
    }
    if !cookies.is_empty() {
        event["cookies"] = json!(cookies);
    }
    if !params.is_empty() {
        event["pathParameters"] = json!(params);
    }
    if !query.is_empty() {
        let q: HashMap<String, String> = url::form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        event["queryStringParameters"] = json!(q);
    }
    let answer = match emu.invoke(&function, Bytes::from(event.to_string())).await {
        Ok(b) => b,
        Err(e) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{{\"message\":\"Internal Server Error\",\"error\":{}}}", String::from_utf8_lossy(&e)),
            )
                .into_response();
        }
    };
    let v: Value = serde_json::from_slice(&answer).unwrap_or_default();
    let status = StatusCode::from_u16(v["statusCode"].as_u64().unwrap_or(200) as u16).unwrap_or(StatusCode::OK);
    let body = match (v["body"].as_str(), v["isBase64Encoded"].as_bool()) {
        (Some(b), Some(true)) => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(b).unwrap_or_default()
        }
        (Some(b), _) => b.as_bytes().to_vec(),
        (None, _) => Vec::new(),
    };
    let mut res = axum::response::Response::new(Body::from(body));
    *res.status_mut() = status;
    for (k, val) in v["headers"].as_object().into_iter().flatten() {
        if let (Ok(k), Some(Ok(val))) =
            (axum::http::HeaderName::from_bytes(k.as_bytes()), val.as_str().map(HeaderValue::from_str))
        {
            res.headers_mut().insert(k, val);
        }
    }
    // A 2.0 answer's cookies: each one a `Set-Cookie` header.
    for c in v["cookies"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        if let Ok(val) = HeaderValue::from_str(c) {
            res.headers_mut().append(axum::http::header::SET_COOKIE, val);
        }
    }
    res
}

/// The user pool of this test process: created once on the emulator (its app-client API is
/// what the registration function calls), named by the tokens' issuer.
static POOL: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();

/// The issuer of the emulated Cognito pool.
///
/// # Panics
/// Before [`account`] created the pool.
pub fn issuer() -> String {
    #[allow(clippy::expect_used)]
    let pool = POOL.get().expect("account() creates the user pool first");
    format!("https://cognito-idp.{REGION}.amazonaws.com/{pool}")
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap_or_default()
}

/// An access token the way Cognito issues it: no `aud`, `client_id`, `token_use: access`,
/// RS256 with the fixture key the local JWKS serves.
///
/// # Panics
/// When the fixture key cannot sign (a broken checkout).
pub fn access_token(client: &str, scope: &str) -> String {
    access_token_of("owner-sub", client, scope)
}

/// [`access_token`] for the user `sub` (another owner account).
///
/// # Panics
/// When the fixture key cannot sign (a broken checkout).
pub fn access_token_of(sub: &str, client: &str, scope: &str) -> String {
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) as i64;
    let claims = auth::Claims {
        iss: issuer(),
        sub: sub.into(),
        aud: None,
        client_id: Some(client.into()),
        azp: None,
        scope: Some(scope.into()),
        exp: now + 3600,
        nbf: None,
        token_use: Some("access".into()),
        jti: None,
    };
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some("test-key-1".into());
    #[allow(clippy::expect_used)]
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(fixture("rs256-test-key.pem").as_bytes()).expect("fixture key");
    auth::jwt_crypto::install();
    #[allow(clippy::expect_used)]
    jsonwebtoken::encode(&header, &claims, &key).expect("sign")
}

/// The emulated AWS account: a fresh table, bucket and events queue on the emulator at
/// `AWS_ENDPOINT_URL`, the issuer's key set on 127.0.0.1, and what the Lambda service gives
/// every function. `None` (skipped loudly) without an endpoint, except under `CI=true`.
pub struct Account {
    /// Names of the emulated resources.
    pub resources: Resources,
    /// The functions' base environment.
    pub base_env: Vec<(String, String)>,
    /// SDK configuration for the test's own calls.
    pub aws: aws_config::SdkConfig,
    /// The emulated hosted sign-in domain, and what it was asked.
    pub hosted_ui: std::sync::Arc<crate::hosted_ui::HostedUi>,
    /// The emulated doorbell WebSocket API (attach the emulator to route its `$connect`).
    pub doorbell: std::sync::Arc<crate::doorbell_shim::DoorbellShim>,
}

/// What CloudFormation does when a deploy of `template` sets the table's
/// `ImportSourceSpecification` (a point-in-time restore, docs/operations.md): the table is
/// replaced by a new one made from the export, with the template's keys and indexes (DynamoDB's
/// `ImportTable`), then its stream, as the template's `StreamSpecification` says; every
/// function then names the new table (`r.table`); the old one is kept
/// (`UpdateReplacePolicy: Retain`). Nothing happens for an ordinary deploy.
///
/// # Panics
/// When the import fails.
#[allow(clippy::expect_used)]
pub async fn deploy_table(template: &Template, aws: &aws_config::SdkConfig, r: &mut Resources) {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, GlobalSecondaryIndex, InputCompressionType, InputFormat, KeySchemaElement,
        KeyType, Projection, ProjectionType, S3BucketSource, ScalarAttributeType, StreamSpecification, StreamViewType,
        TableCreationParameters,
    };
    let Some((bucket, prefix)) = template.table_import_source() else { return };
    let props = template.value(&["Resources", "Table", "Properties"]);
    let seq = |v: &Yaml| v.as_sequence().cloned().unwrap_or_default();
    let text = |v: &Yaml| v.as_str().unwrap_or_default().to_owned();
    let keys = |v: &Yaml| -> Vec<KeySchemaElement> {
        seq(v)
            .iter()
            .map(|k| {
                KeySchemaElement::builder()
                    .attribute_name(text(&k["AttributeName"]))
                    .key_type(KeyType::from(text(&k["KeyType"]).as_str()))
                    .build()
                    .expect("a key")
            })
            .collect()
    };
    let mut params = TableCreationParameters::builder()
        .table_name(format!("{}-restored", r.table))
        .billing_mode(BillingMode::from(text(&props["BillingMode"]).as_str()))
        .set_key_schema(Some(keys(&props["KeySchema"])));
    for a in seq(&props["AttributeDefinitions"]) {
        params = params.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(text(&a["AttributeName"]))
                .attribute_type(ScalarAttributeType::from(text(&a["AttributeType"]).as_str()))
                .build()
                .expect("an attribute"),
        );
    }
    for g in seq(&props["GlobalSecondaryIndexes"]) {
        params = params.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(text(&g["IndexName"]))
                .set_key_schema(Some(keys(&g["KeySchema"])))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::from(text(&g["Projection"]["ProjectionType"]).as_str()))
                        .build(),
                )
                .build()
                .expect("an index"),
        );
    }
    let client = aws_sdk_dynamodb::Client::new(aws);
    let started = client
        .import_table()
        .s3_bucket_source(
            S3BucketSource::builder().s3_bucket(&bucket).s3_key_prefix(&prefix).build().expect("a source"),
        )
        .input_format(InputFormat::DynamodbJson)
        .input_compression_type(InputCompressionType::Gzip)
        .table_creation_parameters(params.build().expect("the table's parameters"))
        .send()
        .await
        .expect("ImportTable");
    let arn = started.import_table_description().and_then(|d| d.import_arn()).expect("an import").to_owned();
    let done = crate::wait_until("the import", Duration::from_secs(60), || async {
        let d = client.describe_import().import_arn(&arn).send().await.ok()?.import_table_description?;
        (d.import_status().map(|s| s.as_str()) != Some("IN_PROGRESS")).then_some(d)
    })
    .await;
    assert_eq!(done.import_status().map(|s| s.as_str()), Some("COMPLETED"), "the import: {done:?}");
    let table = done.table_arn().and_then(|a| a.rsplit('/').next()).expect("the new table").to_owned();
    assert_eq!(text(&props["StreamSpecification"]["StreamViewType"]), "NEW_AND_OLD_IMAGES");
    client
        .update_table()
        .table_name(&table)
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .expect("a stream"),
        )
        .send()
        .await
        .expect("the new table's stream");
    r.table = table;
}

/// See [`Account`].
///
/// # Panics
/// Under `CI=true` without `AWS_ENDPOINT_URL`, or when a resource cannot be created.
pub async fn account() -> Option<Account> {
    if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "AWS_ENDPOINT_URL is not set under CI=true");
        eprintln!(
            "\n*** SKIPPING a cloud-shape test: AWS_ENDPOINT_URL is not set (./infra/test.sh starts moto). ***\n"
        );
        return None;
    }
    let aws = lambda::aws_defaults().load().await;
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let table = format!("fc-cloud-{suffix}");
    #[allow(clippy::expect_used)]
    store_dynamo::create_table(&aws_sdk_dynamodb::Client::new(&aws), &table).await.expect("create table");
    let bucket = format!("fc-artifacts-{suffix}");
    let s3 = aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&aws).force_path_style(true).build());
    #[allow(clippy::expect_used)]
    s3.create_bucket().bucket(&bucket).send().await.expect("create bucket");
    let sqs = aws_sdk_sqs::Client::new(&aws);
    #[allow(clippy::expect_used)]
    let queue = sqs.create_queue().queue_name(format!("fc-events-{suffix}")).send().await.expect("create queue");
    let cognito = aws_sdk_cognitoidentityprovider::Client::new(&aws);
    let pool = POOL
        .get_or_init(|| async {
            #[allow(clippy::expect_used)]
            let out = cognito
                .create_user_pool()
                .pool_name(format!("fc-owners-{suffix}"))
                .send()
                .await
                .expect("create user pool");
            out.user_pool().and_then(|p| p.id()).unwrap_or_default().to_owned()
        })
        .await
        .clone();
    let jwks = fixture("rs256-test-jwks.json");
    let hosted_ui = crate::hosted_ui::HostedUi::new(cognito.clone(), &pool);
    let app = axum::Router::new()
        .route("/jwks.json", axum::routing::get(move || async move { jwks }))
        .merge(hosted_ui.router());
    let (listener, addr) = bind().await;
    tokio::spawn(async move {
        let _ = axum::serve(nodelay(listener), app).await;
    });
    let doorbell = std::sync::Arc::new(crate::doorbell_shim::DoorbellShim::default());
    let (doorbell_listener, doorbell_addr) = bind().await;
    let shim = crate::doorbell_shim::router(std::sync::Arc::clone(&doorbell));
    tokio::spawn(async move {
        let _ = axum::serve(nodelay(doorbell_listener), shim).await;
    });
    let clients = [
        ("ClaudeClient", "claude-client-id"),
        ("ChatGptClient", "chatgpt-client-id"),
        ("OwnerClient", "owner-client-id"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect();
    let resources = Resources {
        table,
        bucket,
        events_queue: queue.queue_url.unwrap_or_default(),
        user_pool: pool,
        clients,
        jwks_url: format!("http://{addr}/jwks.json"),
        hosted_url: format!("http://{addr}"),
        doorbell: doorbell_addr.to_string(),
    };
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    // What the Lambda service gives every function, the emulated endpoint, and two test-only
    // switches (the notifier may call a receiver on loopback, the facade fetch a client metadata
    // document there; the template test makes sure the template never sets them).
    let base_env = vec![
        ("AWS_ENDPOINT_URL".to_owned(), var("AWS_ENDPOINT_URL")),
        ("AWS_ACCESS_KEY_ID".to_owned(), var("AWS_ACCESS_KEY_ID")),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), var("AWS_SECRET_ACCESS_KEY")),
        ("AWS_REGION".to_owned(), REGION.to_owned()),
        (lambda::config::ALLOW_LOOPBACK_WEBHOOKS.to_owned(), "true".to_owned()),
        (lambda::config::ALLOW_LOOPBACK_CLIENT_METADATA.to_owned(), "true".to_owned()),
    ];
    Some(Account { resources, base_env, aws, hosted_ui, doorbell })
}

/// Registers a function's credentials and statements with the emulator's IAM check
/// (`infra/moto_iam.py`, `POST /_foundry/iam`). Against another endpoint (LocalStack, an
/// account) there is nothing to register with: a notice, or a failure under `CI=true`, where
/// the endpoint is always the project's moto.
async fn register_role(key: &str, def: &FunctionDef) {
    let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") else { return };
    let body = serde_json::json!({"access_key": key, "name": def.name, "statements": def.statements});
    #[allow(clippy::expect_used)]
    let http = crate::http_builder().build().expect("an HTTP client");
    let answer = http.post(format!("{}/_foundry/iam", endpoint.trim_end_matches('/'))).json(&body).send().await;
    let ok = answer.as_ref().is_ok_and(|a| a.status().is_success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "the emulator at {endpoint} does not check IAM (register {}: {answer:?})",
            def.name
        );
        eprintln!("*** IAM is not checked: {endpoint} has no /_foundry/iam (not the project's moto) ***");
    }
}

/// The access key a request is signed with (SigV4's `Credential=<key>/…`), if any.
pub fn signing_key(headers: &HeaderMap) -> Option<String> {
    let auth = headers.get("authorization")?.to_str().ok()?;
    let rest = auth.split("Credential=").nth(1)?;
    Some(rest.split('/').next()?.to_owned())
}

/// Whether the emulator's IAM check allows `key` `action` on `resource`
/// (`POST /_foundry/iam/check`): the calls the harness serves itself (Lambda Invoke, the
/// WebSocket management API) are checked by the same rules as moto's. True for credentials the
/// check does not know (the harness's own) and where there is no check to ask.
pub async fn iam_allows(key: &str, action: &str, resource: &str) -> bool {
    // One client for every check: building one loads the TLS roots, about 30 ms, which the
    // cold-start benchmark's mcp → tool hop measured as if Lambda Invoke cost it.
    static HTTP: std::sync::OnceLock<Option<reqwest::Client>> = std::sync::OnceLock::new();
    let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") else { return true };
    let Some(http) = HTTP.get_or_init(|| crate::http_builder().build().ok()) else { return true };
    let ask = serde_json::json!({"access_key": key, "action": action, "resource": resource});
    let answer = http.post(format!("{}/_foundry/iam/check", endpoint.trim_end_matches('/'))).json(&ask).send().await;
    match answer {
        Ok(a) if a.status().is_success() => a.json::<serde_json::Value>().await.map_or(true, |v| v["allowed"] != false),
        _ => true,
    }
}

/// AWS's refusal of a call the role does not allow, as the Lambda and API Gateway APIs answer it.
pub fn access_denied(status: StatusCode, key: &str, action: &str, resource: &str) -> axum::response::Response {
    let message = format!(
        "User: arn:aws:sts::{ACCOUNT}:assumed-role/{key}-role/{key} is not authorized to perform: {action} on resource: {resource} because no identity-based policy allows the {action} action"
    );
    axum::response::IntoResponse::into_response((
        status,
        [("x-amzn-ErrorType", "AccessDeniedException")],
        axum::Json(serde_json::json!({"Message": message, "message": message})),
    ))
}

/// The emulator's IAM refusals so far (`GET /_foundry/iam`): `{function, action, resource}`.
///
/// # Panics
/// When the emulator does not answer.
#[allow(clippy::expect_used)]
pub async fn iam_refusals() -> Vec<serde_json::Value> {
    let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") else { return Vec::new() };
    let http = crate::http_builder().build().expect("an HTTP client");
    let answer: serde_json::Value = http
        .get(format!("{}/_foundry/iam", endpoint.trim_end_matches('/')))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .expect("the emulator's IAM refusals")
        .json()
        .await
        .unwrap_or_default();
    answer["refusals"].as_array().cloned().unwrap_or_default()
}

/// A listener whose connections send small writes at once (no Nagle delay): the emulator must
/// not add the 40 ms a delayed ACK costs to every invocation it measures.
/// (A named type, so the gateway can take the peer address as `ConnectInfo`.)
fn nodelay(
    listener: tokio::net::TcpListener,
) -> axum::serve::TapIo<tokio::net::TcpListener, fn(&mut tokio::net::TcpStream)> {
    use axum::serve::ListenerExt;
    fn set(tcp: &mut tokio::net::TcpStream) {
        let _ = tcp.set_nodelay(true);
    }
    listener.tap_io(set as fn(&mut tokio::net::TcpStream))
}
