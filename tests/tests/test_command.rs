//! The test command's own parts:
//! - the ten slowest tests it prints at the end of every run (`infra/slowest.py` over nextest's
//!   JUnit report), checked on a report of known times, on a broken one, and against the paths
//!   the test command and the nextest profile use;
//! - the workspace wrapper that lints and documents each crate as it is built
//!   (`infra/rustc-wrapper.sh`), run by cargo on a crate of its own: a doc warning and a lint
//!   fail the build, a clean crate passes and has its docs, and tests are not documented.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn slowest(report: &Path, n: &str) -> String {
    let out =
        std::process::Command::new("python3").arg(root().join("infra/slowest.py")).arg(report).arg(n).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A report in nextest's shape with twelve tests of known times, given out of order: the
/// listing has the ten slowest, slowest first, and leaves out the two fastest.
#[test]
fn the_slowest_tests_are_listed_slowest_first() {
    let dir = std::env::temp_dir().join(format!("foundry-slowest-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let times = [3.5, 120.3, 0.1, 61.0, 7.0, 0.2, 45.5, 9.0, 300.0, 12.0, 2.0, 30.0];
    let cases: String = times
        .iter()
        .enumerate()
        .map(|(i, t)| format!(r#"<testcase name="m::t{i}" classname="foundry-tests::suite" time="{t}"/>"#))
        .collect();
    let report = dir.join("junit.xml");
    std::fs::write(
        &report,
        format!(r#"<?xml version="1.0"?><testsuites name="nextest-run"><testsuite name="foundry-tests::suite">{cases}</testsuite></testsuites>"#),
    )
    .unwrap();
    let out = slowest(&report, "10");
    let listed: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(listed.len(), 10, "{out}");
    let mut want: Vec<(f64, usize)> = times.iter().copied().zip(0..).collect();
    want.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (line, (t, i)) in listed.iter().zip(&want) {
        assert!(line.ends_with(&format!("foundry-tests::suite m::t{i}")), "{line} is not t{i}:\n{out}");
        assert!(line.trim_start().starts_with(&format!("{t:.1}s")), "{line} is not {t} s:\n{out}");
    }
    assert!(!out.contains("m::t2\n") && !out.contains("m::t5\n"), "a fast test was listed:\n{out}");
    assert!(out.starts_with("the 10 slowest of 12 tests (591 s summed over all)"), "{out}");
    // A report that is not there, or not XML, is said so; the run is not failed by it.
    assert!(slowest(&dir.join("missing.xml"), "10").starts_with("no test report"));
    std::fs::write(&report, "<testsuites><testsuite>").unwrap();
    assert!(slowest(&report, "10").starts_with("no test report"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The test command reads the report where the `ci` profile writes it.
#[test]
fn the_test_command_reads_the_report_the_ci_profile_writes() {
    let nextest = std::fs::read_to_string(root().join(".config/nextest.toml")).unwrap();
    let profile = nextest.split("[profile.ci.junit]").nth(1).expect("the ci profile writes no JUnit report");
    let file = profile.lines().find_map(|l| l.trim().strip_prefix("path = ")).unwrap().trim_matches('"');
    let script = std::fs::read_to_string(root().join("infra/test.sh")).unwrap();
    // nextest keeps its reports in the workspace's target/nextest even when CARGO_TARGET_DIR
    // (the cache's folder under CI) moves the build elsewhere: the path is the checkout's.
    let path = format!("target/nextest/ci/{file}");
    assert!(
        script.contains(&format!("infra/slowest.py\" \"$root/{path}\"")),
        "infra/test.sh does not list from {path}"
    );
    assert!(script.contains(&format!("rm -f \"$root/{path}\"")), "infra/test.sh does not remove the last run's {path}");
    assert!(script.contains("export CARGO_TARGET_DIR=\"$target_dir\""), "CI's build folder is not the cache's");
}

/// Builds a one-file crate (a library with `lib`, a binary, an integration test) with cargo and
/// the test command's workspace wrapper; returns (success, cargo's output).
fn build_with_wrapper(dir: &Path, lib: &str, clippy: bool, rustdoc: bool, command: &[&str]) -> (bool, String) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"wrapped\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(dir.join("src/lib.rs"), lib).unwrap();
    std::fs::write(dir.join("src/main.rs"), "//! The binary.\n\n/// Starts.\nfn main() {\n    wrapped::answer();\n}\n")
        .unwrap();
    // A test target's docs are never rendered (cargo doc leaves tests out too): its broken link is no failure.
    std::fs::write(dir.join("tests/t.rs"), "//! See [`Missing`].\n#[test]\nfn t() {\n    wrapped::answer();\n}\n")
        .unwrap();
    let mut cmd = std::process::Command::new("cargo");
    cmd.args(command)
        .arg("--quiet")
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env("RUSTC_WORKSPACE_WRAPPER", root().join("infra/rustc-wrapper.sh"))
        .env_remove("FOUNDRY_CLIPPY_DRIVER")
        .env_remove("CLIPPY_ARGS")
        .env_remove("RUSTDOCFLAGS")
        .env("FOUNDRY_RUSTDOC", if rustdoc { "1" } else { "0" });
    if clippy {
        let driver = std::process::Command::new("rustup").args(["which", "clippy-driver"]).output().unwrap();
        assert!(driver.status.success(), "clippy-driver is part of the toolchain the test command uses");
        cmd.env("FOUNDRY_CLIPPY_DRIVER", String::from_utf8(driver.stdout).unwrap().trim())
            .env("CLIPPY_ARGS", "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__");
    }
    let out = cmd.output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// The wrapper is the test command's doc check and lint (there is no `cargo doc` pass): a
/// broken intra-doc link in the library fails the build and names the link, a clippy lint fails
/// it, a clean crate builds with both and has its library and binary documented; with rustdoc
/// switched off the broken link builds (the control: it is rustdoc that catches it).
#[test]
fn the_build_wrapper_fails_on_a_doc_warning_and_a_lint_and_documents_what_it_builds() {
    let base = std::env::temp_dir().join(format!("foundry-wrapper-{}", uuid::Uuid::new_v4()));
    let clean = "//! A crate.\n\n/// The answer; see [`answer`].\npub fn answer() -> u32 {\n    42\n}\n";
    let broken_link = "//! A crate.\n\n/// The answer; see [`Nowhere`].\npub fn answer() -> u32 {\n    42\n}\n";
    let lint = "//! A crate.\n\n/// The answer.\npub fn answer() -> u32 {\n    let x = 42;\n    return x;\n}\n";

    let (ok, out) = build_with_wrapper(&base.join("clean"), clean, true, true, &["test", "--no-run"]);
    assert!(ok, "a clean crate failed:\n{out}");
    for (target, kind) in [("wrapped", "lib"), ("wrapped", "bin")] {
        let page = base.join(format!("clean/target/debug/doc-check/{target}-{kind}/{target}/index.html"));
        assert!(page.exists(), "the {kind} target was not documented ({page:?}):\n{out}");
    }

    let (ok, out) = build_with_wrapper(&base.join("link"), broken_link, true, true, &["build"]);
    assert!(!ok, "a broken doc link built:\n{out}");
    assert!(out.contains("Nowhere") && out.contains("unresolved link"), "the failure does not name the link:\n{out}");

    let (ok, out) = build_with_wrapper(&base.join("control"), broken_link, true, false, &["build"]);
    assert!(ok, "without rustdoc the broken link should build (the control):\n{out}");

    let (ok, out) = build_with_wrapper(&base.join("lint"), lint, true, true, &["build"]);
    assert!(!ok && out.contains("needless_return"), "a clippy lint did not fail the build:\n{out}");
    std::fs::remove_dir_all(&base).unwrap();
}
