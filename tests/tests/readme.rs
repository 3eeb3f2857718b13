//! The README's Python examples, run as a new user would run them: each fenced `python` block
//! that starts with `# mcp 2.x` / `# mcp 1.x` is taken from README.md as it is, its placeholder
//! line (`URL, TOKEN, LINK = …`) is filled with what the local server printed, and it runs
//! under the pinned SDK of that major version. It must print the demo task.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

/// The fenced python block whose first line is `marker`.
fn example(marker: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let mut blocks = readme.split("```python\n").skip(1).map(|b| b.split("```").next().unwrap_or_default());
    blocks
        .find(|b| b.starts_with(marker))
        .unwrap_or_else(|| panic!("README.md has no python block starting with {marker:?}"))
        .to_owned()
}

async fn run(python_var: &str, marker: &str) {
    let Some(python) = std::env::var_os(python_var) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{python_var} is not set under CI=true (use infra/test.sh)"
        );
        eprintln!(
            "\n*** SKIPPING: {python_var} is not set; ./infra/test.sh installs the pinned Python MCP SDKs. ***\n"
        );
        return;
    };
    let code = example(marker);
    let placeholder = r#"URL, TOKEN, LINK = "http://127.0.0.1:8787/mcp", "<Bearer token>", "<Chat link id>""#;
    assert!(code.contains(placeholder), "the README example lost its placeholder line:\n{code}");
    let running = foundry_tests::LocalServer::default("foundry-readme").await;
    let dir = running.dir.clone();
    let filled = format!(
        "URL, TOKEN, LINK = {:?}, {:?}, {:?}",
        running.mcp_url,
        running.token,
        running.demo.chat_link_id.to_string()
    );
    let script = dir.join("example.py");
    std::fs::write(&script, code.replace(placeholder, &filled)).unwrap();
    let out = tokio::process::Command::new(&python).arg(&script).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the README's {marker} example failed:\n{stdout}\n{stderr}");
    let task = running.demo.task_id.unwrap().to_string();
    assert!(stdout.contains(&task), "the {marker} example did not print the demo task {task}:\n{stdout}");
    running.stop().await;
}

#[tokio::test]
async fn the_readme_example_for_mcp_2x_runs() {
    run("FOUNDRY_PYTHON_MCP2", "# mcp 2.x").await;
}

#[tokio::test]
async fn the_readme_example_for_mcp_1x_runs() {
    run("FOUNDRY_PYTHON_MCP1", "# mcp 1.x").await;
}
