//! `sonic-probe top` against a real daemon and the stand-ins: the faulty
//! service (a request thread stalled on a lock, issue 1) and its healthy
//! twin (an idle pool blocked in futex all the time, harmlessly), as text
//! (`--once`) and live in a tmux pane (keys sent, the screen captured):
//! the faulty one is first by futex with its findings, its findings page
//! shows the stall's stack, `q` exits 0 and gives the terminal back; and
//! behind TLS and basic auth, with the daemon stopped while it runs.

use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use sonic_probe_tests::{
    privileged, sonic_probe_bin, sonic_sim,
    tls::{bcrypt_hash, Pki},
    unique_name, Daemon, Workload,
};

/// A tmux session of its own (its own server socket), killed at the end.
struct Pane {
    socket: String,
}

impl Pane {
    /// Runs `command` in a new 160x40 pane: a marker line first, its exit
    /// status after it.
    fn start(command: &str, width: u16) -> Pane {
        let socket = unique_name("sptop");
        let script = format!("echo BEFORE-TOP; {command}; echo EXIT=$?; sleep 60");
        let ok = Command::new("tmux")
            .args(["-L", &socket, "new-session", "-d", "-x", &width.to_string(), "-y", "40"])
            .arg(script)
            .status()
            .expect("run tmux (apt-get install tmux)")
            .success();
        assert!(ok, "tmux new-session");
        Pane { socket }
    }

    fn keys(&self, keys: &[&str]) {
        let ok = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys"])
            .args(keys)
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux send-keys {keys:?}");
    }

