//! The ignored paths (`--ignore-path` and the defaults) as the detectors
//! match them: on every regular file a whole host opens, every file it
//! closes and every failed call with a path.
//!
//! `glob::Pattern::matches` backtracks through each `*` character by
//! character; with a dozen patterns per path that was the daemon's largest
//! cost on a busy node. Nearly every pattern has no special
//! character but `*` (`/proc/*`, `*.so.*`, `*/pyvenv.cfg`), and such a
//! pattern matches when its literal pieces appear in the path in order, the
//! first at the start and the last at the end: a few `starts_with`,
//! `ends_with` and `find`s. Any other pattern (`?`, `[...]`, `**`) is left
//! to the glob crate. Both match with glob's default options, which the
//! detectors used: case-sensitive, `*` crossing `/`.

/// Compiled path patterns; a path matches when any of them does.
#[derive(Debug, Clone, Default)]
pub struct PathPatterns(Vec<Matcher>);

#[derive(Debug, Clone)]
enum Matcher {
    /// A pattern whose only special character is `*`, split at each `*`
    /// (so at least two pieces: a pattern without `*` is an exact path).
    Stars(Vec<String>),
    /// No `*` at all: the path itself.
    Exact(String),
    /// Anything else, matched by the glob crate.
    Glob(glob::Pattern),
}

impl PathPatterns {
    pub fn new(patterns: &[glob::Pattern]) -> Self {
        PathPatterns(patterns.iter().map(Matcher::new).collect())
    }

    pub fn matches(&self, path: &str) -> bool {
        self.0.iter().any(|m| m.matches(path))
    }
}

impl Matcher {
    fn new(p: &glob::Pattern) -> Self {
        let text = p.as_str();
        if text.contains(['?', '[', ']']) || text.contains("**") {
            Matcher::Glob(p.clone())
        } else if !text.contains('*') {
            Matcher::Exact(text.to_string())
        } else {
            Matcher::Stars(text.split('*').map(str::to_string).collect())
        }
    }

    fn matches(&self, path: &str) -> bool {
        match self {
            Matcher::Glob(p) => p.matches(path),
            Matcher::Exact(e) => path == e,
            Matcher::Stars(pieces) => {
                let (first, last) = (&pieces[0], &pieces[pieces.len() - 1]);
                if path.len() < first.len() + last.len() || !path.starts_with(first.as_str()) {
                    return false;
                }
                let Some(mut rest) = path[first.len()..].strip_suffix(last.as_str()) else { return false };
                // The pieces between two stars, leftmost first: taking the
                // earliest place of each leaves the most room for the next.
                for piece in &pieces[1..pieces.len() - 1] {
                    match rest.find(piece.as_str()) {
                        Some(at) => rest = &rest[at + piece.len()..],
                        None => return false,
                    }
                }
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::DEFAULT_IGNORE_PATHS;

    /// The compiled form answers as glob::Pattern does.
    #[test]
    fn matches_as_the_glob_crate_does() {
        let patterns = DEFAULT_IGNORE_PATHS.iter().copied().chain([
            "/etc/passwd",
            "/a*b*c",
            "*x*x*",
            "*",
            "**",
            "/var/**/log",
            "/tmp/?.txt",
            "/opt/[ab]*",
            "*é*",
            "a*a",
            "",
        ]);
        let paths = [
            "/proc/self/stat",
            "/proc",
            "/sys/fs/cgroup/x",
            "/dev/null",
            "/etc/ld.so.cache",
            "/etc/ld.so.cache2",
            "/usr/lib/libc.so.6",
            "/usr/lib/libz.so",
            "/usr/lib/so.txt",
            "/usr/lib/locale/C.utf8/LC_CTYPE",
            "/usr/lib/python3/pybuilddir.txt",
            "pybuilddir.txt",
            "/x/pyvenv.cfg",
            "/usr/lib/python311._pth",
            "/etc/passwd",
            "/etc/passwd-",
            "/abc",
            "/ac",
            "/a/b/c",
            "/acb",
            "xx",
            "x",
            "/var/log",
            "/var/a/b/log",
            "/tmp/a.txt",
            "/tmp/ab.txt",
            "/opt/b",
            "/opt/c",
            "/home/é/f",
            "a",
            "aa",
            "aba",
            "",
        ];
        for p in patterns {
            let Ok(glob) = glob::Pattern::new(p) else { continue };
            let compiled = PathPatterns::new(std::slice::from_ref(&glob));
            for path in paths {
                assert_eq!(compiled.matches(path), glob.matches(path), "pattern {p:?}, path {path:?}");
            }
        }
    }

    #[test]
    fn any_pattern_matches() {
        let globs: Vec<glob::Pattern> =
            ["/proc/*", "*.so"].iter().map(|p| glob::Pattern::new(p).unwrap()).collect();
        let p = PathPatterns::new(&globs);
        assert!(p.matches("/proc/1/comm") && p.matches("/lib/x.so"));
        assert!(!p.matches("/etc/hosts"));
        assert!(!PathPatterns::default().matches("/proc/1/comm"));
    }
}
