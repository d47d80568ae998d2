//! Sealed Secrets (bitnami-labs/sealed-secrets): SealedSecret (`bitnami.com`).
//!
//! The controller decrypts a SealedSecret into a Secret and reports the one condition `Synced`
//! (`pkg/apis/sealedsecrets/v1alpha1/types.go` `SealedSecretSynced`: "the SealedSecret has been
//! decrypted and the Secret has been updated successfully"); `False` carries the error (no key
//! could decrypt it, the Secret exists and is not owned by it).
//!
//! Pure: no I/O.

use super::{conditions, find, generation_lag, say, state, status, verdict, waiting};
use crate::health::Live;
use crate::health::{Assessment, Health};

/// `Synced=False`: `Degraded` (decryption or the Secret's update failed; the controller retries
/// only when the SealedSecret or its keys change); no status or no `Synced` yet, or
/// `status.observedGeneration` behind: `Progressing`; `Synced=True`: `Healthy`.
pub(super) fn sealed_secret(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("the Sealed Secrets controller");
    }
    let conds = conditions(obj);
    let synced = find(&conds, "Synced");
    if let Some(c) = synced
        && state(c) == "False"
    {
        return verdict(Health::Degraded, say(c));
    }
    if let Some(a) = generation_lag(obj) {
        return a;
    }
    match synced {
        Some(c) if state(c) == "True" => verdict(Health::Healthy, say(c)),
        Some(c) => verdict(Health::Progressing, say(c)),
        None => verdict(
            Health::Progressing,
            "waiting for the Sealed Secrets controller to set Synced",
        ),
    }
}
