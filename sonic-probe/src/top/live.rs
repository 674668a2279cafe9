//! `top`'s live view: the screen of [`super::text`] redrawn every interval
//! in the terminal's alternate screen (ratatui redraws only what changed:
//! no flicker; a resize redraws at the new width, columns that no longer
//! fit left out). A thread of its own reads the daemon, so that keys are
//! answered while a scrape waits; a daemon that goes away shows as
//! "disconnected" over the last screen, tried again every interval.
//!
//! Keys: `q` quits (Esc too), `↑`/`↓` select, `Enter` or `→`/`←` open or
//! close a row (a workload's processes, a process's thread names), `s`
//! cycles the sort key, `/` edits the filter (Enter keeps it, Esc drops
//! it), `f` shows the selected row's findings with their stacks (`q` or
//! Esc back). Colours are off with NO_COLOR set.

use std::{
    collections::HashSet,
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::Context;
use ratatui::{
    crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers},
    layout::{Constraint, Layout},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::Paragraph,
    DefaultTerminal, Frame,
};

use super::{
    text::{self, Column, STATE_LETTERS},
    view::{Figures, SortKey, View},
};
use crate::{client::Endpoint, config::cli::TopArgs, error::Result, findings::Finding};

/// What the reading thread sends after each try.
enum Update {
    Screen(View, Vec<Finding>),
    Disconnected(String),
}

/// Colour of each state's letters in the bar (STATES order).
const STATE_COLORS: [Color; 10] = [
    Color::Green,     // on_cpu
    Color::Red,       // runqueue
    Color::Yellow,    // futex
    Color::Blue,      // file
    Color::Cyan,      // socket
    Color::LightBlue, // pipe
    Color::Magenta,   // gpu
    Color::Gray,      // poll
    Color::DarkGray,  // sleep
    Color::DarkGray,  // other
];

/// A row of the table: where it is in the tree, and its figures.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    /// (workload, process name, thread name) as far as the row goes.
    key: (String, Option<String>, Option<String>),
    name: String,
    depth: usize,
    figures: Figures,
    /// It has rows under it.
    opens: bool,
}

/// The live view's state.
struct App {
    title: String,
    sort: SortKey,
    filter: String,
    /// The filter being typed (`/`), shown instead of the help.
    editing: Option<String>,
    view: Option<View>,
    /// The view's rows as sorted, filtered and opened now: made again when
    /// one of those changes ([`App::rearrange`]), not at every draw.
    rows: Vec<Row>,
    findings: Vec<Finding>,
    disconnected: Option<String>,
    /// Workloads whose processes are hidden; processes whose threads are shown.
    closed: HashSet<String>,
    open: HashSet<(String, String)>,
    selected: Option<(String, Option<String>, Option<String>)>,
    /// The findings page open, and how far it is scrolled.
    findings_page: Option<u16>,
    color: bool,
}

impl App {
    /// Makes the rows again, after an update or a key.
    fn rearrange(&mut self) {
        self.rows = self.arranged_rows();
    }

    fn arranged_rows(&self) -> Vec<Row> {
        let Some(view) = &self.view else { return Vec::new() };
        let view = view.arranged(self.sort, &self.filter);
        let mut rows = Vec::new();
        for w in &view.workloads {
            let shown = !self.closed.contains(&w.name);
            rows.push(Row {
                key: (w.name.clone(), None, None),
                name: text::workload_name(&w.name).to_string(),
                depth: 0,
                figures: w.figures.clone(),
                opens: !w.processes.is_empty(),
            });
            if !shown {
                continue;
            }
            for p in &w.processes {
                let open = self.open.contains(&(w.name.clone(), p.comm.clone()));
                rows.push(Row {
                    key: (w.name.clone(), Some(p.comm.clone()), None),
                    name: p.comm.clone(),
                    depth: 1,
                    figures: p.figures.clone(),
                    opens: !p.threads.is_empty(),
                });
                if open {
                    for t in &p.threads {
                        rows.push(Row {
                            key: (w.name.clone(), Some(p.comm.clone()), Some(t.name.clone())),
                            name: t.name.clone(),
                            depth: 2,
                            figures: t.figures.clone(),
                            opens: false,
                        });
                    }
                }
            }
        }
        rows
    }

