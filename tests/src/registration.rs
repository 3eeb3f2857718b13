//! A registration flood, as the cloud shape must survive it: one address floods `/register`,
//! and clients from other addresses keep registering until the hourly limit that everyone
//! shares. (The local server counts every loopback address as one source, this machine, with
//! its own limit; `oauth_local` floods it from there and through a tunnel.)

use std::net::{IpAddr, Ipv4Addr};

use serde_json::{Value, json};

/// A client whose connections come from `127.0.0.<last>` (Linux routes all of 127/8 to
/// loopback, so each is a distinct source address for the server).
pub fn client_from(last: u8) -> reqwest::Client {
    crate::http_builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
        .build()
        .unwrap_or_else(|e| panic!("client from 127.0.0.{last}: {e}"))
}

async fn register(http: &reqwest::Client, url: &str, port: u32) -> (u16, String) {
    // A path of its own: registrations that differ only in a loopback port are one client.
    let body = json!({"redirect_uris": [format!("http://localhost/cb/{port}")]});
    let res = http.post(url).json(&body).send().await.unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = res.status().as_u16();
    let v: Value = res.json().await.unwrap_or(Value::Null);
    (status, v["error_description"].as_str().unwrap_or_default().to_owned())
}

/// Floods `url` from 127.0.0.1 (which already made `already` registrations this hour), then
/// registers from 127.0.0.2, .3, … until the hourly limit. Asserts that the flood is refused by
/// its own address's limit, that the next address's first registration is accepted, and that
/// exactly `per_hour` clients are made this hour. Returns the number it created.
pub async fn flood_then_others(url: &str, per_source: usize, per_hour: usize, already: usize) -> usize {
    assert!(already <= per_source && per_source < per_hour, "the scenario needs already ≤ per_source < per_hour");
    let flooder = client_from(1);
    let mut created = 0;
    let mut port = 41_000;
    for i in 0..per_source + 5 {
        port += 1;
        let (status, why) = register(&flooder, url, port).await;
        if i < per_source - already {
            assert_eq!(status, 201, "registration {i} from the flooding address: {why}");
            created += 1;
        } else {
            assert_eq!(status, 429, "registration {i} from the flooding address");
            assert!(why.contains("from this address"), "refused by the address's own limit: {why}");
        }
    }
    // A legitimate client elsewhere registers while the flood is refused.
    let mut last = 2u8;
    loop {
        let other = client_from(last);
        for _ in 0..per_source {
            port += 1;
            let (status, why) = register(&other, url, port).await;
            if already + created < per_hour {
                assert_eq!(status, 201, "a registration from 127.0.0.{last} during the flood: {why}");
                created += 1;
            } else {
                assert_eq!(status, 429, "past the hourly limit");
                assert!(why.starts_with("too many new clients this hour"), "refused by the hourly limit: {why}");
                return created;
            }
        }
        last += 1;
    }
}
