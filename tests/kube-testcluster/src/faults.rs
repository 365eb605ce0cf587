//! Faults a test asks for, consulted by the server and the kubelet.

use std::sync::Mutex;
use std::time::Duration;

/// How a pod fails to get its image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImagePullFault {
    /// `ErrImagePull`, then `ImagePullBackOff`.
    BackOff,
    /// `InvalidImageName`.
    InvalidName,
}

/// What can happen to a running pod on request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodFault {
    /// The container is killed and reported `OOMKilled` (exit 137).
    OomKill,
    /// The pod is evicted: phase Failed, reason Evicted.
    Evict,
    /// The pod is deleted, as by `kubectl delete pod`.
    Delete,
}

/// A request fault: answer `status` to the next `times` requests whose
/// method is `method` and whose path contains `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFault {
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// A substring of the path.
    pub path: String,
    /// The status to answer, e.g. 500 or 429.
    pub status: u16,
    /// How many requests to fail.
    pub times: u32,
}

/// An outage of the API server, started by the first request that
/// matches: the listener closes (new connections are refused), every open
/// connection is cut, and after `down` the server listens again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outage {
    /// HTTP method of the request that starts it, e.g. `DELETE`.
    pub method: String,
    /// A substring of that request's path.
    pub path: String,
    /// How long the server stays down.
    pub down: Duration,
    /// Whether the request is carried out first (its answer is what is
    /// lost), rather than never reaching the server.
    pub after: bool,
}

#[derive(Debug, Default)]
struct State {
    outages: Vec<Outage>,
    /// Requests still to come before a numbered outage, its length, and
    /// whether that request is carried out first.
    numbered: Option<(u64, Duration, bool)>,
    pending_for: Option<Duration>,
    unschedulable: bool,
    image_pull: Option<ImagePullFault>,
    requests: Vec<RequestFault>,
    exec_cuts: std::collections::VecDeque<u64>,
    exec_input_cuts: std::collections::VecDeque<u64>,
    idle_ws_timeout: Option<Duration>,
    status_lag: bool,
    watch_expiry: Option<Duration>,
    compacted_at: u64,
    watches_expired: u64,
    watches_gone: u64,
    idle_cuts: u64,
    taints: Vec<crate::scheduler::Taint>,
    rbac_lag: Option<Duration>,
    rbac_back_at: Option<std::time::Instant>,
    rbac_lag_refusals: u64,
}

