//! driftless: a GitOps sync agent.
//!
//! The pipeline of one reconcile (DESIGN.md section 3):
//! [`source`] → [`manifest`] → [`diff`] → [`sync`] → health → [`reconcile`] status.
//! [`object`], [`manifest`] and [`diff`] are pure: no I/O, no async. Effects live in
//! [`source`] (Git), [`store`] (the target store) and the [`cli`].

pub mod cli;
pub mod config;
pub mod diff;
pub mod health;
pub mod manifest;
pub mod object;
pub mod reconcile;
pub mod source;
pub mod status;
pub mod store;
pub mod sync;
