//! Paths that differ only by a per-request part, as one problem.
//!
//! A service that reads each request's input the same bad way opens a new
//! path every time: `data/req-0/speech.mp3`, `data/req-1/speech.mp3`, ...
//! Listed per file, the one problem reads as many. Here a path is cut into
//! its fixed text and the parts that vary per request: each run of
//! hexadecimal digits and dashes that holds at least [`MIN_HEX_RUN`] of
//! them, a decimal digit among them (a UUID, a hash, a request id written
//! in hex, a date), and in shorter runs each run of decimal digits. Paths whose fixed text is the same have the same
//! [`shape`]; a detector folds the files of one process that share a
//! shape, and shows them as their [`pattern`] (`data/req-*/speech.mp3`):
//! each part that differs between them becomes `*`, a part that is the
//! same in all stays as it is (`.mp3`).

/// The fewest hexadecimal digits (one of them decimal) of a run of them
/// and dashes that is taken whole as a varying part; a shorter one
/// (`cafe01`) only varies by its decimal digits.
pub const MIN_HEX_RUN: usize = 8;

/// Marks a varying part in a [`shape`] (never in a path the kernel gives).
const PART: char = '\0';

/// The parts of `path` that may vary per request, in order, as byte ranges.
fn parts(path: &str) -> Vec<std::ops::Range<usize>> {
    let b = path.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let hex_or_dash = |c: u8| c.is_ascii_hexdigit() || c == b'-';
    while i < b.len() {
        if !b[i].is_ascii_hexdigit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && hex_or_dash(b[i]) {
            i += 1;
        }
        // The dashes at its end are fixed text.
        while b[i - 1] == b'-' {
            i -= 1;
        }
        let run = &b[start..i];
        if run.iter().filter(|c| c.is_ascii_hexdigit()).count() >= MIN_HEX_RUN
            && run.iter().any(u8::is_ascii_digit)
        {
            out.push(start..i);
            continue;
        }
        let mut j = start;
        while j < i {
            if b[j].is_ascii_digit() {
                let s = j;
                while j < i && b[j].is_ascii_digit() {
                    j += 1;
                }
                out.push(s..j);
            } else {
                j += 1;
            }
        }
    }
    out
}

/// `path` with each varying part replaced by one marker: paths with the
/// same shape differ only by those parts.
pub fn shape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut at = 0;
    for r in parts(path) {
        out.push_str(&path[at..r.start]);
        out.push(PART);
        at = r.end;
    }
    out.push_str(&path[at..]);
    out
}

/// The pattern of `paths`, which all have one [`shape`]: a varying part
/// that differs between them is `*`, one that is the same in all is kept.
/// One path is its own pattern.
pub fn pattern<'a>(paths: impl IntoIterator<Item = &'a str>) -> String {
    let mut paths = paths.into_iter();
    let Some(first) = paths.next() else { return String::new() };
    let first_parts = parts(first);
    let mut differs = vec![false; first_parts.len()];
    for p in paths {
        let ps = parts(p);
        debug_assert_eq!(shape(p), shape(first), "one shape");
        for (k, (a, b)) in first_parts.iter().zip(&ps).enumerate() {
            differs[k] |= first[a.clone()] != p[b.clone()];
        }
    }
    let mut out = String::with_capacity(first.len());
    let mut at = 0;
    for (r, star) in first_parts.iter().zip(differs) {
        if star {
            out.push_str(&first[at..r.start]);
            out.push('*');
            at = r.end;
        }
    }
    out.push_str(&first[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_request_parts_vary_the_rest_is_the_shape() {
        let reqs: Vec<String> = (0..12).map(|i| format!("/data/req-{i}/speech.mp3")).collect();
        assert!(reqs.iter().all(|p| shape(p) == shape(&reqs[0])));
        assert_eq!(pattern(reqs.iter().map(String::as_str)), "/data/req-*/speech.mp3");
        // UUIDs and hex ids vary whole; a short hex word only by its digits.
        let a = "/srv/in/3f2a9c1e-77b0-4c1d-9e2f-0a1b2c3d4e5f/cafe01.wav";
        let b = "/srv/in/9d00aa12-1c2b-4d3e-8f90-ab12cd34ef56/cafe02.wav";
        assert_eq!(shape(a), shape(b));
        assert_eq!(pattern([a, b]), "/srv/in/*/cafe*.wav");
        // Several varying parts, only those that differ become stars.
        let d = ["/d/2026-12-07/u7/req-1.wav", "/d/2026-12-07/u7/req-22.wav", "/d/2026-12-08/u7/req-1.wav"];
        assert_eq!(pattern(d), "/d/*/u7/req-*.wav");
        let d = ["/d/2026-12-07/u7/req-1.wav", "/d/2026-12-07/u7/req-22.wav"];
        assert_eq!(pattern(d), "/d/2026-12-07/u7/req-*.wav");
        assert_eq!(pattern(["/one/path3.bin"]), "/one/path3.bin");
    }

    #[test]
    fn different_names_are_different_shapes() {
        for (a, b) in [
            ("/a.wav", "/b.wav"),
            ("/data/req-1/speech.mp3", "/data/req-1/speech.wav"),
            ("/data/req-1/speech.mp3", "/data/run-1/speech.mp3"),
            ("/x/1/y", "/x/1/2/y"),
        ] {
            assert_ne!(shape(a), shape(b), "{a} {b}");
        }
        // Not UTF-8 clean paths' other characters are fixed text.
        assert_eq!(pattern(["/données/é1.txt", "/données/é2.txt"]), "/données/é*.txt");
    }
}
