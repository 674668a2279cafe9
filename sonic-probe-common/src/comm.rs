//! Process and thread names (comm) as the kernel stores them: fixed-size,
//! NUL-padded byte arrays, to and from text.

use crate::constants::COMM_LEN;

/// A NUL-padded name as text (lossy for non-UTF-8 names).
pub fn comm_str(comm: &[u8]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// A name as the kernel stores it: at most COMM_LEN-1 bytes, NUL padded.
pub fn comm_bytes(name: &str) -> [u8; COMM_LEN] {
    let mut out = [0u8; COMM_LEN];
    let b = name.as_bytes();
    let n = b.len().min(COMM_LEN - 1);
    out[..n].copy_from_slice(&b[..n]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comm_round_trip_and_truncation() {
        assert_eq!(comm_str(&comm_bytes("python3")), "python3");
        let long = comm_bytes("a-very-long-process-name");
        assert_eq!(comm_str(&long).len(), COMM_LEN - 1);
        assert_eq!(long[COMM_LEN - 1], 0);
    }
}
