//! CSI volume snapshots (kubernetes-csi/external-snapshotter, `snapshot.storage.k8s.io`):
//! VolumeSnapshot and VolumeSnapshotContent.
//!
//! Both report `status.readyToUse` (the snapshot can restore a volume) and `status.error`
//! (`{time, message}`, the last error of creating it; the controller retries)
//! (`client/apis/volumesnapshot/v1/types.go` `VolumeSnapshotStatus`,
//! `VolumeSnapshotContentStatus`, `VolumeSnapshotError`).
//!
//! Pure: no I/O.

use super::{status, str_at, true_at, value, verdict, waiting};
use crate::health::Live;
use crate::health::{Assessment, Health};

/// `status.error` set: `Degraded` with its message; `readyToUse: true`: `Healthy`; no status yet,
/// or not ready to use yet: `Progressing`.
pub(super) fn snapshot(obj: &Live) -> Assessment {
    if status(obj).is_none() {
        return waiting("the snapshot controller");
    }
    if value(obj, &["status", "error"]).is_some_and(|e| !e.is_null()) {
        let message = str_at(obj, &["status", "error", "message"]).unwrap_or("no message");
        return verdict(Health::Degraded, format!("status.error: {message}"));
    }
    if true_at(obj, &["status", "readyToUse"]) {
        return verdict(Health::Healthy, "ready to use");
    }
    verdict(Health::Progressing, "not ready to use yet")
}
