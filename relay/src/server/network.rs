//! Whether the computer's network changed: the set of its interfaces' addresses (loopback
//! left out), read every few seconds by the loop. A new Wi-Fi, a VPN coming up, a cable
//! pulled: each changes the set, and a socket opened over the old route is likely dead
//! without having closed, so the loop replaces the doorbell's socket and syncs at once.
//! (macOS and Linux both answer `getifaddrs(3)`; reading it costs microseconds.)

use std::collections::BTreeSet;

/// The addresses seen at the last reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addresses(BTreeSet<String>);

impl Addresses {
    /// Reads them now (an empty set when the system will not say).
    pub fn now() -> Self {
        let Ok(all) = nix::ifaddrs::getifaddrs() else { return Self(BTreeSet::new()) };
        Self(
            all.filter(|i| !i.flags.contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK))
                .filter_map(|i| {
                    let a = i.address?;
                    let ip = a
                        .as_sockaddr_in()
                        .map(|v4| v4.ip().to_string())
                        .or_else(|| a.as_sockaddr_in6().map(|v6| v6.ip().to_string()))?;
                    Some(format!("{} {ip}", i.interface_name))
                })
                .collect(),
        )
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
        // Reading twice on a quiet machine: no change, and loopback is never in it.
        let mut now = Addresses::now();
        assert!(!now.0.iter().any(|a| a.ends_with(" 127.0.0.1") || a.ends_with(" ::1")), "{now:?}");
        assert!(!now.changed(), "{now:?}");
    }
}
