//! Which event-subscription URLs the owner may give (SPEC §8): `https` only in the cloud, never
//! an address inside the deployment's network (loopback, private, link-local, the metadata
//! service), no credentials in the URL. Locally, `http` to a loopback receiver is allowed, so a
//! developer can point a chat link at a receiver on their own machine.
//!
//! The same rules run twice: when the owner saves the URL (an IP literal is checked then), and
//! at delivery time on every address the host name resolves to, so a name that later points
//! inside the network is never called.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use domain::errors::InputError;

/// Longest subscription URL.
pub const MAX_URL_CHARS: usize = 2_000;

/// Where the stack runs, which decides the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlPolicy {
    /// The cloud: `https` only, public addresses only.
    Cloud,
    /// The local server: also `http` to a loopback address (and loopback addresses at all).
    Local,
}

/// Checks a URL the owner wants events delivered to.
///
/// # Errors
/// [`InputError`] on `url`, naming the rule.
pub fn check(raw: &str, policy: UrlPolicy) -> Result<url::Url, InputError> {
    let bad = |rule: &str| InputError::new("url", rule);
    if raw.chars().count() > MAX_URL_CHARS {
        return Err(bad(&format!("must be at most {MAX_URL_CHARS} characters")));
    }
    let url = url::Url::parse(raw).map_err(|e| bad(&format!("must be an absolute URL ({e})")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("must not contain a user name or password"));
    }
    if url.fragment().is_some() {
        return Err(bad("must not contain a #fragment"));
    }
    let host = url.host().ok_or_else(|| bad("must name a host"))?;
    let loopback_host = match &host {
        url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
    };
    match (url.scheme(), policy) {
        ("https", _) => {}
        ("http", UrlPolicy::Local) if loopback_host => {}
        ("http", UrlPolicy::Local) => return Err(bad("must use https (http only to a loopback receiver)")),
        _ => return Err(bad("must use https")),
    }
    let literal = match host {
        url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
        url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
        url::Host::Domain(d) if d.eq_ignore_ascii_case("localhost") && policy == UrlPolicy::Cloud => {
            return Err(bad("must not point at a loopback address"));
        }
        url::Host::Domain(_) => None,
    };
    if let Some(ip) = literal {
        check_address(ip, policy).map_err(|why| bad(&format!("must not point at {why}")))?;
    }
    Ok(url)
}

/// Whether events may be delivered to `ip`: the reason it may not, otherwise `Ok`.
///
/// # Errors
/// A short description of the refused range (`a private address`, …).
pub fn check_address(ip: IpAddr, policy: UrlPolicy) -> Result<(), &'static str> {
    let ip = match ip {
        // An IPv4 address inside an IPv6 one is judged as that IPv4 address: ::ffff:10.0.0.1
        // (mapped), ::10.0.0.1 (the deprecated compatible form), 64:ff9b::a.b.c.d (NAT64).
        IpAddr::V6(v6) => embedded_v4(v6).map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    if ip.is_loopback() {
        return if policy == UrlPolicy::Local { Ok(()) } else { Err("a loopback address") };
    }
    match ip {
        IpAddr::V4(v4) => check_v4(v4),
        IpAddr::V6(v6) => check_v6(v6),
    }
}

/// The IPv4 address an IPv6 address carries, in the forms that reach it: mapped
/// (`::ffff:0:0/96`), compatible (`::/96`, not `::` or `::1`) and the NAT64 well-known prefix
/// (`64:ff9b::/96`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let seg = ip.segments();
    let tail = Ipv4Addr::new((seg[6] >> 8) as u8, seg[6] as u8, (seg[7] >> 8) as u8, seg[7] as u8);
    match seg {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(tail),
        [0, 0, 0, 0, 0, 0, _, _] if !ip.is_unspecified() && !ip.is_loopback() => Some(tail),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        _ => None,
    }
}

