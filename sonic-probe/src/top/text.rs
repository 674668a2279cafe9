//! `top`'s screen as lines of text: what `--once` prints (plain, for a
//! ticket) and what the live view draws. Columns that do not fit the width
//! are left out, least telling first, never wrapped.

use super::view::{Figures, SortKey, View, NR_STATES};
use crate::threads::STATES;

/// One letter per state in the time bar, STATES order.
pub const STATE_LETTERS: [char; NR_STATES] = ['C', 'R', 'F', 'D', 'S', 'P', 'G', 'W', 'Z', 'O'];

/// What each letter stands for, in words (the legend).
pub const STATE_WORDS: [&str; NR_STATES] = [
    "on CPU",
    "waiting for a CPU",
    "futex (lock)",
    "file",
    "socket",
    "pipe",
    "GPU",
    "poll",
    "sleep",
    "other",
];

/// Characters of the time bar.
const BAR: usize = 20;

/// A column: its heading, width, and how its cell is made.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Column {
    Calls,
    Errors,
    Slowest,
    Findings,
    Bar,
    Shares,
}

impl Column {
    fn heading(self) -> &'static str {
        match self {
            Column::Calls => "CALLS/S",
            Column::Errors => "ERR/S",
            Column::Slowest => "SLOWEST P99",
            Column::Findings => "FINDINGS",
            Column::Bar => "TIME",
            Column::Shares => "WHERE THE TIME GOES",
        }
    }

    fn width(self) -> usize {
        match self {
            Column::Calls => 9,
            Column::Errors => 7,
            Column::Slowest => 16,
            Column::Findings => 8,
            Column::Bar => BAR + 2,
            Column::Shares => 30,
        }
    }

    fn right_aligned(self) -> bool {
        matches!(self, Column::Calls | Column::Errors | Column::Findings)
    }
}

/// Every column, in screen order.
const COLUMNS: [Column; 6] =
    [Column::Calls, Column::Errors, Column::Slowest, Column::Findings, Column::Bar, Column::Shares];

/// Left out first when the width is short, in this order.
const DROP_ORDER: [Column; 5] = [Column::Bar, Column::Errors, Column::Slowest, Column::Calls, Column::Shares];

/// The width the name column needs at least.
const NAME_MIN: usize = 20;

/// The columns that fit `width` (None: no limit) beside a name column of
/// at least NAME_MIN.
pub fn columns_for(width: Option<usize>) -> Vec<Column> {
    let mut cols = COLUMNS.to_vec();
    if let Some(w) = width {
        let need = |cols: &[Column]| NAME_MIN + cols.iter().map(|c| c.width() + 1).sum::<usize>();
        for drop in DROP_ORDER {
            if need(&cols) <= w {
                break;
            }
            cols.retain(|&c| c != drop);
        }
    }
    cols
}

