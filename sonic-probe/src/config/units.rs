//! Value parsers for the units options are written in: durations, sizes,
//! listen addresses and sets of system calls. A flag (clap) and a config-file key (serde) parse their
//! values with the same functions, so they accept the same spellings; this
//! module knows nothing of either. Sizes are written back for people here
//! too ([`human_bytes`]), as findings print them.

use std::{net::SocketAddr, time::Duration};

/// Longest duration any option takes: thresholds and windows are kept in
/// nanoseconds as u64 (584 years); a year is more than any use needs.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// A duration such as `100ms`, `1s`, `2.5s`, `1m30s`, at most a year.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let d = match s.strip_suffix('s').and_then(|n| n.parse::<f64>().ok()) {
        // humantime has no fractions; "2.5s" is common enough to accept.
        Some(secs) if (0.0..1e9).contains(&secs) => Duration::from_secs_f64(secs),
        _ => humantime::parse_duration(s)
            .map_err(|e| format!("'{s}' is not a duration ({e}); use e.g. 500us, 100ms, 1s, 2.5s, 1m"))?,
    };
    if d > MAX_DURATION {
        return Err(format!("'{s}' is longer than a year, the longest duration sonic-probe takes"));
    }
    Ok(d)
}

/// A set of traced system calls as a mask of syscall indices: names from the
/// syscall table, `default` (the rows traced by default) and `all`, separated
/// by commas, e.g. `default,write,ioctl`.
pub fn parse_syscalls(s: &str) -> Result<u32, String> {
    use sonic_probe_common::syscalls;
    let mut mask = 0;
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        mask |= match item {
            "default" => syscalls::default_mask(),
            "all" => syscalls::all_mask(),
            name => match syscalls::by_name(name) {
                Some(row) => 1 << row.index,
                None => {
                    return Err(format!(
                        "'{name}' is not a system call sonic-probe traces (it traces {}, or default, all)",
                        syscalls::names_of(syscalls::all_mask()).join(",")
                    ))
                }
            },
        };
    }
    if mask == 0 {
        return Err(format!("'{s}' names no system call; use e.g. default, or default,write,ioctl"));
    }
    Ok(mask)
}

/// A size in bytes: `4096`, `64KiB`, `16MiB`, `1GiB` (also K/M/G, KB/MB/GB as
/// powers of 1024, as `free` and `ls -h` do).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("'{s}' is not a size; use e.g. 4096, 64KiB, 16MiB, 1GiB");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("'{s}' is too large"))
}

/// An `IP:PORT` socket address.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.trim().parse().map_err(|_| {
        format!("'{s}' is not an address to listen on; use IP:PORT, e.g. 127.0.0.1:9580 or [::]:9580")
    })
}

/// `1.5 GiB`, `64 KiB`, `512 B`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: &[&str] = &["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(65536), "64 KiB");
        assert_eq!(human_bytes(1 << 30), "1 GiB");
        assert_eq!(human_bytes(1_500_000_000), "1.4 GiB");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("2.5s").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_duration("500us").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        for bad in ["", "fast", "-1s", "1 parsec", "1e99s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        // Found by the config fuzzer: huge values wrapped to short windows
        // where they were turned into nanoseconds.
        assert_eq!(parse_duration("365days").unwrap(), MAX_DURATION);
        for huge in ["1000years", "366days", "99999999s"] {
            assert!(parse_duration(huge).unwrap_err().contains("longer than a year"), "{huge}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("16MiB").unwrap(), 16 << 20);
        assert_eq!(parse_size("16M").unwrap(), 16 << 20);
        assert_eq!(parse_size("1 GiB").unwrap(), 1 << 30);
        for bad in ["", "MiB", "-5", "1.5MiB", "12 parsecs", "99999999999999TiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(parse_listen("127.0.0.1:9580").unwrap().port(), 9580);
        assert!(parse_listen("[::]:0").is_ok());
        assert!(parse_listen("localhost").is_err());
        assert!(parse_listen("1.2.3.4:99999").is_err());
    }
}
