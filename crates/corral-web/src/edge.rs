//! The edge's own bounds against clients that hold no key (issue 22, findings 2 and 3): how
//! many connections are open, in total and per client address, how long an unauthenticated
//! route waits for its body, and which peers are proxies whose `X-Forwarded-For` names the
//! client; and it carries the request log's settings ([`crate::request_log`]). A bottom
//! module beside `state`: it imports nothing else from the crate but `request_log`.
//!
//! Connections are counted at accept, before a byte is read: a connection over the
//! per-address cap is closed at once, so a client cannot hold descriptors by opening
//! connections faster than bodies time out. The total cap sits below the process's descriptor
//! limit (`RLIMIT_NOFILE`), leaving a reserve for what the server itself opens (the database,
//! provider calls, sandbox pipes).
//!
//! A wave from many addresses, each under its own cap, can still fill the total. Then a new
//! connection sheds an old one instead of being refused, if its address holds fewer than the
//! most loaded address: from the most loaded address, the connection that has sent the fewest
//! bytes (a trickled body, an idle keep-alive) among those open at least [`SHED_MIN_AGE`]. So
//! addresses converge on equal shares, a flood cannot churn its own connections, and a new
//! client (the health probe among them) still gets in. Connections from the configured
//! `priority_addresses` are never shed and have [`PRIORITY_HEADROOM`] places above the cap.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::str::FromStr as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use actix_web::HttpRequest;
use actix_web::web;
use futures::task::AtomicWaker;
use ipnet::IpNet;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::request_log::{RequestLog, RequestLogConfig};

/// Descriptors kept out of the connection cap, at least: the database and its pool, provider
/// calls, sandbox pipes and the logs.
const MIN_RESERVE: u64 = 64;

/// How long a connection is open before it may be shed: long enough to send a request head.
pub const SHED_MIN_AGE: Duration = Duration::from_secs(1);

/// Places above the total cap for connections from the priority addresses.
pub const PRIORITY_HEADROOM: usize = 16;

/// The edge's limits and its request log (the `[http]` table of the configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeConfig {
    /// Connections open at once, in total; past it a new connection is closed at accept.
    pub max_connections: usize,
    /// Connections open at once from one client address (an IPv6 client's /64); past it a new
    /// connection from that address is closed at accept.
    pub max_connections_per_address: usize,
    /// How long an unauthenticated route (sign-in, the email webhook) waits for its whole
    /// body; a slower body is answered `request_timeout`.
    pub unauthenticated_body: Duration,
    /// Peers whose `X-Forwarded-For` names the client (for sign-in throttling and rate
    /// limits; the connection caps only ever see the peer). Empty: the header is ignored.
    pub trusted_proxies: Vec<IpNet>,
    /// Peers (a health checker, a load balancer) whose connections are never shed and have
    /// [`PRIORITY_HEADROOM`] places above `max_connections`. Empty by default.
    pub priority_addresses: Vec<IpNet>,
    /// Which requests get a log line.
    pub request_log: RequestLogConfig,
}

impl EdgeConfig {
    /// The defaults for a process allowed `nofile` descriptors: half of them (at least 16)
    /// for connections, the rest (at least 64) kept in reserve; a sixteenth of the
    /// connections (at least 8) per address; 10 s for an unauthenticated body; no trusted
    /// proxy.
    #[must_use]
    pub fn for_descriptor_limit(nofile: u64) -> Self {
        let reserve = (nofile / 2).max(MIN_RESERVE);
        let total = nofile.saturating_sub(reserve).max(16);
        let total = usize::try_from(total).unwrap_or(usize::MAX);
        Self {
            max_connections: total,
            max_connections_per_address: (total / 16).max(8),
            unauthenticated_body: Duration::from_secs(10),
            trusted_proxies: Vec::new(),
            priority_addresses: Vec::new(),
            request_log: RequestLogConfig::default(),
        }
    }

    /// The client address of a request from `peer` carrying these `X-Forwarded-For` values:
    /// the peer itself unless it is a trusted proxy; then the right-most address of the
    /// header that is not a trusted proxy (every entry left of it is the client's to forge).
    /// An entry that does not parse stops the walk at the last trusted hop.
    #[must_use]
    pub fn client_address<'a>(
        &self,
        peer: IpAddr,
        forwarded_for: impl IntoIterator<Item = &'a str>,
    ) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.trusted(peer) {
            return peer;
        }
        let entries: Vec<&str> = forwarded_for
            .into_iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        let mut client = peer;
        for entry in entries.iter().rev() {
            let Some(ip) = parse_forwarded(entry) else {
                return client;
            };
            client = ip;
            if !self.trusted(ip) {
                return ip;
            }
        }
        client
    }

    fn trusted(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|net| net.contains(&ip))
    }

    fn priority(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.priority_addresses.iter().any(|net| net.contains(&ip))
    }
}

