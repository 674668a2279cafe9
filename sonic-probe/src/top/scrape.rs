//! One read of the daemon's /metrics, as samples: what `top` computes its
//! rates from (the difference of two scrapes). Only the text exposition
//! format's sample lines are read (comments and HELP/TYPE skipped); a line
//! that is not one is an error naming it, since the daemon writes them.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};

/// One sample: a family's series name (`_bucket`, `_count` included), its
/// labels, its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// The label's value, "" when absent (as PromQL sees it).
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// Every sample of one scrape.
pub fn parse(text: &str) -> Result<Vec<Sample>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(parse_line(line).map_err(|e| anyhow!("/metrics line {}: {e}: {line}", i + 1))?);
    }
    Ok(out)
}

fn parse_line(line: &str) -> Result<Sample> {
    let name_end = line.find(['{', ' ']).ok_or_else(|| anyhow!("no value"))?;
    let name = line[..name_end].to_string();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(r) = rest.strip_prefix('{') {
        rest = r;
        loop {
            rest = rest.trim_start_matches([',', ' ']);
            if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            }
            let (key, r) = rest.split_once("=\"").ok_or_else(|| anyhow!("a label without a value"))?;
            let mut value = String::new();
            let mut chars = r.char_indices();
            let end = loop {
                match chars.next() {
                    Some((at, '"')) => break at,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c)) => value.push(c),
                        None => bail!("an unfinished escape"),
                    },
                    Some((_, c)) => value.push(c),
                    None => bail!("an unfinished label value"),
                }
            };
            labels.insert(key.trim().to_string(), value);
            rest = &r[end + 1..];
        }
    }
    let value = rest.split_whitespace().next().ok_or_else(|| anyhow!("no value"))?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().map_err(|_| anyhow!("{v:?} is not a number"))?,
    };
    Ok(Sample { name, labels, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_with_labels_escapes_and_infinities() {
        let text = "# HELP x y\n# TYPE x counter\nx 3\n\
                    sonic_probe_syscall_duration_seconds_bucket{syscall=\"futex\",comm=\"py \\\"3\\\"\",workload=\"\",le=\"+Inf\"} 12\n\
                    g{a=\"x,y}\\\\\",b=\"2\"} +Inf\n";
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].name.as_str(), s[0].value), ("x", 3.0));
        assert_eq!(s[1].label("comm"), "py \"3\"");
        assert_eq!(s[1].label("le"), "+Inf");
        assert_eq!(s[1].label("workload"), "");
        assert_eq!(s[1].label("absent"), "");
        assert_eq!(s[1].value, 12.0);
        assert_eq!((s[2].label("a"), s[2].label("b"), s[2].value), ("x,y}\\", "2", f64::INFINITY));
    }

    #[test]
    fn what_is_no_sample_is_an_error_with_its_line() {
        for bad in ["x", "x{a=\"1\" 2", "x{a} 1", "x nope"] {
            let e = parse(&format!("ok 1\n{bad}\n")).unwrap_err().to_string();
            assert!(e.contains("line 2") && e.contains(bad), "{e}");
        }
    }
}
