//! Whether the computer's network changed: the set of its interfaces' addresses (loopback
//! left out), read every few seconds by the loop. A new Wi-Fi, a VPN coming up, a cable
//! pulled: each changes the set, and a socket opened over the old route is likely dead
//! without having closed, so the loop replaces the doorbell's socket and syncs at once.
//! (macOS and Linux both answer `getifaddrs(3)`; reading it costs microseconds.)
//!
//! Link-local addresses are left out too (`169.254.0.0/16`, `fe80::/10`), and with them the
//! interfaces that carry nothing else: AirDrop's `awdl*` and `llw*`, and the `utun*` tunnels
//! macOS brings up and down for iCloud Private Relay and some VPN clients with only an
//! `fe80::` address. None of them carries the route to the server, and their churn (AirDrop
//! wakes `awdl0` every time a nearby Mac looks) would replace a healthy doorbell socket.
//! A VPN that takes the route gets a routable address, which is a change.

use std::collections::BTreeSet;

/// The addresses seen at the last reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addresses(BTreeSet<String>);

impl Addresses {
    /// Reads them now (an empty set when the system will not say).
    pub fn now() -> Self {
        let Ok(all) = nix::ifaddrs::getifaddrs() else { return Self(BTreeSet::new()) };
        Self::of(all.filter(|i| !i.flags.contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK)).filter_map(|i| {
            let a = i.address?;
            let ip: std::net::IpAddr =
                a.as_sockaddr_in().map(|v4| v4.ip().into()).or_else(|| a.as_sockaddr_in6().map(|v6| v6.ip().into()))?;
            Some((i.interface_name, ip))
        }))
    }

    /// The set for these (interface, address) pairs: the routable ones only.
    fn of(pairs: impl IntoIterator<Item = (String, std::net::IpAddr)>) -> Self {
        Self(pairs.into_iter().filter(|(_, ip)| routable(ip)).map(|(name, ip)| format!("{name} {ip}")).collect())
    }

    /// Whether they differ from the last reading (which this one replaces).
    pub fn changed(&mut self) -> bool {
        self.replace_with(Self::now())
    }

    fn replace_with(&mut self, next: Self) -> bool {
        let changed = *self != next;
        *self = next;
        changed
    }
}

/// Whether `ip` can carry the route to the server: not link-local (`169.254.0.0/16`,
/// `fe80::/10`), which every interface (AirDrop's, tunnels') holds and churns.
fn routable(ip: &std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => !v4.is_link_local(),
        std::net::IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_address_or_a_lost_one_is_a_change_and_the_same_set_is_not() {
        let set = |a: &[&str]| Addresses(a.iter().map(|s| (*s).to_owned()).collect());
        let mut seen = set(&["en0 192.168.1.20"]);
        assert!(!seen.replace_with(set(&["en0 192.168.1.20"])));
        assert!(seen.replace_with(set(&["en0 10.0.0.7"])), "another Wi-Fi");
        assert!(seen.replace_with(set(&["en0 10.0.0.7", "utun3 100.64.0.2"])), "a VPN came up");
        assert!(seen.replace_with(set(&[])), "the cable is out");
        // AirDrop, Private Relay and a VPN client's idle tunnel: link-local only, never a change.
        let of = |a: &[(&str, &str)]| Addresses::of(a.iter().map(|(n, ip)| ((*n).to_owned(), ip.parse().unwrap())));
        let mut seen = of(&[("en0", "192.168.1.20"), ("en0", "fe80::1c2b:3aff:fe4d:5e6f")]);
        let airdrop =
            of(&[("en0", "192.168.1.20"), ("en0", "fe80::1c2b:3aff:fe4d:5e6f"), ("awdl0", "fe80::a8bb:ccff:fe00:1")]);
        assert!(!seen.replace_with(airdrop), "AirDrop woke awdl0");
        let tunnel = of(&[("en0", "192.168.1.20"), ("utun4", "fe80::ce81:b1c:bd2c:69e"), ("en1", "169.254.7.9")]);
        assert!(!seen.replace_with(tunnel), "a tunnel with only a link-local address, a self-assigned v4");
        assert!(seen.replace_with(of(&[("en0", "192.168.1.20"), ("utun4", "100.64.0.2")])), "a VPN took the route");
        for churn in ["fe80::1c2b:3aff:fe4d:5e6f", "fe80::ce81:b1c:bd2c:69e", "169.254.12.34"] {
            assert!(!routable(&churn.parse().unwrap()), "{churn}");
        }
        for real in ["192.168.1.20", "10.0.0.7", "100.64.0.2", "2a01:e0a:1f3:c9d0::12", "fd7a:115c:a1e0::1"] {
            assert!(routable(&real.parse().unwrap()), "{real}");
        }
        // Reading twice on a quiet machine: no change, and loopback is never in it.
        let mut now = Addresses::now();
        assert!(!now.0.iter().any(|a| a.ends_with(" 127.0.0.1") || a.ends_with(" ::1")), "{now:?}");
        assert!(!now.changed(), "{now:?}");
    }
}