/// `1.2k`, `250`, `3.5`, `0`.
fn rate(x: f64) -> String {
    if x >= 10_000.0 {
        format!("{:.1}k", x / 1000.0)
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x > 0.0 {
        format!("{x:.1}")
    } else {
        "0".to_string()
    }
}

/// A duration bound: `537ms`, `4.1µs`, `2.1s`.
pub fn duration(s: f64) -> String {
    if s.is_infinite() {
        ">34s".to_string()
    } else if s >= 1.0 {
        format!("{s:.1}s")
    } else if s >= 1e-3 {
        format!("{:.0}ms", s * 1e3)
    } else {
        format!("{:.0}µs", s * 1e6)
    }
}

/// The time bar: BAR letters, each state's share of them (largest
/// remainders rounded up), "" without thread time.
pub fn bar(f: &Figures) -> String {
    let total = f.thread_seconds();
    if total <= 0.0 {
        return String::new();
    }
    let exact: Vec<f64> = f.states.iter().map(|s| s / total * BAR as f64).collect();
    let mut cells: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let mut order: Vec<usize> = (0..NR_STATES).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let short = BAR - cells.iter().sum::<usize>();
    for &i in order.iter().take(short) {
        cells[i] += 1;
    }
    cells.iter().zip(STATE_LETTERS).flat_map(|(&n, c)| std::iter::repeat_n(c, n)).collect()
}

/// The largest states with their shares: `futex 82% on_cpu 12%` (those of
/// at least 5 %, up to three).
pub fn shares(f: &Figures) -> String {
    let total = f.thread_seconds();
    if total <= 0.0 {
        return String::new();
    }
    let mut by: Vec<(usize, f64)> = f.states.iter().map(|s| s / total).enumerate().collect();
    by.sort_by(|a, b| b.1.total_cmp(&a.1));
    by.iter()
        .filter(|(_, s)| *s >= 0.05)
        .take(3)
        .map(|(i, s)| format!("{} {:.0}%", STATES[*i], s * 100.0))
        .collect::<Vec<_>>()
        .join(" ")
}

fn cell(c: Column, f: &Figures, seconds: f64) -> String {
    let per_s = |x: Option<f64>| x.map(|x| rate(x / seconds)).unwrap_or_default();
    match c {
        Column::Calls => per_s(f.calls),
        Column::Errors => per_s(f.errors),
        Column::Slowest => {
            f.slowest().map(|(call, p)| format!("{call} ≤{}", duration(p))).unwrap_or_default()
        }
        Column::Findings => match f.findings {
            0 => String::new(),
            n => n.to_string(),
        },
        Column::Bar => {
            let b = bar(f);
            if b.is_empty() {
                b
            } else {
                format!("[{b}]")
            }
        }
        Column::Shares => shares(f),
    }
}

/// Pads or cuts `s` to `w` characters.
fn fit(s: &str, w: usize, right: bool) -> String {
    let n = s.chars().count();
    if n > w {
        let mut cut: String = s.chars().take(w.saturating_sub(1)).collect();
        cut.push('…');
        cut
    } else if right {
        format!("{}{s}", " ".repeat(w - n))
    } else {
        format!("{s}{}", " ".repeat(w - n))
    }
}

/// The width of the name column beside `cols`.
fn name_width(cols: &[Column], width: Option<usize>) -> usize {
    let fixed: usize = cols.iter().map(|c| c.width() + 1).sum();
    width.map_or(40, |w| w.saturating_sub(fixed).clamp(NAME_MIN, 48))
}

/// The cells of a row, each padded to its column: the name (indented by
/// depth) first, then one per column.
pub fn cells(
    name: &str,
    depth: usize,
    f: &Figures,
    seconds: f64,
    cols: &[Column],
    width: Option<usize>,
) -> Vec<String> {
    let mut out = vec![fit(&format!("{}{name}", "  ".repeat(depth)), name_width(cols, width), false)];
    for &c in cols {
        out.push(fit(&cell(c, f, seconds), c.width(), c.right_aligned()));
    }
    out
}

/// One line of the table: its cells, a space apart.
pub fn line(
    name: &str,
    depth: usize,
    f: &Figures,
    seconds: f64,
    cols: &[Column],
    width: Option<usize>,
) -> String {
    cells(name, depth, f, seconds, cols, width).join(" ").trim_end().to_string()
}

/// The heading line.
pub fn heading(cols: &[Column], width: Option<usize>) -> String {
    let mut out = fit("WORKLOAD / PROCESS / THREAD", name_width(cols, width), false);
    for &c in cols {
        out.push(' ');
        out.push_str(&fit(c.heading(), c.width(), c.right_aligned()));
    }
    out.trim_end().to_string()
}

/// The legend of the time bar's letters.
pub fn legend() -> String {
    let parts: Vec<String> = STATE_LETTERS.iter().zip(STATE_WORDS).map(|(l, w)| format!("{l} {w}")).collect();
    format!("TIME: {}", parts.join(", "))
}

/// A workload's name as shown: the host's own processes have none.
pub fn workload_name(name: &str) -> &str {
    if name.is_empty() {
        "(host)"
    } else {
        name
    }
}

/// The whole screen as text: a title, the heading, a line per workload,
/// process name and (up to `threads` per process) thread name, the legend.
pub fn screen(view: &View, title: &str, key: SortKey, threads: usize, width: Option<usize>) -> String {
    let cols = columns_for(width);
    let mut out = format!(
        "{title}: {} workloads, rates over {:.1} s, sorted by {}\n",
        view.workloads.len(),
        view.seconds,
        key.name()
    );
    out.push_str(&heading(&cols, width));
    out.push('\n');
    for w in &view.workloads {
        out.push_str(&line(workload_name(&w.name), 0, &w.figures, view.seconds, &cols, width));
        out.push('\n');
        for p in &w.processes {
            out.push_str(&line(&p.comm, 1, &p.figures, view.seconds, &cols, width));
            out.push('\n');
            for t in p.threads.iter().take(threads) {
                out.push_str(&line(&t.name, 2, &t.figures, view.seconds, &cols, width));
                out.push('\n');
            }
            if p.threads.len() > threads {
                out.push_str(&format!("{}(+{} more thread names)\n", "    ", p.threads.len() - threads));
            }
        }
    }
    if cols.contains(&Column::Bar) {
        out.push_str(&legend());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(states: [f64; NR_STATES]) -> Figures {
        let mut f = Figures::default();
        (f.calls, f.errors, f.states, f.findings) = (Some(500.0), Some(2.0), states, 3);
        f
    }

    #[test]
    fn the_bar_gives_each_state_its_share_of_the_letters() {
        let mut s = [0.0; NR_STATES];
        (s[0], s[1], s[2]) = (1.0, 1.0, 2.0);
        assert_eq!(bar(&figures(s)), "CCCCCRRRRRFFFFFFFFFF");
        (s[0], s[1], s[2]) = (1.0, 1.0, 1.0);
        assert_eq!(bar(&figures(s)).len(), BAR, "rounded to exactly the bar's width");
        assert_eq!(bar(&figures([0.0; NR_STATES])), "");
        (s[0], s[1], s[2]) = (0.1, 0.0, 0.9);
        assert_eq!(shares(&figures(s)), "futex 90% on_cpu 10%");
    }

    #[test]
    fn a_narrow_screen_drops_columns_instead_of_wrapping() {
        assert_eq!(columns_for(None).len(), 6);
        let wide = columns_for(Some(200));
        assert_eq!(wide.len(), 6);
        let narrow = columns_for(Some(80));
        assert!(!narrow.contains(&Column::Bar) && narrow.contains(&Column::Shares), "{narrow:?}");
        let f = figures([1.0; NR_STATES]);
        for w in [40, 60, 80, 100, 140] {
            let cols = columns_for(Some(w));
            let l = line("a-very-long-workload-name-that-goes-on.service", 0, &f, 1.0, &cols, Some(w));
            assert!(l.chars().count() <= w.max(NAME_MIN + 31), "{w}: {l}");
            assert!(heading(&cols, Some(w)).chars().count() <= w.max(NAME_MIN + 31), "{w}");
        }
    }

    #[test]
    fn durations_and_rates_read_short() {
        assert_eq!(duration(0.536870912), "537ms");
        assert_eq!(duration(0.000004096), "4µs");
        assert_eq!(duration(2.147483648), "2.1s");
        assert_eq!(duration(f64::INFINITY), ">34s");
        assert_eq!(
            (rate(12_345.0), rate(250.4), rate(3.45), rate(0.0)),
            ("12.3k".into(), "250".into(), "3.5".into(), "0".into())
        );
    }
}