/// `ip` is inside `net`/`len`.
fn in_v4(ip: Ipv4Addr, net: [u8; 4], len: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

/// `ip` is inside `net`/`len`.
fn in_v6(ip: Ipv6Addr, net: [u16; 8], len: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
    (u128::from(ip) & mask) == (u128::from(Ipv6Addr::from(net)) & mask)
}

/// The IPv4 special-purpose ranges (IANA's registry) that are not globally reachable, with why.
const V4_REFUSED: &[([u8; 4], u32, &str)] = &[
    ([0, 0, 0, 0], 8, "a reserved address"),
    ([10, 0, 0, 0], 8, "a private address"),
    ([100, 64, 0, 0], 10, "a private address"),
    ([169, 254, 0, 0], 16, "a link-local address"),
    ([172, 16, 0, 0], 12, "a private address"),
    ([192, 0, 0, 0], 24, "a reserved address"),
    ([192, 0, 2, 0], 24, "a documentation address"),
    ([192, 88, 99, 0], 24, "a reserved address"),
    ([192, 168, 0, 0], 16, "a private address"),
    ([198, 18, 0, 0], 15, "a benchmarking address"),
    ([198, 51, 100, 0], 24, "a documentation address"),
    ([203, 0, 113, 0], 24, "a documentation address"),
    ([224, 0, 0, 0], 4, "a multicast address"),
    ([240, 0, 0, 0], 4, "a reserved address"),
];

/// The IPv6 special-purpose ranges (IANA's registry) that are not globally reachable, with why
/// (the forms that carry an IPv4 address were judged as that address before).
const V6_REFUSED: &[([u16; 8], u32, &str)] = &[
    ([0, 0, 0, 0, 0, 0, 0, 0], 128, "a reserved address"),
    ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "a private address"),
    ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "a reserved address"),
    ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, "a reserved address"),
    ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "a documentation address"),
    ([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "a reserved address"),
    ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "a documentation address"),
    ([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, "a reserved address"),
    ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "a private address"),
    ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "a link-local address"),
    ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "a private address"),
    ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "a multicast address"),
];

fn check_v4(ip: Ipv4Addr) -> Result<(), &'static str> {
    if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(169, 254, 170, 2) {
        return Err("the instance metadata service");
    }
    if ip.is_broadcast() {
        return Err("a reserved address");
    }
    match V4_REFUSED.iter().find(|(net, len, _)| in_v4(ip, *net, *len)) {
        Some((_, _, why)) => Err(why),
        None => Ok(()),
    }
}

fn check_v6(ip: Ipv6Addr) -> Result<(), &'static str> {
    // fd00:ec2::254 is the EC2 metadata service over IPv6.
    if ip.segments() == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254] {
        return Err("the instance metadata service");
    }
    match V6_REFUSED.iter().find(|(net, len, _)| in_v6(ip, *net, *len)) {
        Some((_, _, why)) => Err(why),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_takes_public_https_only() {
        assert!(check("https://hooks.example.com/fc?x=1", UrlPolicy::Cloud).is_ok());
        for (url, rule) in [
            ("http://hooks.example.com/", "must use https"),
            ("https://user:pw@hooks.example.com/", "must not contain a user name or password"),
            ("https://10.1.2.3/", "must not point at a private address"),
            ("https://[fd00:ec2::254]/", "must not point at the instance metadata service"),
            ("https://169.254.169.254/latest", "must not point at the instance metadata service"),
            ("https://169.254.1.1/", "must not point at a link-local address"),
            ("https://127.0.0.1/", "must not point at a loopback address"),
            ("https://localhost/", "must not point at a loopback address"),
            ("https://[::ffff:192.168.0.1]/", "must not point at a private address"),
            ("ftp://example.com/", "must use https"),
            ("not a url", "must be an absolute URL"),
        ] {
            let e = check(url, UrlPolicy::Cloud).unwrap_err();
            assert_eq!(e.field, "url");
            assert!(e.rule.starts_with(rule), "{url}: {}", e.rule);
        }
    }

    /// Every IANA special-purpose range that is not globally reachable, v4 and v6, including the
    /// ones that carry an IPv4 address inside an IPv6 one.
    #[test]
    fn every_special_purpose_range_that_is_not_globally_reachable_is_refused() {
        for ip in [
            "0.1.2.3",
            "10.0.0.1",
            "100.64.0.1",
            "127.0.0.2",
            "169.254.169.254",
            "172.16.5.4",
            "192.0.0.8",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.254",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::10.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::10.1.2.3",
            "64:ff9b:1::1",
            "100::1",
            "2001::1",
            "2001:2::1",
            "2001:db8::1",
            "2002:c000:0201::1",
            "3fff::1",
            "5f00::1",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "fec0::1",
            "ff02::1",
        ] {
            let addr: IpAddr = ip.parse().unwrap();
            assert!(check_address(addr, UrlPolicy::Cloud).is_err(), "{ip} was accepted");
        }
        for ip in ["93.184.216.34", "1.1.1.1", "192.0.1.1", "198.20.0.1", "2606:4700::1111", "64:ff9b::5db8:d822"] {
            let addr: IpAddr = ip.parse().unwrap();
            assert_eq!(check_address(addr, UrlPolicy::Cloud), Ok(()), "{ip} was refused");
        }
    }

    #[test]
    fn local_also_takes_http_to_loopback() {
        assert!(check("http://127.0.0.1:9000/hook", UrlPolicy::Local).is_ok());
        assert!(check("http://localhost:9000/hook", UrlPolicy::Local).is_ok());
        assert!(check("http://example.com/hook", UrlPolicy::Local).is_err());
        assert!(check("https://192.168.1.5/hook", UrlPolicy::Local).is_err());
    }
}