/// An address or a CIDR block, as `trusted_proxies` lists them (`10.0.0.0/8`, `::1`).
///
/// # Errors
/// When `s` is neither.
pub fn parse_proxy(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    IpNet::from_str(s)
        .or_else(|_| IpAddr::from_str(s).map(IpNet::from))
        .map_err(|_| format!("{s:?} is not an IP address or CIDR block"))
}

/// One `X-Forwarded-For` entry: an address, perhaps with a port (`1.2.3.4:80`, `[::1]:80`).
fn parse_forwarded(entry: &str) -> Option<IpAddr> {
    IpAddr::from_str(entry)
        .ok()
        .or_else(|| std::net::SocketAddr::from_str(entry).ok().map(|a| a.ip()))
        .map(|ip| ip.to_canonical())
}

/// The client address of `req` for throttles and rate limits: the peer's, or the one its
/// `X-Forwarded-For` names when the peer is a trusted proxy ([`EdgeConfig::client_address`];
/// without an [`Edge`] in the app data, the peer's).
#[must_use]
pub fn client_address(req: &HttpRequest) -> Option<IpAddr> {
    let peer = req.peer_addr()?.ip();
    let Some(edge) = req.app_data::<web::Data<Edge>>() else {
        return Some(peer.to_canonical());
    };
    let values = req
        .headers()
        .get_all("x-forwarded-for")
        .filter_map(|v| v.to_str().ok());
    Some(edge.config.client_address(peer, values))
}

/// How long an unauthenticated route waits for its body: the configured
/// [`EdgeConfig::unauthenticated_body`], or 10 s without an [`Edge`] in the app data.
#[must_use]
pub fn unauthenticated_body(req: &HttpRequest) -> Duration {
    req.app_data::<web::Data<Edge>>()
        .map_or(Duration::from_secs(10), |e| e.config.unauthenticated_body)
}

/// The edge's limits and its connection count, shared by every worker (in the app data as
/// `web::Data<Edge>`, and held by the listener).
#[derive(Debug)]
pub struct Edge {
    /// The limits.
    pub config: EdgeConfig,
    /// The request log, with its sampling count.
    pub request_log: RequestLog,
    open: Mutex<Open>,
    refused: AtomicU64,
    shed: AtomicU64,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    /// Connections told to close that have not closed yet: not counted against the cap.
    shedding: usize,
    per_address: HashMap<IpAddr, usize>,
    /// Every open connection that may be shed (not a priority address's), by id.
    conns: HashMap<u64, Arc<Conn>>,
    next_id: u64,
}

impl Open {
    /// The connection to shed for a newcomer whose address holds `newcomer` connections: one
    /// from an address holding at least two more (so shedding never takes an address below
    /// the newcomer's: addresses converge on equal shares, and a flood cannot churn its own
    /// connections), the most loaded address first, then the one that has sent the fewest
    /// bytes, then the oldest; open at least [`SHED_MIN_AGE`] and not already told to close.
    fn victim(&self, newcomer: usize, now: Instant) -> Option<&Arc<Conn>> {
        self.conns
            .values()
            .filter(|c| {
                !c.shed.load(Ordering::Relaxed) && now.duration_since(c.since) >= SHED_MIN_AGE
            })
            .filter_map(|c| {
                let held = c.key.and_then(|k| self.per_address.get(&k).copied())?;
                (held >= newcomer + 2).then_some((c, held))
            })
            .min_by_key(|(c, held)| {
                (
                    std::cmp::Reverse(*held),
                    c.bytes_in.load(Ordering::Relaxed),
                    c.since,
                )
            })
            .map(|(c, _)| c)
    }
}

/// What the edge knows of one open connection: enough to choose it for shedding and to tell
/// it to close.
#[derive(Debug)]
struct Conn {
    key: Option<IpAddr>,
    since: Instant,
    bytes_in: AtomicU64,
    shed: AtomicBool,
    /// The connection's task, woken to see it was shed.
    waker: AtomicWaker,
}

impl Edge {
    /// No connection open yet.
    #[must_use]
    pub fn new(config: EdgeConfig) -> Arc<Self> {
        Arc::new(Self {
            request_log: RequestLog::new(config.request_log),
            config,
            open: Mutex::new(Open::default()),
            refused: AtomicU64::new(0),
            shed: AtomicU64::new(0),
        })
    }

