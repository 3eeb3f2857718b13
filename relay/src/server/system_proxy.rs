//! A Mac's system proxy (System Settings > Network > Details > Proxies, or an MDM profile), as
//! `scutil --proxy` prints it, and the proxies the running relay uses now.
//!
//! launchd starts the agent with no proxy variables but the ones `relay install` copied from
//! the installing shell; a laptop installed at the office and opened at home (or the reverse)
//! then uses the wrong one, and an owner whose proxy comes from System Settings or MDM has none.
//! So: **the environment's proxy variables win when they name a proxy; otherwise the system's
//! proxy is used**, read at start and again after every wake or network change and once a
//! minute (`run::agent`), and the HTTPS calls and the doorbell read [`live`] at each
//! connection. A PAC file or automatic discovery (WPAD) is not run (the relay has no
//! JavaScript engine): `relay check` and the log name such a setup and the fix (set
//! `HTTPS_PROXY` in the service).
//!
//! Reading `scutil` is the machine layer's (`machine::system_proxy`); parsing and
//! choosing is here.

use std::sync::RwLock;

use super::proxy::Proxies;

/// What `scutil --proxy` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct System {
    /// The HTTP and HTTPS ("Secure Web Proxy") proxies that are switched on, with the bypass
    /// list (`ExceptionsList`).
    pub proxies: Proxies,
    /// The PAC file's URL, when automatic proxy configuration is on.
    pub pac: Option<String>,
    /// Automatic proxy discovery (WPAD) is on.
    pub discovery: bool,
}

impl System {
    /// A PAC file or discovery decides the proxy, and no plain proxy is set beside it: the
    /// relay connects directly, which such a network usually refuses.
    pub fn pac_only(&self) -> Option<String> {
        if self.proxies.any() {
            return None;
        }
        match (&self.pac, self.discovery) {
            (Some(url), _) => Some(format!("a PAC file ({url})")),
            (None, true) => Some("automatic proxy discovery (WPAD)".to_owned()),
            (None, false) => None,
        }
    }
}

