//! Talking to the server: everything that crosses the network, and nothing else of the relay.
//!
//! | module | what |
//! |---|---|
//! | [`client`] | the relay API client (sync, start, control, complete), the report it sends of itself |
//! | [`doorbell`] | the outbound WebSocket the server rings: `sync` wakes the loop, `control` the running command's check |
//! | [`proxy`] | `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`: one rule for the HTTPS calls and the doorbell (a `CONNECT` tunnel) |
//! | [`network`] | whether the computer's addresses changed (the doorbell is then replaced) |
//! | [`backoff`] | retry delays after a failed pass (exponential, jittered, seedable) |
//!
//! It uses only [`crate::config`] and [`crate::identity`].

pub mod backoff;
pub mod client;
pub mod doorbell;
pub mod network;
pub mod proxy;
pub mod system_proxy;