    fn selected_index(&self, rows: &[Row]) -> usize {
        self.selected.as_ref().and_then(|k| rows.iter().position(|r| &r.key == k)).unwrap_or(0)
    }

    /// Opens (or with `open` false closes) the selected row.
    fn set_open(&mut self, rows: &[Row], open: bool) {
        let Some(r) = rows.get(self.selected_index(rows)) else { return };
        match &r.key {
            (w, None, _) => {
                if open {
                    self.closed.remove(w);
                } else {
                    self.closed.insert(w.clone());
                }
            }
            (w, Some(c), None) => {
                let k = (w.clone(), c.clone());
                if open {
                    self.open.insert(k);
                } else if !self.open.remove(&k) {
                    // Closing a closed process closes its workload.
                    self.closed.insert(w.clone());
                    self.selected = Some((w.clone(), None, None));
                }
            }
            (w, Some(c), Some(_)) if !open => {
                self.open.remove(&(w.clone(), c.clone()));
                self.selected = Some((w.clone(), Some(c.clone()), None));
            }
            _ => {}
        }
    }

    /// The findings of the selected row (a thread's are its process's).
    fn selected_findings(&self, rows: &[Row]) -> Vec<Finding> {
        let Some(r) = rows.get(self.selected_index(rows)) else { return Vec::new() };
        let (w, c, _) = &r.key;
        self.findings
            .iter()
            .filter(|f| f.workload.name == *w && c.as_ref().is_none_or(|c| f.comm == *c))
            .cloned()
            .collect()
    }

    /// Handles a key; false: quit.
    fn key(&mut self, code: KeyCode, modifiers: KeyModifiers) -> bool {
        if code == KeyCode::Char('c') && modifiers.contains(KeyModifiers::CONTROL) {
            return false;
        }
        if let Some(typed) = &mut self.editing {
            match code {
                KeyCode::Enter => {
                    self.filter = std::mem::take(typed);
                    self.editing = None;
                }
                KeyCode::Esc => self.editing = None,
                KeyCode::Backspace => {
                    typed.pop();
                }
                KeyCode::Char(ch) => typed.push(ch),
                _ => {}
            }
            return true;
        }
        if let Some(scroll) = &mut self.findings_page {
            match code {
                KeyCode::Char('q') | KeyCode::Esc | KeyCode::Char('f') => self.findings_page = None,
                KeyCode::Down | KeyCode::Char('j') => *scroll = scroll.saturating_add(1),
                KeyCode::Up | KeyCode::Char('k') => *scroll = scroll.saturating_sub(1),
                KeyCode::PageDown => *scroll = scroll.saturating_add(20),
                KeyCode::PageUp => *scroll = scroll.saturating_sub(20),
                _ => {}
            }
            return true;
        }
        let rows = self.rows.clone();
        let at = self.selected_index(&rows);
        match code {
            KeyCode::Char('q') | KeyCode::Esc => return false,
            KeyCode::Down | KeyCode::Char('j') => {
                if let Some(r) = rows.get((at + 1).min(rows.len().saturating_sub(1))) {
                    self.selected = Some(r.key.clone());
                }
            }
            KeyCode::Up | KeyCode::Char('k') => {
                if let Some(r) = rows.get(at.saturating_sub(1)) {
                    self.selected = Some(r.key.clone());
                }
            }
            KeyCode::Right => self.set_open(&rows, true),
            KeyCode::Left => self.set_open(&rows, false),
            KeyCode::Enter => {
                let open = rows.get(at).is_some_and(|r| match &r.key {
                    (w, None, _) => self.closed.contains(w),
                    (w, Some(c), None) => !self.open.contains(&(w.clone(), c.clone())),
                    _ => false,
                });
                self.set_open(&rows, open);
            }
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Char('/') => self.editing = Some(self.filter.clone()),
            KeyCode::Char('f') => self.findings_page = Some(0),
            _ => {}
        }
        true
    }

