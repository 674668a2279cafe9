//! Socket addresses as a program hands them to the kernel (the bytes of a
//! `struct sockaddr_in`, `sockaddr_in6` or `sockaddr_un` that connect was
//! given), in the words findings use (`10.0.0.5:9000`, `[::1]:9000`,
//! `/run/store.sock`, `@abstract`) and as strace prints them.

use std::{
    fmt,
    net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6},
};

const AF_UNIX: u16 = 1;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// What a socket address names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SockAddr {
    Inet(SocketAddrV4),
    Inet6(SocketAddrV6),
    /// A Unix socket's path (bytes up to the first NUL).
    Unix(String),
    /// An abstract Unix socket's name (after its leading NUL).
    Abstract(String),
    /// A Unix address without a name (only the family).
    UnnamedUnix,
    /// Another family, or a buffer too short for its family's layout.
    Other {
        family: u16,
        len: usize,
    },
}

impl SockAddr {
    /// Decodes `bytes`: the address as long as the call's length said (or
    /// as much as was read of it).
    pub fn parse(bytes: &[u8]) -> Option<SockAddr> {
        let family = u16::from_ne_bytes(bytes.get(..2)?.try_into().ok()?);
        let port = || u16::from_be_bytes([bytes[2], bytes[3]]);
        Some(match family {
            AF_INET if bytes.len() >= 8 => {
                let ip = Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]);
                SockAddr::Inet(SocketAddrV4::new(ip, port()))
            }
            AF_INET6 if bytes.len() >= 24 => {
                let flow = u32::from_be_bytes(bytes[4..8].try_into().ok()?);
                let ip: [u8; 16] = bytes[8..24].try_into().ok()?;
                let scope =
                    bytes.get(24..28).map_or(0, |b| u32::from_ne_bytes(b.try_into().unwrap_or_default()));
                SockAddr::Inet6(SocketAddrV6::new(Ipv6Addr::from(ip), port(), flow, scope))
            }
            AF_UNIX => match &bytes[2..] {
                [] => SockAddr::UnnamedUnix,
                [0, name @ ..] => SockAddr::Abstract(String::from_utf8_lossy(name).into_owned()),
                path => {
                    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
                    SockAddr::Unix(String::from_utf8_lossy(&path[..end]).into_owned())
                }
            },
            _ => SockAddr::Other { family, len: bytes.len() },
        })
    }

    /// As strace prints the argument.
    pub fn strace(&self) -> String {
        match self {
            SockAddr::Inet(a) => format!(
                "{{sa_family=AF_INET, sin_port=htons({}), sin_addr=inet_addr(\"{}\")}}",
                a.port(),
                a.ip()
            ),
            SockAddr::Inet6(a) => format!(
                "{{sa_family=AF_INET6, sin6_port=htons({}), sin6_flowinfo=htonl({}), \
                 inet_pton(AF_INET6, \"{}\", &sin6_addr), sin6_scope_id={}}}",
                a.port(),
                a.flowinfo(),
                a.ip(),
                a.scope_id()
            ),
            SockAddr::Unix(p) => format!("{{sa_family=AF_UNIX, sun_path={p:?}}}"),
            SockAddr::Abstract(n) => format!("{{sa_family=AF_UNIX, sun_path=@{n:?}}}"),
            SockAddr::UnnamedUnix => "{sa_family=AF_UNIX}".into(),
            SockAddr::Other { family, .. } => format!("{{sa_family={family}}}"),
        }
    }
}

impl fmt::Display for SockAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SockAddr::Inet(a) => write!(f, "{a}"),
            SockAddr::Inet6(a) => write!(f, "[{}]:{}", a.ip(), a.port()),
            SockAddr::Unix(p) => write!(f, "{p}"),
            SockAddr::Abstract(n) => write!(f, "@{n}"),
            SockAddr::UnnamedUnix => write!(f, "an unnamed Unix socket"),
            SockAddr::Other { family, .. } => write!(f, "an address of family {family}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inet(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut b = AF_INET.to_ne_bytes().to_vec();
        b.extend(port.to_be_bytes());
        b.extend(ip);
        b.extend([0; 8]);
        b
    }

    #[test]
    fn ipv4() {
        let a = SockAddr::parse(&inet([10, 0, 0, 5], 9000)).unwrap();
        assert_eq!(a.to_string(), "10.0.0.5:9000");
        assert_eq!(a.strace(), "{sa_family=AF_INET, sin_port=htons(9000), sin_addr=inet_addr(\"10.0.0.5\")}");
    }

    #[test]
    fn ipv6() {
        let mut b = AF_INET6.to_ne_bytes().to_vec();
        b.extend(443u16.to_be_bytes());
        b.extend(0u32.to_be_bytes());
        b.extend(Ipv6Addr::LOCALHOST.octets());
        b.extend(0u32.to_ne_bytes());
        let a = SockAddr::parse(&b).unwrap();
        assert_eq!(a.to_string(), "[::1]:443");
        assert_eq!(
            a.strace(),
            "{sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), \
             inet_pton(AF_INET6, \"::1\", &sin6_addr), sin6_scope_id=0}"
        );
    }

    #[test]
    fn unix_paths_abstract_and_unnamed() {
        let mut b = AF_UNIX.to_ne_bytes().to_vec();
        b.extend(b"/run/store.sock\0\0\0");
        let a = SockAddr::parse(&b).unwrap();
        assert_eq!(a.to_string(), "/run/store.sock");
        assert_eq!(a.strace(), "{sa_family=AF_UNIX, sun_path=\"/run/store.sock\"}");
        let mut b = AF_UNIX.to_ne_bytes().to_vec();
        b.extend(b"\0store");
        assert_eq!(SockAddr::parse(&b).unwrap().to_string(), "@store");
        assert_eq!(SockAddr::parse(&AF_UNIX.to_ne_bytes()), Some(SockAddr::UnnamedUnix));
    }

    #[test]
    fn short_or_unknown_buffers_say_what_they_are() {
        assert_eq!(SockAddr::parse(&[2]), None);
        assert_eq!(
            SockAddr::parse(&inet([1, 2, 3, 4], 1)[..6]),
            Some(SockAddr::Other { family: AF_INET, len: 6 })
        );
        let a = SockAddr::parse(&[17, 0, 1, 2]).unwrap();
        assert_eq!(a.to_string(), "an address of family 17");
    }
}
