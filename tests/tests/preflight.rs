//! `infra/preflight` on each path that would fail or strand a first deploy (issue 32).
//!
//! AWS comes from moto (credentials, Cognito) and, for what moto cannot do — leave a stack in
//! `ROLLBACK_COMPLETE` or `ROLLBACK_FAILED` (its CloudFormation never rolls back) or report a
//! Lambda concurrency quota (it has no `GetAccountSettings`) — from a small server here that
//! answers with the shapes AWS documents for those calls (`AWS_ENDPOINT_URL_CLOUDFORMATION`,
//! `AWS_ENDPOINT_URL_LAMBDA`). The toolchain is stubbed on `PATH` (an old SAM CLI first on it,
//! a missing arm64 target).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

/// A resource that could not be deleted: logical id, type, physical id, reason.
type Stuck = (&'static str, &'static str, &'static str, &'static str);

/// What the recorded-answers server says about the stack and the account.
#[derive(Clone)]
struct Aws {
    stack: Option<(&'static str, Vec<Stuck>)>,
    concurrency: u32,
    /// The live stack's `TableDeletionProtection`.
    protection: &'static str,
    /// The deployed template (`GetTemplate`): this checkout's unless a test changes it.
    template: String,
    /// The live stack's restore values (`RestoreExportBucket`, `RestoreExportPrefix`): set on a
    /// stack restored from an export.
    restore: (&'static str, &'static str),
}

async fn cloudformation(State(aws): State<Arc<Mutex<Aws>>>, body: String) -> axum::response::Response {
    let aws = aws.lock().unwrap().clone();
    let action = url::form_urlencoded::parse(body.as_bytes()).find(|(k, _)| k == "Action").map(|(_, v)| v.into_owned());
    let xml = |inner: String| {
        ([("content-type", "text/xml")], format!("<{a}Response xmlns=\"http://cloudformation.amazonaws.com/doc/2010-05-15/\"><{a}Result>{inner}</{a}Result><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></{a}Response>", a = action.clone().unwrap_or_default()))
            .into_response()
    };
    let Some((status, resources)) = aws.stack else {
        let e = "<ErrorResponse xmlns=\"http://cloudformation.amazonaws.com/doc/2010-05-15/\"><Error><Type>Sender</Type><Code>ValidationError</Code><Message>Stack with id fc-pre does not exist</Message></Error><RequestId>r</RequestId></ErrorResponse>";
        return (StatusCode::BAD_REQUEST, [("content-type", "text/xml")], e).into_response();
    };
    match action.as_deref() {
        Some("DescribeStacks") => xml(format!(
            "<Stacks><member><StackName>fc-pre</StackName><StackId>arn:aws:cloudformation:us-east-1:123456789012:stack/fc-pre/1</StackId>\
             <CreationTime>2026-12-01T00:00:00Z</CreationTime><StackStatus>{status}</StackStatus>\
             <Parameters><member><ParameterKey>TableDeletionProtection</ParameterKey><ParameterValue>{protection}</ParameterValue></member>\
             <member><ParameterKey>AuthDomainPrefix</ParameterKey><ParameterValue>fc-pre</ParameterValue></member>\
             <member><ParameterKey>RestoreExportBucket</ParameterKey><ParameterValue>{bucket}</ParameterValue></member>\
             <member><ParameterKey>RestoreExportPrefix</ParameterKey><ParameterValue>{prefix}</ParameterValue></member></Parameters>\
             <Outputs><member><OutputKey>UserPoolId</OutputKey><OutputValue>us-east-1_own</OutputValue></member></Outputs></member></Stacks>",
            protection = aws.protection,
            bucket = aws.restore.0,
            prefix = aws.restore.1,
        )),
        Some("DescribeStackResources") => xml(format!(
            "<StackResources>{}</StackResources>",
            resources
                .iter()
                .map(|(id, ty, physical, reason)| format!(
                    "<member><StackName>fc-pre</StackName><LogicalResourceId>{id}</LogicalResourceId><PhysicalResourceId>{physical}</PhysicalResourceId>\
                     <ResourceType>{ty}</ResourceType><Timestamp>2026-12-01T00:00:00Z</Timestamp><ResourceStatus>DELETE_FAILED</ResourceStatus>\
                     <ResourceStatusReason>{reason}</ResourceStatusReason></member>"
                ))
                .collect::<String>()
        )),
        Some("GetTemplate") => xml(format!(
            "<TemplateBody>{}</TemplateBody><StagesAvailable><member>Original</member><member>Processed</member></StagesAvailable>",
            aws.template.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
        )),
        _ => (StatusCode::BAD_REQUEST, "unexpected action").into_response(),
    }
}

async fn account_settings(State(aws): State<Arc<Mutex<Aws>>>) -> axum::response::Response {
    let n = aws.lock().unwrap().concurrency;
    axum::Json(serde_json::json!({
        "AccountLimit": {"TotalCodeSize": 80_530_636_800_u64, "CodeSizeUnzipped": 262_144_000, "CodeSizeZipped": 52_428_800,
                         "ConcurrentExecutions": n, "UnreservedConcurrentExecutions": n},
        "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 0}
    }))
    .into_response()
}

/// A folder of stub tools: `sam` of `sam_version`, `cargo-lambda`, `rustc` 1.95, and `rustup`
/// listing `targets`.
fn toolchain(dir: &Path, sam_version: &str, targets: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, script) in [
        ("sam", format!("#!/bin/sh\necho 'SAM CLI, version {sam_version}'\n")),
        ("cargo-lambda", "#!/bin/sh\necho 'cargo-lambda 1.9.2'\n".to_owned()),
        ("rustc", "#!/bin/sh\necho 'rustc 1.95.0 (59807616e 2026-04-14)'\n".to_owned()),
        ("rustup", format!("#!/bin/sh\nprintf '{targets}\\n'\n")),
        ("aws", "#!/bin/sh\necho 'aws-cli/2.27.7 Python/3.13.3 Linux/6.1 exe/x86_64'\n".to_owned()),
    ] {
        let p = bin.join(name);
        std::fs::write(&p, script).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

struct Preflight {
    recorded: String,
    aws: Arc<Mutex<Aws>>,
    dir: PathBuf,
}

impl Preflight {
    async fn start() -> Option<Self> {
        let endpoint = std::env::var("AWS_ENDPOINT_URL").ok();
        if endpoint.is_none() || std::env::var_os("FOUNDRY_DEPLOY_VENV").is_none() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "AWS_ENDPOINT_URL and FOUNDRY_DEPLOY_VENV are set by infra/test.sh"
            );
            eprintln!(
                "\n*** SKIPPING the preflight tests: run them through ./infra/test.sh (moto and the deploy tools). ***\n"
            );
            return None;
        }
        let aws = Arc::new(Mutex::new(Aws {
            stack: None,
            concurrency: 1000,
            protection: "false",
            restore: ("", ""),
            template: std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap(),
        }));
        let app = axum::Router::new()
            .route("/", axum::routing::post(cloudformation))
            .route("/2016-08-19/account-settings", axum::routing::get(account_settings))
            .with_state(Arc::clone(&aws));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let recorded = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let dir = std::env::temp_dir().join(format!("preflight-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("home")).unwrap();
        Some(Self { recorded, aws, dir })
    }

    /// Runs `infra/preflight` with the tools in `bin`: (exit code, output).
    async fn run(&self, bin: &Path, region: Option<&str>, args: &[&str]) -> (i32, String) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let python = which("python3");
        let mut c = tokio::process::Command::new(root.join("infra/preflight"));
        c.args(["--stack", "fc-pre"])
            .args(args)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("HOME", self.dir.join("home"))
            .env("FOUNDRY_PYTHON", python)
            .env("FOUNDRY_DEPLOY_VENV", std::env::var_os("FOUNDRY_DEPLOY_VENV").unwrap())
            .env("AWS_ENDPOINT_URL", std::env::var("AWS_ENDPOINT_URL").unwrap())
            .env("AWS_ENDPOINT_URL_CLOUDFORMATION", &self.recorded)
            .env("AWS_ENDPOINT_URL_LAMBDA", &self.recorded)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test");
        if let Some(r) = region {
            c.env("AWS_REGION", r);
        }
        let out = c.output().await.unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        eprintln!("---- preflight {args:?}\n{text}");
        (out.status.code().unwrap_or(-1), text)
    }
}

fn which(name: &str) -> String {
    let out = std::process::Command::new("sh").args(["-c", &format!("command -v {name}")]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn pinned_sam() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let pins = std::fs::read_to_string(root.join("infra/requirements-deploy.txt")).unwrap();
    pins.lines().find_map(|l| l.strip_prefix("aws-sam-cli==")).unwrap().trim().to_owned()
}

fn line<'a>(out: &'a str, start: &str) -> &'a str {
    out.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no line {start:?} in:\n{out}"))
}