/// Parses `scutil --proxy` (a `<dictionary> { Key : value … }`; arrays nest one level).
pub fn parse_scutil(text: &str) -> System {
    let mut keys = std::collections::HashMap::new();
    let mut exceptions = Vec::new();
    let mut in_exceptions = false;
    for line in text.lines() {
        let line = line.trim();
        if in_exceptions {
            if line == "}" {
                in_exceptions = false;
            } else if let Some((_, v)) = line.split_once(" : ") {
                exceptions.push(v.trim().to_owned());
            }
            continue;
        }
        let Some((k, v)) = line.split_once(" : ") else { continue };
        if k == "ExceptionsList" {
            in_exceptions = v.trim_end().ends_with('{');
            continue;
        }
        keys.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    let on = |k: &str| keys.get(k).is_some_and(|v| v == "1");
    let proxy = |enable: &str, host: &str, port: &str| {
        let host = keys.get(host).filter(|h| on(enable) && !h.is_empty())?;
        Some(match keys.get(port) {
            Some(p) => format!("http://{host}:{p}"),
            None => format!("http://{host}"),
        })
    };
    let http = proxy("HTTPEnable", "HTTPProxy", "HTTPPort");
    let https = proxy("HTTPSEnable", "HTTPSProxy", "HTTPSPort");
    // `*.local` means the domain and its subdomains, as `NO_PROXY`'s `.local` does.
    let no_proxy = exceptions.iter().map(|e| e.trim_start_matches("*.").to_owned()).collect::<Vec<_>>().join(",");
    let proxies = Proxies::from_lookup(&|name| match name {
        "HTTP_PROXY" => http.clone(),
        "HTTPS_PROXY" => https.clone(),
        "NO_PROXY" => Some(no_proxy.clone()),
        _ => None,
    });
    System {
        proxies,
        pac: keys.get("ProxyAutoConfigURLString").filter(|_| on("ProxyAutoConfigEnable")).cloned(),
        discovery: on("ProxyAutoDiscoveryEnable"),
    }
}

/// The proxies to use: the environment's when it names a proxy (or one it cannot use, which is
/// reported); otherwise the system's, with the environment's `NO_PROXY` added to its bypass
/// list.
pub fn effective(env: Proxies, system: Option<&System>) -> Proxies {
    match system {
        Some(s) if !env.any() && env.unsupported.is_empty() => s.proxies.with_bypass(&env),
        _ => env,
    }
}

static LIVE: RwLock<Option<Proxies>> = RwLock::new(None);
/// The system proxy as [`set_live`] last read it.
static SYSTEM: RwLock<Option<System>> = RwLock::new(None);

/// The system proxy as last read ([`set_live`]): `relay check` judges the agent's proxies
/// against it without asking `scutil` again.
pub fn last_system() -> Option<System> {
    SYSTEM.read().ok().and_then(|s| s.clone())
}

/// The proxies the relay uses now: [`effective`] as last [`set_live`], or the environment's
/// before the first.
pub fn live() -> Proxies {
    LIVE.read().ok().and_then(|l| l.clone()).unwrap_or_else(Proxies::from_env)
}

/// Sets [`live`] from the environment and `system`; whether that changed what was used (the
/// first setting changes nothing: before it, the same environment was read).
pub fn set_live(system: Option<&System>) -> bool {
    if let Ok(mut kept) = SYSTEM.write() {
        kept.clone_from(&system.cloned());
    }
    let next = effective(Proxies::from_env(), system);
    let Ok(mut live) = LIVE.write() else { return false };
    let before = live.clone().unwrap_or_else(Proxies::from_env);
    let changed = before != next;
    *live = Some(next);
    changed
}

/// The HTTP client's proxy rule, read again for each new connection: [`Proxies::for_target`]
/// of [`live`].
pub fn for_reqwest() -> reqwest::Proxy {
    reqwest::Proxy::custom(move |url| {
        let live = live();
        let proxy = live.for_target(url.scheme() == "https", url.host_str()?)?;
        reqwest::Url::parse(&proxy.url()).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HTTP: &str = include_str!("../../../tests/fixtures/macos/scutil-proxy-http.txt");
    const PAC: &str = include_str!("../../../tests/fixtures/macos/scutil-proxy-pac.txt");

    /// The real outputs (tests/fixtures/macos/README.md): the HTTP proxy with its exceptions,
    /// and a PAC-only setup, which is named.
    #[test]
    fn scutil_outputs_give_the_proxy_or_name_the_pac_file() {
        let s = parse_scutil(HTTP);
        let p = s.proxies.for_target(false, "example.com").expect("the HTTP proxy");
        assert_eq!((p.host.as_str(), p.port), ("127.0.0.1", 8118));
        assert_eq!(s.proxies.for_target(true, "example.com"), None, "no Secure Web Proxy in this output");
        assert!(s.proxies.bypasses("printer.local") && s.proxies.bypasses("local"), "*.local is bypassed");
        assert_eq!(s.pac_only(), None);
        let s = parse_scutil(PAC);
        assert!(!s.proxies.any());
        assert_eq!(s.pac_only().as_deref(), Some("a PAC file (http://wpad.company.com/wpad.dat)"));
        assert_eq!(parse_scutil("<dictionary> {\n}\n"), System::default());
    }

    /// A switched-off proxy in the output is not used; the Secure Web Proxy is used for TLS.
    #[test]
    fn only_switched_on_proxies_are_used() {
        let text = "<dictionary> {\n  HTTPEnable : 0\n  HTTPPort : 8080\n  HTTPProxy : off.corp\n  HTTPSEnable : 1\n  HTTPSPort : 3128\n  HTTPSProxy : proxy.corp\n  ProxyAutoDiscoveryEnable : 1\n}\n";
        let s = parse_scutil(text);
        assert_eq!(s.proxies.for_target(false, "x.com"), None);
        assert_eq!(s.proxies.for_target(true, "x.com").map(|p| p.url()).as_deref(), Some("http://proxy.corp:3128"));
        assert_eq!(s.pac_only(), None, "a plain proxy beside discovery is used");
        assert_eq!(
            parse_scutil("  ProxyAutoDiscoveryEnable : 1\n").pac_only().as_deref(),
            Some("automatic proxy discovery (WPAD)")
        );
    }

    /// The environment's proxy wins; without one the system's is used, with the environment's
    /// NO_PROXY added.
    #[test]
    fn the_environment_wins_and_the_system_fills_in() {
        let system = parse_scutil(HTTP);
        let env = Proxies::from_pairs(&[("HTTP_PROXY".into(), "http://env.corp:1".into())]);
        assert_eq!(effective(env.clone(), Some(&system)), env);
        let bare = Proxies::from_pairs(&[("NO_PROXY".into(), "intranet.corp".into())]);
        let got = effective(bare, Some(&system));
        assert_eq!(got.for_target(false, "example.com").map(|p| p.port), Some(8118));
        assert!(got.bypasses("wiki.intranet.corp") && got.bypasses("a.local"));
        assert_eq!(effective(Proxies::default(), None), Proxies::default());
    }
}
