//! The cross-crate tests, one binary: each file beside this one is a module (a test binary each
//! cost a link of the whole stack and its own copies of the generic code, most of the test
//! command's build time). `cargo nextest` still runs every test in its own process; filters
//! name the module, e.g. `./infra/test.sh conformance::dynamodb::` or
//! `cargo test -p foundry-tests --test suite relay_soak -- --nocapture`. `cloud_world` holds no
//! tests: it is the deployed shape's fixture its neighbours share.

mod api_fuzz;
mod attacks;
mod auth_rs256;
mod aws_rules;
mod client_metadata;
mod cloud_connect;
mod cloud_shape;
mod cloud_slots;
mod cloud_world;
mod cold_start;
mod conformance;
mod desktop_asks;
mod events_bench;
mod events_cloud;
mod events_docs;
mod events_local;
mod fleet;
mod graph_contract;
mod host_corpus;
mod hosts_cloud;
mod hosts_pins;
mod hosts_real;
mod hosts_tui;
mod layout;
mod linearizability;
mod macho_check;
mod mcp_apps;
mod mcp_apps_browser;
mod mcp_conformance;
mod mcp_direct;
mod mcp_http;
mod model;
mod oauth_conformance;
mod oauth_local;
mod owner_api_http;
mod owner_budget;
mod owner_pages;
mod panel_browser;
mod pictures;
mod preflight;
mod python_clients;
mod quickstart;
mod readme;
mod reference;
mod relay_api_http;
mod relay_dist_portable;
mod relay_doorbell;
mod relay_e2e;
mod relay_install;
mod relay_soak;
mod release_relay;
mod release_store;
mod releases;
mod rings;
mod scale;
mod template;
mod test_command;
mod tool_permissions;
mod uploads;