/// The faults in force; every setter applies to what happens next.
#[derive(Debug)]
pub struct Faults {
    state: Mutex<State>,
    /// How many pod watches have started; a lagging status waits for the
    /// count to move past what it saw before the kill, so a watch that
    /// starts before the kubelet waits is never missed.
    pod_watches: tokio::sync::watch::Sender<u64>,
    /// WebSocket pings received on execs so far.
    exec_pings: tokio::sync::watch::Sender<u64>,
    /// Outages begun so far.
    outages_begun: tokio::sync::watch::Sender<u64>,
    /// Outages ended so far.
    outages_over: tokio::sync::watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            pod_watches: tokio::sync::watch::Sender::new(0),
            exec_pings: tokio::sync::watch::Sender::new(0),
            outages_begun: tokio::sync::watch::Sender::new(0),
            outages_over: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// New pods stay Pending (Unschedulable, as while a node is rented) this long.
    pub fn pending_for(&self, d: Duration) {
        self.lock().pending_for = Some(d);
    }
    /// New pods never schedule.
    pub fn unschedulable(&self, on: bool) {
        self.lock().unschedulable = on;
    }
    /// New pods fail to pull their image.
    pub fn image_pull(&self, fault: Option<ImagePullFault>) {
        self.lock().image_pull = fault;
    }
    /// Fail matching requests.
    pub fn fail_requests(&self, method: &str, path: &str, status: u16, times: u32) {
        self.lock().requests.push(RequestFault {
            method: method.into(),
            path: path.into(),
            status,
            times,
        });
    }
    /// The first request matching `method` and `path` takes the server
    /// down for `down` (see [`Outage`]); that request gets no answer.
    pub fn outage_on(&self, method: &str, path: &str, down: Duration) {
        self.lock().outages.push(Outage {
            method: method.into(),
            path: path.into(),
            down,
            after: false,
        });
    }
    /// As [`Faults::outage_on`], but the request is carried out first:
    /// the object is made or changed, and the answer is lost.
    pub fn outage_after(&self, method: &str, path: &str, down: Duration) {
        self.lock().outages.push(Outage {
            method: method.into(),
            path: path.into(),
            down,
            after: true,
        });
    }
    /// The `n`th request from now (counting from 1) takes the server
    /// down for `down`, whatever it is: unanswered, or carried out with
    /// its answer lost when `after` (as [`Faults::outage_after`]). With
    /// one run's requests counted, a test can go down at each in turn.
    pub fn outage_at_request(&self, n: u64, down: Duration, after: bool) {
        self.lock().numbered = Some((n, down, after));
    }
    /// How many outages have begun: the listener is closed and every
    /// open connection told to close (each closes when its task next
    /// runs; no request is answered meanwhile).
    pub fn outages_begun(&self) -> tokio::sync::watch::Receiver<u64> {
        self.outages_begun.subscribe()
    }
    /// How many outages have ended: the server is back after each.
    pub fn outages_over(&self) -> tokio::sync::watch::Receiver<u64> {
        self.outages_over.subscribe()
    }
    pub(crate) fn take_outage(&self, method: &str, path: &str) -> Option<Outage> {
        let mut s = self.lock();
        if let Some((left, down, after)) = s.numbered {
            if left <= 1 {
                s.numbered = None;
                return Some(Outage {
                    method: method.into(),
                    path: path.into(),
                    down,
                    after,
                });
            }
            s.numbered = Some((left - 1, down, after));
        }
        let i = s
            .outages
            .iter()
            .position(|o| o.method.eq_ignore_ascii_case(method) && path.contains(&o.path))?;
        Some(s.outages.remove(i))
    }
    pub(crate) fn note_outage_begun(&self) {
        self.outages_begun.send_modify(|n| *n += 1);
    }
    /// After each outage, the tenant's requests are refused for `lag`
    /// (a 403 with a real server's words, and access reviews that say
    /// no) while the admin's are served: a restarted API server accepts
    /// connections before its RBAC roles have loaded
    /// (`poststarthook/rbac/bootstrap-roles`).
    pub fn rbac_lag_after_outage(&self, lag: Option<Duration>) {
        self.lock().rbac_lag = lag;
    }
    /// How many of the tenant's requests the RBAC lag refused so far.
    pub fn rbac_lag_refusals(&self) -> u64 {
        self.lock().rbac_lag_refusals
    }
    /// The server is about to listen again: its RBAC lag starts now.
    pub(crate) fn note_restarting(&self) {
        let mut s = self.lock();
        s.rbac_back_at = s.rbac_lag.map(|lag| std::time::Instant::now() + lag);
    }
    /// Whether the restarted server's roles are still loading; counts the
    /// refusal this asks about.
    pub(crate) fn rbac_loading(&self) -> bool {
        let mut s = self.lock();
        let loading = s
            .rbac_back_at
            .is_some_and(|at| std::time::Instant::now() < at);
        if loading {
            s.rbac_lag_refusals += 1;
        }
        loading
    }
    pub(crate) fn note_outage_over(&self) {
        self.outages_over.send_modify(|n| *n += 1);
    }
    /// The next exec that produces output has its stream cut right after
    /// its first byte.
    pub fn cut_next_exec(&self) {
        self.cut_execs_after(&[1]);
    }
    /// Cuts the streams of the next execs whose output reaches these
    /// sizes, one each in turn: the first exec to send `bytes[0]` bytes
    /// of stdout and stderr is cut there, mid-frame if need be (the
    /// connection drops, no status), then the next to send `bytes[1]`. An
    /// exec that ends short of the size leaves it for the next. As a
    /// front or a network that drops a connection: the exec's own process
    /// is killed, as the engine kills it when its client goes away.
    pub fn cut_execs_after(&self, bytes: &[u64]) {
        self.lock().exec_cuts.extend(bytes.iter().copied());
    }
    /// Cuts the connections of the next execs whose stdin reaches these
    /// sizes, one each in turn, as [`Faults::cut_execs_after`] does for
    /// output: a copy in whose stream breaks partway.
    pub fn cut_exec_input_after(&self, bytes: &[u64]) {
        self.lock().exec_input_cuts.extend(bytes.iter().copied());
    }
    /// WebSockets idle for this long are dropped.
    pub fn idle_websocket_timeout(&self, d: Option<Duration>) {
        self.lock().idle_ws_timeout = d;
    }

