//! Webhook deliveries as Plane and Gitea send them: the HMAC-SHA256 signature, the headers of a
//! signed delivery, Plane's issue payload, and a world that takes deliveries.

use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::World;

/// The Plane project the webhook worlds map to repo `shop`.
pub const PLANE_PROJECT: &str = "8b2c6a0e-5d1f-4c3b-9a7e-0f1e2d3c4b5a";

/// The hex HMAC-SHA256 of `body` with `secret`, as both services sign.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The headers of a delivery from `source` (`plane` or `gitea`) signed with `secret`: its id,
/// its event and its signature.
pub fn signed_headers(
    source: &str,
    delivery: &str,
    event: &str,
    secret: &str,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let (id, kind, signature) = match source {
        "plane" => ("X-Plane-Delivery", "X-Plane-Event", "X-Plane-Signature"),
        "gitea" => ("X-Gitea-Delivery", "X-Gitea-Event", "X-Gitea-Signature"),
        _ => panic!("no such webhook source `{source}`"),
    };
    vec![
        (id, delivery.to_string()),
        (kind, event.to_string()),
        (signature, sign(secret, body)),
    ]
}

/// Plane's documented issue payload moving issue `seq` of [`PLANE_PROJECT`] to `state` (the
/// state expanded as an object). Like Plane's, each payload carries its own `updated_at`, so two
/// calls never give the same bytes (orch takes the same bytes again for a re-sent delivery).
pub fn plane_issue(seq: u64, state: &str, name: &str, labels: &[&str]) -> Vec<u8> {
    static EDITS: AtomicU64 = AtomicU64::new(0);
    let edit = EDITS.fetch_add(1, Ordering::Relaxed);
    let labels: Vec<Value> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| json!({"id": format!("label-{i}"), "name": l, "color": "#ff0000"}))
        .collect();
    serde_json::to_vec(&json!({
        "event": "issue",
        "action": "updated",
        "webhook_id": "0c5e2a4c-1111-4222-8333-944455556666",
        "workspace_id": "d2d97c94-a6ad-4012-b526-5577c0d7c769",
        "data": {
            "id": format!("1a2b3c4d-0000-4000-8000-{seq:012}"),
            "sequence_id": seq,
            "name": name,
            "project": PLANE_PROJECT,
            "state": {"id": "5e6f", "name": state, "color": "#60646C", "group": "unstarted"},
            "labels": labels,
            "description_stripped": "Customers want to know the shop is up.",
            "priority": "none",
            "updated_at": format!("2026-05-01T10:00:00.{edit:06}Z")
        },
        "activity": {"actor": {"id": "u-1", "display_name": "Ann"}}
    }))
    .unwrap()
}

/// The `tracker` and `forge` blocks of a world taking deliveries signed with the secrets named.
pub fn signed_services(plane_secret_env: &str, gitea_secret_env: &str) -> String {
    format!(
        "tracker:\n  kind: plane\n  webhook_secret_env: {plane_secret_env}\n\
         forge:\n  kind: gitea\n  webhook_secret_env: {gitea_secret_env}\n"
    )
}

/// A world whose repo `shop` is Plane project [`PLANE_PROJECT`] and `team/shop` on the forge,
/// with CI status gating development, and `services` (top-level YAML: the `tracker` and
/// `forge` blocks).
pub fn world(services: &str) -> World {
    let w = World::with_repo_extra(&format!(
        "plane_project: {PLANE_PROJECT}\nforge_repo: team/shop\nci: {{mode: status}}"
    ));
    w.append_config(services);
    w
}
