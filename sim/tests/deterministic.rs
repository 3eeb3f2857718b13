//! The simulation is deterministic: the same seed prints the same report, byte for byte; a
//! different seed prints a different one (so the output does depend on the seed).

#![allow(clippy::unwrap_used, missing_docs)]

#[test]
fn the_same_seed_gives_the_same_report_byte_for_byte() {
    let a = sim::report(7, 12).unwrap();
    let b = sim::report(7, 12).unwrap();
    assert_eq!(a, b, "two runs with seed 7 differ");
    let c = sim::report(8, 12).unwrap();
    assert_ne!(a, c, "the seed does not reach the output");
    // Every seed table is there, each with the report's figure beside the product's.
    for table in [
        "pickup wait",
        "agent polling",
        "cancel at a random",
        "desktop offline",
        "lease takeover",
        "claim race",
        "polling 10,000 tasks",
        "bytes of list_linked_chat_tasks",
    ] {
        assert!(a.contains(table), "missing table {table:?}:\n{a}");
    }
    assert!(a.matches("report:").count() >= 9);
    // The agent that fanned out five runs: following check_after_s it checks each once, and
    // sees each result within two seconds of its end, with one slot (the hints count its own
    // runs ahead) and with five (they count the desktop's slots). Without the backlog the
    // one-slot row reads [1 2 3 4 4]; without the slots the five-slot row sees results late.
    for slots in ["1 slot,", "5 slots,"] {
        let line = a
            .lines()
            .find(|l| l.contains("(a session with history)") && l.contains(slots))
            .unwrap_or_else(|| panic!("no fan-out row for {slots}:\n{a}"));
        let calls = line.split("status calls per run [").nth(1).and_then(|r| r.split(']').next()).unwrap();
        assert_eq!(calls, "1 1 1 1 1", "{line}");
        // "Each within two seconds": the slowest one, not the mean.
        let seen: f64 = line
            .split("finished mean ")
            .nth(1)
            .and_then(|r| r.split(", max ").nth(1))
            .and_then(|r| r.split(' ').next())
            .unwrap()
            .parse()
            .unwrap();
        assert!(seen <= 2.0, "{line}");
    }
}

/// `docs/sim-seed42.txt` is this build's report for seed 42 with 2,000 runs per row (the
/// README's "Measure it" command), checked outside the test command (docs/results.md's opening table of
/// checks): results.md's simulation tables, held to that file by
/// `pictures::the_simulation_tables_in_the_docs_are_its_report_file`, are then this code's figures, not
/// an older build's. On a difference, the fresh report is written to the temporary folder
/// (`sim-seed42.fresh.txt`) and the first differing line named (regenerate the file with
/// `cargo run -p sim --profile server -- --seed 42 --runs 2000 > docs/sim-seed42.txt`).
#[test]
#[ignore = "five minutes in a debug build: cargo test -p sim --profile server --test deterministic -- --ignored"]
fn the_kept_seed_42_report_is_this_builds() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/sim-seed42.txt");
    let kept = std::fs::read_to_string(path).unwrap();
    let now = sim::report(42, 2000).unwrap();
    if kept != now {
        let fresh = std::env::temp_dir().join("sim-seed42.fresh.txt");
        std::fs::write(&fresh, &now).unwrap();
        let first = kept.lines().zip(now.lines()).find(|(a, b)| a != b);
        panic!(
            "docs/sim-seed42.txt is not this build's report (fresh one: {}); first difference: {first:?}",
            fresh.display()
        );
    }
}
