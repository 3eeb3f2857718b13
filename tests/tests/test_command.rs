//! The test command's own reports: the ten slowest tests it prints at the end of every run
//! (`infra/slowest.py` over nextest's JUnit report), checked on a report of known times, on a
//! broken one, and against the paths the test command and the nextest profile use.

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
    let path = format!("target/nextest/ci/{file}");
    assert!(
        script.contains(&format!("infra/slowest.py\" \"$root/{path}\"")),
        "infra/test.sh does not list from {path}"
    );
    assert!(script.contains(&format!("rm -f \"$root/{path}\"")), "infra/test.sh does not remove the last run's {path}");
}
