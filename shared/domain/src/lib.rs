//! # domain — what foundry-connect is, without any I/O
//!
//! Everything the Lambda functions, the local server, the stores and the desktop relay agree
//! on lives here, once. Nothing in this crate talks to a network, a disk or AWS: the compiler
//! keeps it that way (its only dependencies are serde, hashing, ids and error derives), so the
//! relay can depend on it alone.
//!
//! | module | what it holds |
//! |---|---|
//! | [`budget`] | each owner's requests a minute on each surface, counted across instances a batch at a time |
//! | [`clients`] | OAuth app clients registered by chats (RFC 7591): their records, names that carry reuse, rate limits (the registry traits are in [`store`]) |
//! | [`clock`] | [`clock::Timestamp`] and the injected [`clock::Clock`] (system or manual) |
//! | [`ids`] | validated ids: UUIDv7 command/task ids, `gs_` session ids, agent ids, keys |
//! | [`errors`] | the exact error strings of the contract, [`errors::InputError`], [`errors::ErrorChain`] |
//! | [`limits`] | every bound (100,000-character completions, 2,000-character errors, …) and the time [`limits::Policy`] |
//! | [`runs`] | graph runs: state machine, completions, idempotent queueing, failure classifiers |
//! | [`tasks`] | linked chat tasks: state machine, claims as fencing tokens, submits, artifacts |
//! | [`dispatch`] | tasks a desktop's Graph hands to a linked chat: consent, the run as capability, bounds, the ring when one ends |
//! | [`projects`] | projects, chat links, consent checks at queue time |
//! | [`events`] | what a state change means outside: `derive_task` / `derive_run` over old and new images, stable ids |
//! | [`devices`] | device tokens of desktop relays (random, shown once, kept as sha256) |
//! | [`fleet`] | what a relay reports of itself on sync (version, platform, host) and the desktop state the owner sees |
//! | [`doorbell`] | the push channel to the relay: rings (`sync`, `control`), which run change rings |
//! | [`progress`] | a running Graph's progress (its stderr JSON lines, bounded) and the relay's slots |
//! | [`pairing`] | pairing a relay with an owner (RFC 8628's shape): user and device codes, the poll classifier |
//! | [`store`] | the store capability traits (`ClaimTasks`, `QueueRuns`, …) and [`store::StoreError`] |
//! | [`relay`] | the relay protocol's wire types, shared by the relay API and the relay |
//!
//! A store changes a run or a task with one conditional write and hands the old image of a
//! failed write to the pure classifiers in [`runs`] and [`tasks`], so both stores decide
//! outcomes with the same code (`docs/architecture.md` names the few changes that are not one
//! conditional write).

pub mod budget;
pub mod clients;
pub mod clock;
pub mod devices;
pub mod dispatch;
pub mod doorbell;
pub mod errors;
pub mod events;
pub mod fleet;
pub mod ids;
pub mod limits;
pub mod pairing;
pub mod progress;
pub mod projects;
pub mod relay;
pub mod runs;
pub mod store;
pub mod tasks;
