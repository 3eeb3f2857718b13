//! Running Graphs: the loop that pulls work and what runs it.
//!
//! | module | what |
//! |---|---|
//! | [`agent`] | the loop: outbox first, retried starts, sync per project, then each command; one command's steps (consent re-check, journaled start, supervised run, completion) in its `command` part |
//! | [`executor`] | runs one Graph in its own process group; cancel = SIGTERM, then SIGKILL; its stderr's progress lines go to [`live`] |
//! | [`live`] | one running Graph's newest progress and log tail, forwarded at most every 10 s |
//! | [`ask`] | a running Graph asks a linked chat and waits: the local socket, the run's capability, the journal, the wait |
//!
//! It uses [`crate::server`] to talk to the server and [`crate::machine`] for the disk, the
//! status file and self-update between runs; neither uses it.

pub mod agent;
pub mod ask;
pub mod executor;
pub mod live;
