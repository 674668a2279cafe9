//! `-c`: strace's summary table, from the kernel's exact counts.
//!
//! ```text
//! % time     seconds  usecs/call     calls    errors syscall
//! ------ ----------- ----------- --------- --------- ----------------
//!  52.07    0.001043           1      1005           read
//! ------ ----------- ----------- --------- --------- ----------------
//! 100.00    0.002003           1      1024         2 total
//! ```
//!
//! Times are the calls' wall-clock durations from entry to exit, which is
//! what `strace -c -w` reports (plain `strace -c` reports system CPU time).

/// One syscall's totals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub name: &'static str,
    pub calls: u64,
    pub errors: u64,
    pub total_ns: u64,
}

const RULE: &str = "------ ----------- ----------- --------- --------- ----------------\n";

fn line(pct: f64, ns: u64, calls: u64, errors: u64, name: &str) -> String {
    let usecs = (ns / 1000).checked_div(calls).unwrap_or(0);
    let errors = if errors == 0 { String::new() } else { errors.to_string() };
    format!("{pct:>6.2} {:>11.6} {usecs:>11} {calls:>9} {errors:>9} {name}\n", ns as f64 / 1e9)
}

/// The table, busiest syscall first; syscalls never called are left out.
pub fn render(rows: &[Row]) -> String {
    let mut rows: Vec<&Row> = rows.iter().filter(|r| r.calls > 0).collect();
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(b.name)));
    let total_ns: u64 = rows.iter().map(|r| r.total_ns).sum();
    let pct = |ns: u64| if total_ns == 0 { 0.0 } else { 100.0 * ns as f64 / total_ns as f64 };
    let mut out = String::from("% time     seconds  usecs/call     calls    errors syscall\n");
    out.push_str(RULE);
    for r in &rows {
        out.push_str(&line(pct(r.total_ns), r.total_ns, r.calls, r.errors, r.name));
    }
    out.push_str(RULE);
    let calls = rows.iter().map(|r| r.calls).sum();
    let errors = rows.iter().map(|r| r.errors).sum();
    out.push_str(&line(if rows.is_empty() { 0.0 } else { 100.0 }, total_ns, calls, errors, "total"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_strace() {
        let t = render(&[
            Row { name: "openat", calls: 9, errors: 2, total_ns: 400_000 },
            Row { name: "read", calls: 1005, errors: 0, total_ns: 1_043_000 },
            Row { name: "futex", calls: 0, errors: 0, total_ns: 0 },
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "% time     seconds  usecs/call     calls    errors syscall");
        assert_eq!(lines[2], " 72.28    0.001043           1      1005           read");
        assert_eq!(lines[3], " 27.72    0.000400          44         9         2 openat");
        assert_eq!(lines[5], "100.00    0.001443           1      1014         2 total");
        assert_eq!(lines.len(), 6, "futex was never called");
    }

    #[test]
    fn empty() {
        let t = render(&[]);
        assert!(t.ends_with("  0.00    0.000000           0         0           total\n"), "{t}");
    }
}