    fn style(&self, color: Color) -> Style {
        if self.color {
            Style::default().fg(color)
        } else {
            Style::default()
        }
    }

    /// A table row as spans: the bar's letters in their states' colours.
    fn line(&self, r: &Row, seconds: f64, cols: &[Column], width: usize) -> Line<'static> {
        let cells = text::cells(&r.name, r.depth, &r.figures, seconds, cols, Some(width));
        let mut spans = Vec::new();
        let marker = match (&r.key, r.opens) {
            (_, false) => ' ',
            ((w, None, _), true) if self.closed.contains(w) => '+',
            ((w, Some(c), None), true) if !self.open.contains(&(w.clone(), c.clone())) => '+',
            _ => '-',
        };
        spans.push(Span::raw(format!("{marker}{}", cells[0])));
        for (c, cell) in cols.iter().zip(&cells[1..]) {
            spans.push(Span::raw(" "));
            if *c == Column::Bar {
                for ch in cell.chars() {
                    let color = STATE_LETTERS.iter().position(|&l| l == ch).map(|i| STATE_COLORS[i]);
                    spans.push(match color {
                        Some(col) => Span::styled(ch.to_string(), self.style(col)),
                        None => Span::raw(ch.to_string()),
                    });
                }
            } else if *c == Column::Findings && r.figures.findings > 0 {
                spans.push(Span::styled(cell.clone(), self.style(Color::Red).add_modifier(Modifier::BOLD)));
            } else {
                spans.push(Span::raw(cell.clone()));
            }
        }
        Line::from(spans)
    }

    fn draw(&self, frame: &mut Frame) {
        let area = frame.area();
        let width = usize::from(area.width).saturating_sub(1);
        let [top, body, status, help] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(1),
            Constraint::Length(1),
            Constraint::Length(1),
        ])
        .areas(area);
        let seconds = self.view.as_ref().map_or(1.0, |v| v.seconds);
        let head = match &self.view {
            Some(v) => format!(
                "{}: {} workloads, rates over {seconds:.1} s, sorted by {}{}",
                self.title,
                v.workloads.len(),
                self.sort.name(),
                if self.filter.is_empty() { String::new() } else { format!(", filter {:?}", self.filter) }
            ),
            None => format!("{}: connecting…", self.title),
        };
        frame.render_widget(Paragraph::new(head).style(Style::default().add_modifier(Modifier::BOLD)), top);
        let rows = &self.rows;
        if let Some(scroll) = self.findings_page {
            let found = self.selected_findings(rows);
            let name = rows.get(self.selected_index(rows)).map_or(String::new(), |r| r.name.clone());
            let body_text = format!(
                "Findings of {name} (q: back, ↑/↓: scroll)\n\n{}",
                crate::client::render_with_stacks(&found)
            );
            frame.render_widget(Paragraph::new(body_text).scroll((scroll, 0)), body);
        } else {
            let cols = text::columns_for(Some(width));
            let mut lines = vec![Line::from(format!(" {}", text::heading(&cols, Some(width))))
                .style(Style::default().add_modifier(Modifier::BOLD))];
            let at = self.selected_index(rows);
            let height = usize::from(body.height).saturating_sub(1);
            // Keep the selected row in sight.
            let first = at.saturating_sub(height.saturating_sub(1));
            for (i, r) in rows.iter().enumerate().skip(first).take(height) {
                let mut l = self.line(r, seconds, &cols, width);
                if i == at {
                    l = l.style(Style::default().add_modifier(Modifier::REVERSED));
                }
                lines.push(l);
            }
            if cols.contains(&Column::Bar) && lines.len() < usize::from(body.height) {
                lines.push(Line::from(""));
                lines.push(Line::from(text::legend()));
            }
            frame.render_widget(Paragraph::new(lines), body);
        }
        let status_line = match &self.disconnected {
            Some(e) => Line::from(Span::styled(
                format!("disconnected: {e}; trying again"),
                self.style(Color::Red).add_modifier(Modifier::BOLD),
            )),
            None => Line::from(""),
        };
        frame.render_widget(Paragraph::new(status_line), status);
        let help_text = match &self.editing {
            Some(t) => format!("filter: {t}_  (Enter: keep, Esc: drop)"),
            None => "q quit  ↑↓ select  Enter/→← open/close  s sort  / filter  f findings".to_string(),
        };
        frame.render_widget(Paragraph::new(help_text), help);
    }
}

