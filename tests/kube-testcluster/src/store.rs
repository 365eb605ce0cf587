//! Objects, resource versions and the change log watches are served from.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::sync::broadcast;

use crate::selectors::Selector;
use crate::status::ApiError;

pub use crate::kind::Kind;

/// One change, as a watch streams it.
#[derive(Debug, Clone)]
pub struct Change {
    /// What changed.
    pub kind: Kind,
    /// The resource version of the change.
    pub rv: u64,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub event: &'static str,
    /// The object after the change (before, for `DELETED`).
    pub object: Value,
}

type Key = (Kind, String, String);

struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: Vec<Arc<Change>>,
}

/// All objects of the cluster.
pub struct Store {
    inner: Mutex<Inner>,
    changes: broadcast::Sender<Arc<Change>>,
    /// Per namespace, the Pod Security level its label enforces.
    pod_security: Mutex<BTreeMap<String, String>>,
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// An RFC 3339 timestamp of now, to the second, as the API server writes them.
pub fn timestamp() -> String {
    now()
}

impl Default for Store {
    fn default() -> Self {
        Store {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: BTreeMap::new(),
                history: Vec::new(),
            }),
            changes: broadcast::channel(4096).0,
            pod_security: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Store {
    /// Enforces Pod Security `level` on the pods of namespace `ns`.
    pub fn enforce_pod_security(&self, ns: &str, level: &str) {
        self.pod_security
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ns.to_string(), level.to_string());
    }

    /// The Pod Security level enforced in `ns`, if any.
    pub fn pod_security(&self, ns: &str) -> Option<String> {
        self.pod_security
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(ns)
            .cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, inner: &mut Inner, kind: Kind, event: &'static str, object: Value) {
        let change = Arc::new(Change {
            kind,
            rv: inner.rv,
            event,
            object,
        });
        inner.history.push(change.clone());
        let _ = self.changes.send(change);
    }

    /// Creates an object; 409 if its name is taken. Fills in uid,
    /// resourceVersion, creationTimestamp, namespace, kind and apiVersion.
    pub fn create(&self, kind: Kind, ns: &str, mut object: Value) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let key = (kind, ns.to_string(), name.clone());
        if inner.objects.contains_key(&key) {
            return Err(ApiError::already_exists(kind, &name));
        }
        inner.rv += 1;
        let rv = inner.rv;
        object["kind"] = json!(kind.name());
        object["apiVersion"] = json!(kind.api_version());
        let meta = &mut object["metadata"];
        meta["namespace"] = json!(ns);
        meta["uid"] = json!(format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            crate::tls::random_u64() as u32,
            rv as u16,
            rv & 0xfff,
            crate::tls::random_u64() & 0xfff,
            crate::tls::random_u64() & 0xffff_ffff_ffff
        ));
        meta["resourceVersion"] = json!(rv.to_string());
        meta["creationTimestamp"] = json!(now());
        if meta.get("generation").is_none() && kind == Kind::Job {
            meta["generation"] = json!(1);
        }
        inner.objects.insert(key, object.clone());
        self.record(&mut inner, kind, "ADDED", object.clone());
        Ok(object)
    }

    /// One object.
    pub fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .get(&(kind, ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Objects of `kind` in `ns` (all namespaces when `None`) that match,
    /// and the current resource version.
    pub fn list(&self, kind: Kind, ns: Option<&str>, selector: &Selector) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let items = inner
            .objects
            .iter()
            .filter(|((k, n, _), _)| *k == kind && ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v)
            .filter(|v| selector.matches(v))
            .cloned()
            .collect();
        (items, inner.rv)
    }

    /// Changes `f` makes to an object, as one `MODIFIED` change.
    pub fn update(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        f: impl FnOnce(&mut Value),
    ) -> Option<Value> {
        let mut inner = self.lock();
        let key = (kind, ns.to_string(), name.to_string());
        let mut object = inner.objects.get(&key)?.clone();
        f(&mut object);
        inner.rv += 1;
        object["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        inner.objects.insert(key, object.clone());
        self.record(&mut inner, kind, "MODIFIED", object.clone());
        Some(object)
    }

    /// Removes an object, as one `DELETED` change.
    pub fn remove(&self, kind: Kind, ns: &str, name: &str) -> Option<Value> {
        let mut inner = self.lock();
        let mut object = inner
            .objects
            .remove(&(kind, ns.to_string(), name.to_string()))?;
        inner.rv += 1;
        object["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        self.record(&mut inner, kind, "DELETED", object.clone());
        Some(object)
    }

    /// Every object (any kind) owned by the object with this uid.
    pub fn owned_by(&self, uid: &str) -> Vec<(Kind, String, String)> {
        self.lock()
            .objects
            .iter()
            .filter(|(_, v)| {
                v["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Changes after `since` already made, and a receiver for the ones to come.
    pub fn subscribe(&self, since: u64) -> (Vec<Arc<Change>>, broadcast::Receiver<Arc<Change>>) {
        let inner = self.lock();
        let rx = self.changes.subscribe();
        let past = inner
            .history
            .iter()
            .filter(|c| c.rv > since)
            .cloned()
            .collect();
        (past, rx)
    }

    /// The current resource version.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }
}
