//! What a connection asks for: host, port, scheme, and (once resolved) the address and its
//! class.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// How the client asked: `CONNECT host:port` (a tunnel) or an absolute-form `http://` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// An absolute-form HTTP request (`GET http://host/path`).
    Http,
    /// A `CONNECT` tunnel (TLS or anything else passes through untouched).
    Connect,
}

impl Scheme {
    /// Cedar and wire spelling (`resource.scheme`).
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Connect => "connect",
        }
    }
}

/// The class of a resolved address (`resource.ip_class`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpClass {
    /// Everything not below.
    Public,
    /// RFC 1918, carrier-grade NAT (100.64/10), unique-local IPv6 (fc00::/7), multicast,
    /// broadcast and the reserved ranges: other hosts of the operator's networks.
    Private,
    /// 127/8, ::1 and the unspecified addresses (0.0.0.0 and :: reach this host).
    Loopback,
    /// 169.254/16 and fe80::/10: cloud metadata endpoints live here.
    LinkLocal,
}

impl IpClass {
    /// Cedar and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IpClass::Public => "public",
            IpClass::Private => "private",
            IpClass::Loopback => "loopback",
            IpClass::LinkLocal => "link_local",
        }
    }
}

/// Classifies an address. IPv4-mapped and IPv4-compatible IPv6 addresses are classified by the
/// IPv4 address they carry (the kernel connects there).
pub fn classify(ip: IpAddr) -> IpClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => classify_v4(v4),
            None => classify_v6(v6),
        },
    }
}

fn classify_v4(ip: Ipv4Addr) -> IpClass {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() || ip.is_unspecified() || a == 0 {
        IpClass::Loopback
    } else if ip.is_link_local() {
        IpClass::LinkLocal
    } else if ip.is_private()
        || (a == 100 && (64..128).contains(&b))
        || ip.is_multicast()
        || ip.is_broadcast()
        || a >= 240
        || (a == 192 && b == 0)
        || (a == 198 && (18..20).contains(&b))
    {
        IpClass::Private
    } else {
        IpClass::Public
    }
}

fn classify_v6(ip: Ipv6Addr) -> IpClass {
    let first = ip.segments().first().copied().unwrap_or(0);
    if ip.is_loopback() || ip.is_unspecified() {
        IpClass::Loopback
    } else if first & 0xffc0 == 0xfe80 {
        IpClass::LinkLocal
    } else if first & 0xfe00 == 0xfc00 || ip.is_multicast() || first & 0xffc0 == 0xfec0 {
        IpClass::Private
    } else if let Some(v4) = ip.to_ipv4() {
        // IPv4-compatible (::a.b.c.d) and NAT64-free embeddings: judge the IPv4 part.
        classify_v4(v4)
    } else {
        IpClass::Public
    }
}

/// A connection's target before its host name is looked up (the name phase).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name {
    /// The host name as the client named it (lower-cased; never an address literal).
    pub host: String,
    /// The port.
    pub port: u16,
    /// How it was asked for.
    pub scheme: Scheme,
}

/// One connection's target, as decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The host as the client named it (lower-cased; an IPv6 literal without brackets).
    pub host: String,
    /// The port.
    pub port: u16,
    /// How it was asked for.
    pub scheme: Scheme,
    /// The address the host resolved to: the one connected to on an allow.
    pub addr: SocketAddr,
    /// The class of `addr`.
    pub ip_class: IpClass,
}

/// Splits `host:port` (`[v6]:port` for IPv6). `default_port` applies when no port is given
/// (absolute-form HTTP); `None` there makes the port mandatory (`CONNECT`).
pub(crate) fn parse_authority(
    text: &str,
    default_port: Option<u16>,
) -> Result<(String, u16), String> {
    if text.is_empty() {
        return Err("empty host".into());
    }
    if text.contains('@') {
        return Err("user information in the authority is not accepted".into());
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inner, after) = rest
            .split_once(']')
            .ok_or_else(|| "unterminated IPv6 literal".to_string())?;
        inner
            .parse::<Ipv6Addr>()
            .map_err(|_| "invalid IPv6 literal".to_string())?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err("junk after the IPv6 literal".into()),
        };
        (inner.to_string(), port)
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (text.to_string(), None),
        }
    };
    let port = match (port, default_port) {
        (Some(p), _) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| "invalid port".to_string())?,
        (None, Some(d)) => d,
        (None, None) => return Err("a port is required".into()),
    };
    let valid = !host.is_empty()
        && host.len() <= 253
        && (host.parse::<IpAddr>().is_ok()
            || host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'));
    if !valid {
        return Err("invalid host name".into());
    }
    Ok((host.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> IpClass {
        classify(s.parse().unwrap())
    }

    #[test]
    fn addresses_are_classified() {
        assert_eq!(c("127.0.0.1"), IpClass::Loopback);
        assert_eq!(c("127.9.9.9"), IpClass::Loopback);
        assert_eq!(c("0.0.0.0"), IpClass::Loopback);
        assert_eq!(c("::1"), IpClass::Loopback);
        assert_eq!(c("::"), IpClass::Loopback);
        assert_eq!(c("::ffff:127.0.0.1"), IpClass::Loopback);
        assert_eq!(c("169.254.169.254"), IpClass::LinkLocal);
        assert_eq!(c("fe80::1"), IpClass::LinkLocal);
        assert_eq!(c("::ffff:169.254.169.254"), IpClass::LinkLocal);
        assert_eq!(c("10.1.2.3"), IpClass::Private);
        assert_eq!(c("172.16.0.1"), IpClass::Private);
        assert_eq!(c("192.168.1.1"), IpClass::Private);
        assert_eq!(c("100.64.0.1"), IpClass::Private);
        assert_eq!(c("fd00::1"), IpClass::Private);
        assert_eq!(c("255.255.255.255"), IpClass::Private);
        assert_eq!(c("224.0.0.1"), IpClass::Private);
        assert_eq!(c("151.101.1.1"), IpClass::Public);
        assert_eq!(c("2606:4700::1"), IpClass::Public);
        assert_eq!(c("172.32.0.1"), IpClass::Public);
    }

    #[test]
    fn authorities_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_authority("crates.io:443", None).unwrap(),
            ("crates.io".into(), 443)
        );
        assert_eq!(
            parse_authority("Example.ORG", Some(80)).unwrap(),
            ("example.org".into(), 80)
        );
        assert_eq!(
            parse_authority("[::1]:8080", None).unwrap(),
            ("::1".into(), 8080)
        );
        assert!(parse_authority("crates.io", None).is_err());
        assert!(parse_authority("a:0", None).is_err());
        assert!(parse_authority("a:99999", None).is_err());
        assert!(parse_authority("user@host:80", None).is_err());
        assert!(parse_authority("bad host:80", None).is_err());
        assert!(parse_authority("[::1", None).is_err());
        assert!(parse_authority(":80", None).is_err());
    }
}