    /// Counts a new connection from `peer` (`None`: unknown, counted in the total only), or
    /// `None` when it is refused (the caller closes the connection): over its address's cap,
    /// or over the total cap with no connection to shed. At the total cap, a connection of a
    /// more loaded address is told to close ([`Open::victim`]) and this one takes its
    /// place. The slot is released when dropped, with the connection.
    #[must_use]
    pub fn admit(self: &Arc<Self>, peer: Option<IpAddr>) -> Option<Slot> {
        let key = peer.map(address_key);
        let priority = peer.is_some_and(|p| self.config.priority(p));
        let now = Instant::now();
        let mut open = self.lock();
        let from_address = key.and_then(|k| open.per_address.get(&k).copied());
        let cap = self.config.max_connections + if priority { PRIORITY_HEADROOM } else { 0 };
        let over_address = from_address.unwrap_or(0) >= self.config.max_connections_per_address;
        let mut refuse = over_address && !priority;
        if !refuse && open.total - open.shedding >= cap {
            match open.victim(from_address.unwrap_or(0), now) {
                Some(victim) => {
                    victim.shed.store(true, Ordering::Relaxed);
                    victim.waker.wake();
                    open.shedding += 1;
                    self.shed.fetch_add(1, Ordering::Relaxed);
                }
                None => refuse = true,
            }
        }
        if refuse {
            drop(open);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        open.total += 1;
        if let Some(k) = key {
            *open.per_address.entry(k).or_insert(0) += 1;
        }
        let conn = Arc::new(Conn {
            key,
            since: now,
            bytes_in: AtomicU64::new(0),
            shed: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        let id = open.next_id;
        open.next_id += 1;
        if !priority {
            open.conns.insert(id, Arc::clone(&conn));
        }
        Some(Slot {
            edge: Arc::clone(self),
            key,
            id,
            conn,
        })
    }

    /// Connections open now.
    #[must_use]
    pub fn open(&self) -> usize {
        self.lock().total
    }

    /// Connections closed at accept since the start.
    #[must_use]
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Connections shed (told to close to make room for a new one) since the start.
    #[must_use]
    pub fn shed(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }

    /// The connection gauges, in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(
            out,
            "# HELP corral_http_connections_open Client connections open now\n\
             # TYPE corral_http_connections_open gauge\n\
             corral_http_connections_open {}\n\
             # HELP corral_http_connections_refused_total Connections closed at accept (a connection cap was reached)\n\
             # TYPE corral_http_connections_refused_total counter\n\
             corral_http_connections_refused_total {}\n\
             # HELP corral_http_connections_shed_total Connections closed to make room for a new one at the total cap\n\
             # TYPE corral_http_connections_shed_total counter\n\
             corral_http_connections_shed_total {}\n",
            self.open(),
            self.refused(),
            self.shed()
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // The counts stay consistent under a poisoned lock: every critical section is a
        // few integer updates that cannot panic half-way.
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The per-address key: an IPv4 address, or an IPv6 address's /64 (one subscriber's usual
/// allocation, which an attacker can spread connections over).
fn address_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

/// One open connection's place in the count, released when dropped.
#[derive(Debug)]
pub struct Slot {
    edge: Arc<Edge>,
    key: Option<IpAddr>,
    id: u64,
    conn: Arc<Conn>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.edge.lock();
        open.total = open.total.saturating_sub(1);
        open.conns.remove(&self.id);
        // Read under the lock that set it, so `shedding` counts each shed connection once.
        if self.conn.shed.load(Ordering::Relaxed) {
            open.shedding = open.shedding.saturating_sub(1);
        }
        if let Some(k) = self.key
            && let Some(n) = open.per_address.get_mut(&k)
        {
            *n -= 1;
            if *n == 0 {
                open.per_address.remove(&k);
            }
        }
    }
}

/// A connection holding its place in the [`Edge`] count, released when actix-http drops it;
/// it counts the bytes the client sent, and ends (a reset, on its next read or write) once the
/// edge sheds it.
pub(crate) struct Counted<S> {
    io: S,
    slot: Slot,
}

impl<S> Counted<S> {
    pub(crate) fn new(io: S, slot: Slot) -> Self {
        Self { io, slot }
    }

    fn shed(&self, cx: &mut Context<'_>) -> bool {
        let conn = &self.slot.conn;
        conn.waker.register(cx.waker());
        conn.shed.load(Ordering::Relaxed)
    }
}

fn shed_error() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "shed at the connection cap",
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.shed(cx) {
            return Poll::Ready(Err(shed_error()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        let read = (buf.filled().len() - before) as u64;
        self.slot.conn.bytes_in.fetch_add(read, Ordering::Relaxed);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.shed(cx) {
            return Poll::Ready(Err(shed_error()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if self.shed(cx) {
            return Poll::Ready(Err(shed_error()));
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The process's soft limit on open descriptors (`RLIMIT_NOFILE`); 1024, the usual default,
/// when it is unlimited or cannot be read.
#[must_use]
pub fn descriptor_limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn behind(proxies: &[&str]) -> EdgeConfig {
        EdgeConfig {
            trusted_proxies: proxies.iter().map(|p| parse_proxy(p).unwrap()).collect(),
            ..EdgeConfig::for_descriptor_limit(1024)
        }
    }

    #[test]
    fn without_trusted_proxies_the_header_is_ignored() {
        let cfg = behind(&[]);
        assert_eq!(
            cfg.client_address(ip("10.0.0.1"), ["203.0.113.9"]),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn an_untrusted_peers_header_is_ignored() {
        let cfg = behind(&["10.0.0.0/8"]);
        assert_eq!(
            cfg.client_address(ip("192.0.2.7"), ["203.0.113.9"]),
            ip("192.0.2.7")
        );
    }

    #[test]
    fn the_right_most_untrusted_entry_is_the_client_and_spoofed_left_entries_are_ignored() {
        let cfg = behind(&["10.0.0.0/8", "::1"]);
        // The client sent "1.1.1.1, 2.2.2.2" itself; the first proxy appended what it saw
        // (198.51.100.4), the second proxy (10.1.1.1) its own peer.
        let values = ["1.1.1.1, 2.2.2.2", "198.51.100.4, 10.1.1.1"];
        assert_eq!(
            cfg.client_address(ip("10.0.0.2"), values),
            ip("198.51.100.4")
        );
        assert_eq!(
            cfg.client_address(ip("::1"), ["garbage, 198.51.100.4:4711"]),
            ip("198.51.100.4")
        );
        // Unparsable right of any untrusted entry: the last trusted hop.
        assert_eq!(
            cfg.client_address(ip("10.0.0.2"), ["198.51.100.4, nonsense"]),
            ip("10.0.0.2")
        );
        // Only trusted hops: the left-most of them; no header: the proxy itself.
        assert_eq!(
            cfg.client_address(ip("10.0.0.2"), ["10.9.9.9, 10.1.1.1"]),
            ip("10.9.9.9")
        );
        assert_eq!(
            cfg.client_address(ip("10.0.0.2"), std::iter::empty()),
            ip("10.0.0.2")
        );
    }

    #[test]
    fn proxies_parse_as_addresses_or_blocks() {
        assert!(parse_proxy("10.0.0.0/8").unwrap().contains(&ip("10.2.3.4")));
        assert!(parse_proxy("::1").unwrap().contains(&ip("::1")));
        assert!(parse_proxy("10.0.0.0/33").is_err());
        assert!(parse_proxy("proxy.internal").is_err());
    }

    #[test]
    fn defaults_stay_below_the_descriptor_limit() {
        for nofile in [256, 1024, 4096, 65_536, 1_048_576] {
            let cfg = EdgeConfig::for_descriptor_limit(nofile);
            assert!(
                (cfg.max_connections as u64) + MIN_RESERVE <= nofile,
                "{nofile}"
            );
            assert!(cfg.max_connections_per_address < cfg.max_connections);
        }
    }

    #[test]
    fn caps_refuse_and_slots_release() {
        let edge = Edge::new(EdgeConfig {
            max_connections: 3,
            max_connections_per_address: 2,
            ..EdgeConfig::for_descriptor_limit(1024)
        });
        let a = Some(ip("192.0.2.1"));
        let s1 = edge.admit(a).unwrap();
        let s2 = edge.admit(a).unwrap();
        assert!(edge.admit(a).is_none(), "per-address cap");
        let v6a = edge.admit(Some(ip("2001:db8::1"))).unwrap();
        assert!(edge.admit(Some(ip("192.0.2.2"))).is_none(), "total cap");
        assert_eq!((edge.open(), edge.refused()), (3, 2));
        drop((s1, s2));
        assert_eq!(edge.open(), 1);
        // Another address of the same IPv6 /64 shares its count.
        let v6b = edge.admit(Some(ip("2001:db8::2"))).unwrap();
        assert!(edge.admit(Some(ip("2001:db8::3"))).is_none(), "same /64");
        assert_eq!(edge.open(), 2);
        drop((v6a, v6b));
        assert_eq!(edge.open(), 0);
        assert!(edge.admit(a).is_some());
    }
}
