//! `relay hello`: the built-in hello Graph that `relay session add --hello` shares, so an owner's
//! first run needs no program of their own. It follows the Graph contract (docs/graph.md) like
//! any other Graph: the run's arguments arrive as JSON on stdin, progress goes to stderr as JSON
//! lines, the result is printed on stdout, and a refused argument is a non-zero exit whose
//! message (the end of stderr) becomes the run's error.

use std::io::{Read, Write};
use std::time::Duration;

/// The longest `name` it greets, in characters.
pub const MAX_NAME_CHARS: usize = 100;
/// The most `seconds` it waits before answering.
pub const MAX_SECONDS: u64 = 60;
/// The most of stdin it reads (the arguments are small; the server bounds them anyway).
const MAX_INPUT_BYTES: u64 = 64 * 1024;

/// What it was asked: the name to greet and how long to take.
#[derive(Debug, PartialEq, Eq)]
pub struct Greeting {
    /// Who to greet.
    pub name: String,
    /// Seconds of progress before the answer.
    pub seconds: u64,
}

/// Reads the run's arguments: an object with an optional `name` (1 to 100 characters, default
/// "world") and optional `seconds` (0 to 60, default 0); other fields are ignored. Empty input
/// (a run queued without arguments) is `{}`.
///
/// # Errors
/// The field and the rule it broke.
pub fn parse(input: &str) -> Result<Greeting, String> {
    let value: serde_json::Value = if input.trim().is_empty() {
        serde_json::Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_str(input).map_err(|e| format!("arguments: must be a JSON object ({e})"))?
    };
    let Some(args) = value.as_object() else {
        return Err("arguments: must be a JSON object".into());
    };
    let name = match args.get("name") {
        None | Some(serde_json::Value::Null) => "world".to_owned(),
        Some(serde_json::Value::String(s)) => {
            let n = s.trim().chars().count();
            if n == 0 || n > MAX_NAME_CHARS {
                return Err(format!("name: must be 1 to {MAX_NAME_CHARS} characters (got {n})"));
            }
            s.trim().to_owned()
        }
        Some(_) => return Err("name: must be a string".into()),
    };
    let seconds = match args.get("seconds") {
        None | Some(serde_json::Value::Null) => 0,
        Some(v) => match v.as_u64().filter(|s| *s <= MAX_SECONDS) {
            Some(s) => s,
            None => return Err(format!("seconds: must be a whole number from 0 to {MAX_SECONDS} (got {v})")),
        },
    };
    Ok(Greeting { name, seconds })
}

/// The progress line for second `done` of `g.seconds`.
fn progress_line(g: &Greeting, done: u64) -> String {
    let fraction = if g.seconds == 0 { 1.0 } else { done as f64 / g.seconds as f64 };
    serde_json::json!({"progress": format!("Greeting {} ({done} of {} s)", g.name, g.seconds), "fraction": fraction})
        .to_string()
}

/// The result line.
pub fn result_line(g: &Greeting) -> String {
    serde_json::json!({ "result": format!("Hello, {}!", g.name) }).to_string()
}

/// Runs the hello Graph on this process's stdin, stdout and stderr: exit 0 with the greeting,
/// or 2 with the refusal on stderr.
pub fn run() -> std::process::ExitCode {
    let mut input = String::new();
    if let Err(e) = std::io::stdin().take(MAX_INPUT_BYTES).read_to_string(&mut input) {
        eprintln!("arguments: cannot be read ({e})");
        return std::process::ExitCode::from(2);
    }
    let g = match parse(&input) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut err = std::io::stderr();
    for done in 0..g.seconds {
        let _ = writeln!(err, "{}", progress_line(&g, done));
        std::thread::sleep(Duration::from_secs(1));
    }
    let _ = writeln!(err, "{}", progress_line(&g, g.seconds));
    println!("{}", result_line(&g));
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_greets_the_name_or_the_world() {
        assert_eq!(parse("").unwrap(), Greeting { name: "world".into(), seconds: 0 });
        assert_eq!(parse("{}").unwrap().name, "world");
        assert_eq!(parse(r#"{"name": " Ada ", "other": 1}"#).unwrap().name, "Ada");
        assert_eq!(parse(r#"{"seconds": 60}"#).unwrap().seconds, 60);
        assert_eq!(result_line(&parse(r#"{"name":"Ada"}"#).unwrap()), r#"{"result":"Hello, Ada!"}"#);
        let line = progress_line(&Greeting { name: "Ada".into(), seconds: 4 }, 1);
        assert_eq!(domain::progress::parse_line(&line), Some(("Greeting Ada (1 of 4 s)".into(), Some(0.25))));
    }

    #[test]
    fn bad_arguments_name_the_field_and_the_rule() {
        for (input, error) in [
            ("[1]", "arguments: must be a JSON object"),
            ("{", "arguments: must be a JSON object ("),
            (r#"{"name": 3}"#, "name: must be a string"),
            (r#"{"name": "  "}"#, "name: must be 1 to 100 characters (got 0)"),
            (r#"{"seconds": 61}"#, "seconds: must be a whole number from 0 to 60 (got 61)"),
            (r#"{"seconds": -1}"#, "seconds: must be a whole number from 0 to 60 (got -1)"),
            (r#"{"seconds": 1.5}"#, "seconds: must be a whole number from 0 to 60 (got 1.5)"),
        ] {
            let e = parse(input).unwrap_err();
            assert!(e.starts_with(error), "{input}: {e}");
        }
        let long = format!(r#"{{"name": "{}"}}"#, "x".repeat(101));
        assert_eq!(parse(&long).unwrap_err(), "name: must be 1 to 100 characters (got 101)");
        assert!(parse(&format!(r#"{{"name": "{}"}}"#, "x".repeat(100))).is_ok());
    }
}
