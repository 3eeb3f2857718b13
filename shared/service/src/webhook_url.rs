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
        // ::ffff:10.0.0.1 is 10.0.0.1.
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
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

fn check_v4(ip: Ipv4Addr) -> Result<(), &'static str> {
    let [a, b, ..] = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(169, 254, 170, 2) {
        return Err("the instance metadata service");
    }
    if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        return Err("a private address");
    }
    if ip.is_link_local() {
        return Err("a link-local address");
    }
    if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || a == 0 || a >= 240 {
        return Err("a reserved address");
    }
    Ok(())
}

fn check_v6(ip: Ipv6Addr) -> Result<(), &'static str> {
    let seg = ip.segments();
    // fd00:ec2::254 is the EC2 metadata service over IPv6.
    if seg == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254] {
        return Err("the instance metadata service");
    }
    if (seg[0] & 0xfe00) == 0xfc00 {
        return Err("a private address");
    }
    if (seg[0] & 0xffc0) == 0xfe80 {
        return Err("a link-local address");
    }
    if ip.is_unspecified() || ip.is_multicast() {
        return Err("a reserved address");
    }
    Ok(())
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

    #[test]
    fn local_also_takes_http_to_loopback() {
        assert!(check("http://127.0.0.1:9000/hook", UrlPolicy::Local).is_ok());
        assert!(check("http://localhost:9000/hook", UrlPolicy::Local).is_ok());
        assert!(check("http://example.com/hook", UrlPolicy::Local).is_err());
        assert!(check("https://192.168.1.5/hook", UrlPolicy::Local).is_err());
    }
}