    /// A killed container's status is reported only once a client watches
    /// pods, as a real kubelet reports it on a later sync: whoever asks at
    /// once sees a pod that still looks healthy.
    pub fn status_lag(&self, on: bool) {
        self.lock().status_lag = on;
    }

    /// Every watch ends after `d` (a real server ends them after its
    /// request timeout), whatever timeout the client asked for.
    pub fn watch_expiry(&self, d: Option<Duration>) {
        self.lock().watch_expiry = d;
    }

    /// The server compacts its history now, at resource version `rv`:
    /// a later watch from an older version gets `410 Gone`.
    pub fn compact_history(&self, rv: u64) {
        self.lock().compacted_at = rv;
    }

    /// How many watches ended at their expiry, and how many were refused
    /// with 410 Gone: proof that a client listed again.
    pub fn watch_endings(&self) -> (u64, u64) {
        let s = self.lock();
        (s.watches_expired, s.watches_gone)
    }

    pub(crate) fn watch_expiry_now(&self) -> Option<Duration> {
        self.lock().watch_expiry
    }
    pub(crate) fn compacted_at(&self) -> u64 {
        self.lock().compacted_at
    }
    pub(crate) fn note_watch_expired(&self) {
        self.lock().watches_expired += 1;
    }
    pub(crate) fn note_watch_gone(&self) {
        self.lock().watches_gone += 1;
    }

    /// Taints the node: pods that do not tolerate `key=value:effect` stay
    /// Pending (for `NoSchedule` and `NoExecute`).
    pub fn taint_node(&self, key: &str, value: &str, effect: &str) {
        self.lock().taints.push(crate::scheduler::Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        });
    }

    pub(crate) fn taints(&self) -> Vec<crate::scheduler::Taint> {
        self.lock().taints.clone()
    }

    /// The pings execs have received so far; `changed()` resolves at the
    /// next one.
    pub fn exec_pings(&self) -> tokio::sync::watch::Receiver<u64> {
        self.exec_pings.subscribe()
    }

    /// How many exec connections were dropped for idleness.
    pub fn idle_cuts(&self) -> u64 {
        self.lock().idle_cuts
    }

    pub(crate) fn note_exec_ping(&self) {
        self.exec_pings.send_modify(|n| *n += 1);
    }
    pub(crate) fn note_idle_cut(&self) {
        self.lock().idle_cuts += 1;
    }

    pub(crate) fn lags_status(&self) -> bool {
        self.lock().status_lag
    }
    pub(crate) fn note_pod_watch(&self) {
        self.pod_watches.send_modify(|n| *n += 1);
    }
    /// A receiver that has seen every pod watch so far; its `changed()`
    /// resolves at the next one.
    pub(crate) fn pod_watches(&self) -> tokio::sync::watch::Receiver<u64> {
        self.pod_watches.subscribe()
    }
    pub(crate) fn scheduling(&self) -> (Option<Duration>, bool, Option<ImagePullFault>) {
        let s = self.lock();
        (s.pending_for, s.unschedulable, s.image_pull)
    }
    pub(crate) fn take_request_fault(&self, method: &str, path: &str) -> Option<u16> {
        let mut s = self.lock();
        let fault = s.requests.iter_mut().find(|f| {
            f.times > 0 && f.method.eq_ignore_ascii_case(method) && path.contains(&f.path)
        })?;
        fault.times -= 1;
        Some(fault.status)
    }
    /// The size at which the next exec cut happens, if one is asked for.
    pub(crate) fn exec_cut(&self) -> Option<u64> {
        self.lock().exec_cuts.front().copied()
    }
    /// The size at which the next cut of an exec's stdin happens.
    pub(crate) fn exec_input_cut(&self) -> Option<u64> {
        self.lock().exec_input_cuts.front().copied()
    }
    /// The stdin cut at the front happened.
    pub(crate) fn exec_input_cut_done(&self) {
        self.lock().exec_input_cuts.pop_front();
    }
    /// The exec cut at the front happened.
    pub(crate) fn exec_cut_done(&self) {
        self.lock().exec_cuts.pop_front();
    }
    pub(crate) fn idle_timeout(&self) -> Option<Duration> {
        self.lock().idle_ws_timeout
    }
}
