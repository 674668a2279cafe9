//! Where messages go: the log (tracing to stderr, with its filter) and the
//! one line an error becomes. Every command uses both, so they sit below all
//! of them.

/// The error and its causes on one line.
pub fn one_line(e: &crate::error::Error) -> String {
    match e {
        // Usage errors quote the user's input, which may hold a newline:
        // show control characters escaped, so the message stays one line.
        crate::error::Error::Usage(m) => m
            .chars()
            .flat_map(|c| if c.is_control() { c.escape_default().collect() } else { vec![c] })
            .collect(),
        crate::error::Error::Runtime(e) => {
            // Some libraries repeat their cause in their own message: keep
            // each piece of text once.
            let mut out = String::new();
            for cause in e.chain().map(|c| c.to_string()) {
                if !out.contains(&cause) {
                    if !out.is_empty() {
                        out.push_str(": ");
                    }
                    out.push_str(&cause);
                }
            }
            out.replace('\n', " ")
        }
    }
}

/// A library error and its causes on one line, each piece of text once.
pub fn causes_line(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out.replace('\n', " ")
}

/// Sets up logging to stderr; a filter that does not parse is a usage error.
pub fn init_logging(filter: &str) -> crate::error::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = match EnvFilter::try_from_default_env() {
        Ok(f) => f,
        Err(_) => EnvFilter::try_new(filter).map_err(|e| {
            crate::error::Error::usage(format!("--log-level {filter}: not a log filter ({e})"))
        })?,
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A log line that cannot be written (stderr closed: a pipe whose
        // reader went away) is lost; by default the subscriber says so on
        // stderr, and that print panics whatever thread logged, e.g. a
        // stack capture's Python reader, in the middle of its read.
        .log_internal_errors(false)
        .try_init()
        .ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_one_line_whatever_the_input() {
        // Found by the config fuzzer: --comm quoted a name with a newline.
        let e = crate::error::Error::usage("--comm a\nb: process names are at most 15 bytes");
        assert_eq!(one_line(&e), "--comm a\\nb: process names are at most 15 bytes");
        let e = crate::error::Error::Runtime(anyhow::anyhow!("verifier log:\n0: r1 = 1").context("load"));
        assert_eq!(one_line(&e), "load: verifier log: 0: r1 = 1");
    }
}