/// A ready account and toolchain: every line ok, exit 0, the next commands printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_passes_a_ready_account() {
    let Some(p) = Preflight::start().await else { return };
    let bin = toolchain(&p.dir, &pinned_sam(), "aarch64-unknown-linux-gnu\\nx86_64-unknown-linux-gnu");
    let (code, out) = p.run(&bin, Some("us-east-1"), &["--domain-prefix", "fc-pre-free"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    for step in [
        "ok    sam:",
        "ok    make:",
        "ok    aws cli: aws-cli/2.27.7",
        "ok    region: us-east-1",
        "ok    credentials:",
        "ok    lambda concurrency: 1000",
        "ok    stack: fc-pre does not exist",
        "ok    domain prefix: fc-pre-free",
    ] {
        line(&out, step);
    }
    assert!(out.contains("sam build && sam deploy --guided"), "{out}");
}

/// Each thing that would make the deploy fail or strand it is a FAIL naming the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_names_each_refusal_and_its_fix() {
    let Some(p) = Preflight::start().await else { return };
    // An older SAM CLI first on PATH, the arm64 standard library missing.
    let old = toolchain(&p.dir, "1.95.0", "x86_64-unknown-linux-gnu");
    let (code, out) = p.run(&old, Some("us-east-1"), &[]).await;
    assert_eq!(code, 1, "{out}");
    let sam = line(&out, "FAIL  sam:");
    assert!(sam.contains("1.95.0") && sam.contains(&pinned_sam()) && sam.contains(".venv-deploy/bin:$PATH"), "{sam}");
    assert!(line(&out, "FAIL  arm64 target:").contains("rustup target add aarch64-unknown-linux-gnu"));
    let bin = toolchain(&p.dir.join("good"), &pinned_sam(), "aarch64-unknown-linux-gnu");

    // No AWS CLI (when the system's folders hold none either): the steps after the deploy cannot
    // be typed.
    if !["/usr/bin/aws", "/bin/aws"].iter().any(|p| Path::new(p).exists()) {
        let no_cli = toolchain(&p.dir.join("no-cli"), &pinned_sam(), "aarch64-unknown-linux-gnu");
        std::fs::remove_file(no_cli.join("aws")).unwrap();
        let (code, out) = p.run(&no_cli, Some("us-east-1"), &[]).await;
        assert_eq!(code, 1, "{out}");
        assert!(line(&out, "FAIL  aws cli:").contains("getting-started-install"), "{out}");
    }

    // No region anywhere (no samconfig region, no ~/.aws, no environment).
    let (code, out) = p.run(&bin, None, &[]).await;
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, "FAIL  region:").contains("AWS_REGION"));

    // A stack whose first create rolled back: it can only be deleted.
    p.aws.lock().unwrap().stack = Some(("ROLLBACK_COMPLETE", vec![]));
    let (code, out) = p.run(&bin, Some("us-east-1"), &[]).await;
    assert_eq!(code, 1, "{out}");
    let stack = line(&out, "FAIL  stack:");
    assert!(
        stack.contains("aws cloudformation delete-stack --stack-name fc-pre")
            && stack.contains("aws cloudformation wait stack-delete-complete --stack-name fc-pre"),
        "{stack}"
    );
    assert!(!out.contains("table deletion protection"), "no reminder for a stack that is not deployed: {out}");

    // A rollback that could not delete a protected table: delete the stack keeping it, then the table.
    let reason =
        "Resource cannot be deleted as it is currently protected against deletion. Disable deletion protection first.";
    p.aws.lock().unwrap().stack =
        Some(("ROLLBACK_FAILED", vec![("Table", "AWS::DynamoDB::Table", "fc-pre-Table-ABC123", reason)]));
    let (code, out) = p.run(&bin, Some("us-east-1"), &[]).await;
    assert_eq!(code, 1, "{out}");
    let stack = line(&out, "FAIL  stack:");
    for part in [
        "--retain-resources Table",
        "aws dynamodb update-table --table-name fc-pre-Table-ABC123 --no-deletion-protection-enabled",
        "protected against deletion",
    ] {
        assert!(stack.contains(part), "{part:?} missing from {stack}");
    }

    // A deployed stack: fine, with the reminder to protect its table now; a quota of 10.
    p.aws.lock().unwrap().stack = Some(("CREATE_COMPLETE", vec![]));
    p.aws.lock().unwrap().concurrency = 10;
    let (code, out) = p.run(&bin, Some("us-east-1"), &[]).await;
    assert_eq!(code, 0, "{out}");
    line(&out, "ok    stack: fc-pre is CREATE_COMPLETE");
    line(&out, "ok    replacements:");
    assert!(line(&out, "warn  table deletion protection:").contains("TableDeletionProtection=true"));
    // A deployed stack whose table key this checkout would change: replaced, an empty table.
    let deployed = p.aws.lock().unwrap().template.clone();
    p.aws.lock().unwrap().template =
        deployed.replacen("- { AttributeName: sk, KeyType: RANGE }", "- { AttributeName: gsi1sk, KeyType: RANGE }", 1);
    let (code, out) = p.run(&bin, Some("us-east-1"), &[]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        line(&out, "FAIL  replacements:").contains("Table (AWS::DynamoDB::Table): changing KeySchema replaces it"),
        "{out}"
    );
    p.aws.lock().unwrap().template = deployed;
    assert!(line(&out, "warn  table deletion protection:").contains("--save-params"));

    // Protection on, but samconfig.toml still holds the guided first deploy's "false": the next
    // plain `sam deploy` would turn it off. Saved as "true", it is fine.
    p.aws.lock().unwrap().protection = "true";
    let samconfig = p.dir.join("samconfig.toml");
    // Preflight with samconfig.toml's saved overrides: the domain prefix, then `extra`.
    let with_saved = async |extra: &str| {
        let overrides = format!("AuthDomainPrefix=\\\"fc-pre\\\"{extra}");
        let text = format!("version = 0.1\n[default.deploy.parameters]\nparameter_overrides = \"{overrides}\"\n");
        std::fs::write(&samconfig, text).unwrap();
        p.run(&bin, Some("us-east-1"), &["--config-file", samconfig.to_str().unwrap()]).await
    };
    for (saved, expect) in [
        ("false", "warn  table deletion protection: on, but samconfig.toml"),
        ("true", "ok    table deletion protection: on, and samconfig.toml keeps it"),
    ] {
        let (code, out) = with_saved(&format!(" TableDeletionProtection=\\\"{saved}\\\"")).await;
        assert_eq!(code, 0, "{out}");
        line(&out, expect);
    }
    p.aws.lock().unwrap().protection = "false";

    // A stack restored from an export (docs/operations.md): the next `sam deploy` keeps its
    // restore values, and is fine; one whose samconfig.toml clears them would make another,
    // empty table.
    p.aws.lock().unwrap().restore = ("fc-restores", "restores/20261206/AWSDynamoDB/0123/data/");
    for (cleared, expect) in [
        ("", "ok    replacements:"),
        (" RestoreExportBucket=\\\"\\\"", "FAIL  replacements: deploying this template would replace"),
    ] {
        let (_, out) = with_saved(cleared).await;
        let said = line(&out, expect);
        assert!(cleared.is_empty() || said.contains("changing ImportSourceSpecification replaces it"), "{said}");
    }
    p.aws.lock().unwrap().restore = ("", "");
    let quota = line(&out, "warn  lambda concurrency:");
    assert!(quota.contains("at most 10") && quota.contains("--quota-code L-B99A9384"), "{quota}");

    // A domain prefix another user pool holds, and one Cognito refuses outright.
    let Some(account) = foundry_tests::cloud::account().await else { return };
    let cognito = aws_sdk_cognitoidentityprovider::Client::new(&account.aws);
    let prefix = format!("fc-taken-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    cognito.create_user_pool_domain().domain(&prefix).user_pool_id(&account.resources.user_pool).send().await.unwrap();
    let (code, out) = p.run(&bin, Some("us-east-1"), &["--domain-prefix", &prefix]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        line(&out, "FAIL  domain prefix:")
            .contains(&format!("already belongs to user pool {}", account.resources.user_pool))
    );
    let (code, out) = p.run(&bin, Some("us-east-1"), &["--domain-prefix", "my-aws-login"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, "FAIL  domain prefix:").contains("without aws, amazon or cognito"));
}
