//! # shared — the foundry-connect domain and its stores
//!
//! Everything the Lambda functions, the local server and the relay agree on lives here, once:
//!
//! | module | what it holds |
//! |---|---|
//! | [`clock`] | [`clock::Timestamp`] and the injected [`clock::Clock`] (system or manual) |
//! | [`ids`] | validated ids: UUIDv7 command/task ids, `gs_` session ids, agent ids, keys |
//! | [`errors`] | the exact error strings of the contract and [`errors::InputError`] |
//! | [`limits`] | every bound (100,000-character completions, 2,000-character errors, …) and the time [`limits::Policy`] |
//! | [`runs`] | graph runs: state machine, completions, idempotent queueing, failure classifiers |
//! | [`tasks`] | linked chat tasks: state machine, claims as fencing tokens, submits, artifacts |
//! | [`devices`] | device tokens of desktop relays (random, shown once, kept as sha256) |
//! | [`projects`] | projects, chat links, consent checks at queue time |
//! | [`store`] | capability traits and the DynamoDB and SQLite implementations |
//! | [`tools`] | the nine MCP tools: wire types (the schema), descriptions, handlers |
//! | [`auth`] | bearer tokens: RS256 against a cached JWKS, HS256 in local mode |
//! | [`relay_api`] | the desktop relay's HTTP API (sync, start, control, complete) |
//! | [`owner_api`] | the owner's HTTP API (projects, device tokens) |
//! | [`mcp`] | the MCP endpoint: rmcp (stateless JSON) behind auth, scope and size checks |
//!
//! Stores do one conditional write per state change and hand the old image of a failed
//! write to the pure classifiers in [`runs`] and [`tasks`], so both stores decide outcomes
//! with the same code.

pub mod auth;
pub mod clock;
pub mod devices;
pub mod errors;
pub mod http_json;
pub mod ids;
pub mod limits;
pub mod mcp;
pub mod owner_api;
pub mod projects;
pub mod relay_api;
pub mod runs;
pub mod store;
pub mod tasks;
pub mod tools;
