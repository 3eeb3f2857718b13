//! The release script's Mach-O check (`infra/check_macho.py`) against real Mach-O files: zig,
//! pinned as the release builds' linker, compiles a small program for arm64 and x86_64 macOS
//! (it signs arm64 ad hoc, as it does the relay), the two are joined into universal2 files laid
//! out as `lipo` and as cargo-zigbuild do, and each must pass; then one mutation per rule — the
//! signature's `codeLimit` a page short, `CS_ADHOC` cleared, the CodeDirectory version below
//! `CS_SUPPORTSEXECSEG`, the arm64 slice at a 4 KiB offset, its `fat_arch.align` wrong, a code
//! byte flipped after signing, an ad-hoc file checked as Developer ID — must be caught by its
//! own message (`infra/check_macho_test.py`). Runs with the pinned dist tools that
//! `infra/test.sh` installs (`FOUNDRY_PYTHON_DIST`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[test]
fn the_macho_check_passes_zig_builds_and_catches_each_broken_signature_and_layout() {
    let Some(summary) = foundry_tests::python::run_check("FOUNDRY_PYTHON_DIST", "check_macho_test.py") else { return };
    let passed: usize = summary.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(passed >= 11 && summary.contains(" 0 failed"), "{summary}");
}
