//! `cargo run -p sim --profile server -- [--seed N] [--runs N]` (any optimized build): prints
//! every seed table next to the reports' figures. Same seed, same output.

fn main() -> anyhow::Result<()> {
    let mut seed = 42u64;
    let mut runs = 2000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => seed = args.next().and_then(|v| v.parse().ok()).ok_or_else(|| anyhow::anyhow!("--seed N"))?,
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).ok_or_else(|| anyhow::anyhow!("--runs N"))?,
            "-h" | "--help" => {
                println!("usage: sim [--seed N] [--runs N]   (defaults: seed 42, 2000 runs per row)");
                return Ok(());
            }
            other => anyhow::bail!("unexpected argument {other:?} (try --help)"),
        }
    }
    print!("{}", sim::report(seed, runs)?);
    Ok(())
}
