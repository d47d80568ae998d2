//! driftless: a GitOps sync agent.
//!
//! One reconcile of one app is a pipeline (ARCHITECTURE.md section 3):
//! [`source`] (fetch, read the tree) → [`render`] (plain files, `kustomize build`, `helm template`;
//! through [`manifest`]: files → objects + diagnostics) →
//! [`diff`] (desired × live × inventory → plan) → [`sync`] (apply the plan to the [`store`]) →
//! [`health`] → [`status`] (conditions, the record). [`reconcile`] runs it whenever something may
//! have changed; [`preview`] plans pull requests the same way without writing. [`object`], [`manifest`], [`diff`], [`health`] and [`yaml`] are pure: no I/O, no
//! async. Effects live at the edges: [`source`] (Git), [`store`] and the [`cli`].

#![warn(missing_docs)]

pub mod cli;
pub mod config;
pub mod diff;
pub mod health;
pub mod ignore;
pub mod manifest;
pub mod metrics;
pub mod object;
pub mod par;
pub mod preview;
pub mod reconcile;
pub mod render;
pub mod replicas;
pub mod report;
pub mod secret;
pub mod server;
pub mod source;
pub mod status;
pub mod store;
pub mod sync;
pub mod window;
pub mod yaml;
