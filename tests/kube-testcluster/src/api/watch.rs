//! Watches: events from a resource version on, ended at the server's
//! expiry, 410 Gone from a compacted one.

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};

use crate::selectors::Selector;
use crate::shared::Shared;
use crate::store::Kind;

use super::*;

pub(super) fn watch(shared: &Shared, route: &Route, query: &str) -> Response<Body> {
    let selector = match Selector::parse(
        query_get(query, "labelSelector").as_deref(),
        query_get(query, "fieldSelector").as_deref(),
    ) {
        Ok(s) => s,
        Err(e) => return error_response(&e),
    };
    let since: u64 = query_get(query, "resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = query_get(query, "timeoutSeconds").and_then(|v| v.parse::<u64>().ok());
    let kind = route.kind;
    // A real server compacts its history: a watch from a version it no
    // longer holds gets one ERROR event (410 Gone) and the stream ends, and
    // the client must list again.
    if since > 0 && since < shared.faults.compacted_at() {
        shared.faults.note_watch_gone();
        let gone = json!({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {since} ({})", shared.faults.compacted_at()),
            "reason": "Expired", "code": 410,
        }});
        let body = Bytes::from(format!("{gone}\n"));
        return Response::builder()
            .status(StatusCode::OK)
            .header("Content-Type", "application/json")
            .body(Full::new(body).boxed())
            .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()));
    }
    // And it ends every watch after a while, whatever the client asked.
    let expiry = shared.faults.watch_expiry_now();
    let watch_faults = shared.faults.clone();
    if kind == Kind::Pod {
        shared.faults.note_pod_watch();
    }
    let ns = route.ns.clone();
    let matches = move |object: &Value| {
        ns.as_deref()
            .is_none_or(|n| object["metadata"]["namespace"] == n)
            && selector.matches(object)
    };
    // resourceVersion 0 or unset: current objects first, as ADDED.
    let mut initial = Vec::new();
    let (past, mut rx) = if since == 0 {
        let rv = shared.store.resource_version();
        let (items, _) = shared
            .store
            .list(kind, route.ns.as_deref(), &Selector::default());
        initial.extend(
            items
                .into_iter()
                .filter(|o| matches(o))
                .map(|o| json!({"type": "ADDED", "object": o})),
        );
        shared.store.subscribe(rv)
    } else {
        shared.store.subscribe(since)
    };
    let (tx, out) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let line = |v: &Value| Bytes::from(format!("{v}\n"));
        for event in initial {
            if tx.send(line(&event)).await.is_err() {
                return;
            }
        }
        let mut last = since;
        let forward = |c: &crate::store::Change| -> Option<Value> {
            (c.kind == kind && matches(&c.object))
                .then(|| json!({"type": c.event, "object": c.object}))
        };
        for c in past {
            last = c.rv;
            if let Some(e) = forward(&c) {
                if tx.send(line(&e)).await.is_err() {
                    return;
                }
            }
        }
        let asked = timeout.map(std::time::Duration::from_secs);
        let lasts = match (asked, expiry) {
            (Some(a), Some(e)) => Some(a.min(e)),
            (a, e) => a.or(e),
        };
        let deadline = lasts.map(|d| tokio::time::Instant::now() + d);
        loop {
            let next = async {
                match deadline {
                    Some(at) => {
                        let got = tokio::time::timeout_at(at, rx.recv()).await.ok();
                        if got.is_none() && expiry.is_some() {
                            watch_faults.note_watch_expired();
                        }
                        got
                    }
                    None => Some(rx.recv().await),
                }
            };
            tokio::select! {
                got = next => match got {
                    Some(Ok(c)) if c.rv > last => {
                        last = c.rv;
                        if let Some(e) = forward(&c) {
                            if tx.send(line(&e)).await.is_err() { return; }
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => return,
                    Some(Err(_)) | None => return,
                },
                _ = tx.closed() => return,
            }
        }
    });
    let stream = tokio_stream_from(out).map(|b| Ok::<_, Infallible>(Frame::data(b)));
    Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

pub(super) fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