/// Reads the daemon every `interval` and sends what it got, until the
/// view is gone.
fn reader(endpoint: Endpoint, interval: Duration, tx: mpsc::Sender<Update>) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
    let mut before: Option<super::Scraped> = None;
    loop {
        let started = Instant::now();
        let got = rt.block_on(async {
            let after = super::scrape(&endpoint).await?;
            let found = super::findings(&endpoint).await?;
            anyhow::Ok((after, found))
        });
        let update = match got {
            Ok((after, found)) => {
                let u = before.as_ref().map(|b| Update::Screen(super::view_of(b, &after, &found), found));
                before = Some(after);
                u
            }
            Err(e) => {
                // After a reconnect, rates start again from the next scrape.
                before = None;
                Some(Update::Disconnected(format!("{e:#}")))
            }
        };
        if let Some(u) = update {
            if tx.send(u).is_err() {
                return;
            }
        }
        std::thread::sleep(interval.saturating_sub(started.elapsed()));
    }
}

pub fn run(args: &TopArgs, endpoint: Endpoint) -> Result<()> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return Err(crate::error::Error::usage("top: stdout is not a terminal; use --once for plain text"));
    }
    let (tx, rx) = mpsc::channel();
    let interval = args.interval;
    std::thread::Builder::new()
        .name("top-reader".into())
        .spawn(move || reader(endpoint, interval, tx))
        .context("start the reader thread")?;
    let app = App {
        title: format!("sonic-probe top {}", args.connection.url),
        sort: args.sort,
        filter: args.filter.clone(),
        editing: None,
        view: None,
        rows: Vec::new(),
        findings: Vec::new(),
        disconnected: None,
        closed: HashSet::new(),
        open: HashSet::new(),
        selected: None,
        findings_page: None,
        color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
    };
    // ratatui::init puts the terminal back on a panic too.
    let terminal = ratatui::init();
    let result = event_loop(terminal, app, rx);
    ratatui::restore();
    result
}

fn event_loop(mut terminal: DefaultTerminal, mut app: App, rx: mpsc::Receiver<Update>) -> Result<()> {
    // Drawn when something changed: a key, a resize, an update.
    let mut changed = true;
    loop {
        if changed {
            terminal.draw(|f| app.draw(f)).context("draw the screen")?;
            changed = false;
        }
        if event::poll(Duration::from_millis(100)).context("read the terminal")? {
            match event::read().context("read the terminal")? {
                Event::Key(k) if k.kind == KeyEventKind::Press => {
                    if !app.key(k.code, k.modifiers) {
                        return Ok(());
                    }
                    app.rearrange();
                    changed = true;
                }
                Event::Resize(..) => changed = true,
                _ => {}
            }
        }
        for u in rx.try_iter() {
            match u {
                Update::Screen(view, findings) => {
                    app.view = Some(view);
                    app.findings = findings;
                    app.disconnected = None;
                }
                Update::Disconnected(e) => app.disconnected = Some(e),
            }
            app.rearrange();
            changed = true;
        }
    }
}