    fn screen(&self) -> String {
        let o = Command::new("tmux").args(["-L", &self.socket, "capture-pane", "-p"]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The screen with its attributes as escape sequences.
    fn screen_with_attributes(&self) -> String {
        let o = Command::new("tmux").args(["-L", &self.socket, "capture-pane", "-p", "-e"]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Makes the window `width` columns wide, as a terminal resized.
    fn resize(&self, width: u16) {
        let ok = Command::new("tmux")
            .args(["-L", &self.socket, "resize-window", "-x", &width.to_string(), "-y", "40"])
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux resize-window");
    }

    /// The screen once `done` holds of it (10 s at most).
    fn screen_when(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = self.screen();
            if done(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what} never showed:\n{s}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).status();
    }
}

fn stand_in(mode: &str, dir: &std::path::Path, name: &str) -> Workload {
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(sonic_sim()).arg(mode).args(["--requests", "8", "--stall", "1.0", "--wait-go"]);
    cmd.arg("--dir").arg(dir);
    Workload::start_command(cmd, Some(name), &[])
}

/// The colours set in `screen` (its SGR sequences' foreground and
/// background parameters: 30-37, 38;5;N, 38;2;R;G;B, 40-47, 90-97, ...);
/// bold and reverse are no colours.
fn colours(screen: &str) -> Vec<String> {
    let mut out = Vec::new();
    for seq in screen.split("\x1b[").skip(1) {
        let Some(end) = seq.find('m') else { continue };
        let params: Vec<u32> = seq[..end].split(';').filter_map(|p| p.parse().ok()).collect();
        let mut i = 0;
        while i < params.len() {
            match params[i] {
                38 | 48 => {
                    let n = if params.get(i + 1) == Some(&2) { 5 } else { 3 };
                    out.push(format!("{:?}", &params[i..(i + n).min(params.len())]));
                    i += n;
                    continue;
                }
                30..=37 | 40..=47 | 90..=97 | 100..=107 => out.push(params[i].to_string()),
                _ => {}
            }
            i += 1;
        }
    }
    out
}

/// The line of process name `name`'s row: indented by two spaces (after
/// the live view's open/close marker); the first such line, before its
/// thread names' rows.
fn row<'a>(screen: &'a str, name: &str) -> Option<&'a str> {
    screen.lines().find(|l| {
        let l = l.trim_start_matches(['-', '+']);
        l.starts_with("  ") && l.trim_start().starts_with(name)
    })
}

#[test]
fn the_stalled_service_is_first_by_futex_with_its_findings_and_their_stacks() {
    if !privileged("the_stalled_service_is_first_by_futex_with_its_findings_and_their_stacks") {
        return;
    }
    let (fname, hname) = (unique_name("topf"), unique_name("toph"));
    let dir = std::env::temp_dir().join(unique_name("top"));
    let (fdir, hdir): (PathBuf, PathBuf) = (dir.join("f"), dir.join("h"));
    let mut faulty = stand_in("faulty", &fdir, &fname);
    let mut healthy = stand_in("healthy", &hdir, &hname);
    let d = Daemon::start(&["--comm", &fname, "--comm", &hname, "--stall-threshold", "300ms"]);
    let url = format!("http://{}", d.addr);
    faulty.signal();
    healthy.signal();
    // The first stall is over a second after the start.
    std::thread::sleep(Duration::from_millis(1500));

    // --once: two scrapes 2 s apart (a stall of 1 s ends within them).
    let o = Command::new(sonic_probe_bin())
        .args(["top", "--once", "--url", &url, "--interval", "2s", "--sort", "futex"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}{}", String::from_utf8_lossy(&o.stderr));
    assert!(!text.contains('\x1b'), "no escape codes when stdout is no terminal: {text:?}");
    assert!(text.starts_with(&format!("sonic-probe top {url}: ")), "{text}");
    let (f, h) = (row(&text, &fname).expect("the faulty row"), row(&text, &hname).expect("the healthy row"));
    assert!(text.find(f) < text.find(h), "by futex the stalled service is first:\n{text}");
    assert!(f.contains("futex ≤"), "its slowest call is a futex wait: {f}");
    assert!(f.contains("futex ") && f.contains('%'), "its time in futex: {f}");
    assert!(text.contains("Findings:") && text.contains("futex_stall"), "{text}");

    // Live, in a pane: the same order, the findings count, the findings
    // page with the stall's stack, q back and q out.
    let pane = Pane::start(&format!("{} top --url {url} --sort futex", sonic_probe_bin().display()), 160);
    let s = pane.screen_when("both rows, the faulty one with its findings", |s| {
        row(s, &fname).is_some_and(|r| r.contains("futex ≤") && findings_count(r).is_some_and(|n| n >= 1))
            && row(s, &hname).is_some()
            && s.contains("sorted by futex")
    });
    let (f, h) = (row(&s, &fname).unwrap(), row(&s, &hname).unwrap());
    assert!(s.find(f) < s.find(h), "by futex the stalled service is first:\n{s}");
    assert!(s.contains("TIME: C on CPU"), "the bar's legend:\n{s}");
    // The selection starts on the workload; one down is the first process.
    pane.keys(&["Down", "f"]);
    let page = pane.screen_when("the findings page with the stall's stack", |s| {
        s.contains(&format!("Findings of {fname}")) && s.contains("futex_stall") && s.contains("sonic_sim.py")
    });
    assert!(!page.contains(&hname), "only the selected process's findings:\n{page}");
    pane.keys(&["q"]);
    pane.screen_when("the table again", |s| s.contains("WHERE THE TIME GOES"));
    // The bar's letters in their states' colours (NO_COLOR is unset here;
    // behind_tls... checks it set).
    let coloured = pane.screen_with_attributes();
    assert!(colours(&coloured).len() >= 2, "the bar in colours:\n{coloured}");
    // Resized to 80 columns: drawn again at once, the bar left out, no
    // line wider than the terminal; back at 160, the bar is there again.
    pane.resize(80);
    let narrow = pane.screen_when("the table at 80 columns", |s| {
        row(s, &fname).is_some() && !s.contains("TIME: C on CPU")
    });
    assert!(narrow.lines().all(|l| l.chars().count() <= 80), "{narrow}");
    pane.resize(160);
    pane.screen_when("the bar again at 160 columns", |s| {
        row(s, &fname).is_some() && s.contains("TIME: C on CPU")
    });
    pane.keys(&["q"]);
    let after = pane.screen_when("the exit status", |s| s.contains("EXIT="));
    assert!(after.contains("EXIT=0"), "{after}");
    assert!(
        after.contains("BEFORE-TOP") && !after.contains("sorted by futex"),
        "the terminal given back:\n{after}"
    );
    drop(pane);
    // Both ran through (they were let go at the start).
    for w in [&mut faulty, &mut healthy] {
        w.wait_for_line("done");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The FINDINGS cell of a row: the number before the time bar.
fn findings_count(row: &str) -> Option<u64> {
    row.split('[').next()?.split_whitespace().last()?.parse().ok()
}

#[test]
fn behind_tls_and_basic_auth_and_through_the_daemons_stop() {
    if !privileged("behind_tls_and_basic_auth_and_through_the_daemons_stop") {
        return;
    }
    let dir = std::env::temp_dir().join(unique_name("toptls"));
    std::fs::create_dir_all(&dir).unwrap();
    let pki = Pki::new(&dir);
    let web = pki.web_config(
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  alice: '{}'\n",
            bcrypt_hash("s3cret", 10)
        ),
    );
    let d = Daemon::start(&["--web-config", &web]);
    let addr = d.addr.to_string();
    let url = format!("https://{addr}");
    let ca = pki.path("ca.crt");
    let top = |args: &[&str], password: Option<&str>| {
        let mut c = Command::new(sonic_probe_bin());
        c.args(["top", "--once", "--interval", "200ms", "--url", &url, "--ca-file", &ca]).args(args);
        c.env_remove("SONIC_PROBE_PASSWORD");
        if let Some(p) = password {
            c.env("SONIC_PROBE_PASSWORD", p);
        }
        c.output().unwrap()
    };
    let o = top(&["--user", "alice"], Some("s3cret"));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}{}", String::from_utf8_lossy(&o.stderr));
    // The whole host: the daemon itself is a process of it.
    assert!(row(&text, "sonic-probe").is_some(), "{text}");
    let o = top(&[], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("give --user"), "{err}");
    let o = top(&["--user", "alice"], Some("wrong"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("wrong user or password"), "{err}");

    // Live, narrow (80 columns: the bar is left out, nothing wraps), then
    // the daemon goes away.
    let password = dir.join("password");
    std::fs::write(&password, "s3cret\n").unwrap();
    let command = format!(
        "NO_COLOR=1 {} top --url {url} --ca-file {ca} --user alice --password-file {}",
        sonic_probe_bin().display(),
        password.display()
    );
    let pane = Pane::start(&command, 80);
    let s = pane.screen_when("the daemon's own row", |s| row(s, "sonic-probe").is_some());
    assert!(s.lines().all(|l| l.chars().count() <= 80), "{s}");
    assert!(!s.contains("TIME: C on CPU") && !s.contains(" ["), "no room for the bar at 80 columns:\n{s}");
    drop(d);
    let s = pane.screen_when("disconnected", |s| s.contains("disconnected: "));
    assert!(row(&s, "sonic-probe").is_some(), "the last screen stays under the notice:\n{s}");
    // NO_COLOR: the findings count in bold, the selection reversed, no colour.
    let plain = pane.screen_with_attributes();
    assert!(colours(&plain).is_empty(), "NO_COLOR set, colours {:?}:\n{plain}", colours(&plain));
    // The daemon back on the same address: the notice goes, the rows are
    // of the new daemon (its own process, with rates of its scrapes).
    let again = Daemon::start(&["--web-config", &web, "--listen", &addr]);
    let s = pane
        .screen_when("connected again", |s| !s.contains("disconnected") && row(s, "sonic-probe").is_some());
    assert!(s.contains(&format!("top {url}: ")), "{s}");
    drop(again);
    pane.keys(&["q"]);
    let after = pane.screen_when("the exit status", |s| s.contains("EXIT="));
    assert!(after.contains("EXIT=0"), "{after}");
    let _ = std::fs::remove_dir_all(&dir);
}
