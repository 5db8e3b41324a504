//! The DNS relay of a sandbox with a guarded network, run by its keeper.
//!
//! The keeper holds two UDP sockets: one in the sandbox's network namespace, bound to
//! `127.0.0.53:53` (the sandbox's `/etc/resolv.conf` names it; binding a port below 1024
//! there takes a capability the sandbox's root lacks, so no command can take its place),
//! and one in the host's, made before the keeper left it. Each query (at most 4 KiB) goes to
//! the upstream resolver under an id of the relay's own; its answer, matched by that id and
//! the upstream's address, goes back to the asker under the asker's id. Nothing but DNS
//! reaches the upstream this way, which is why a resolver at a private or link-local
//! address (a VM's, a cloud's) can serve the sandbox while the rest of that range stays
//! blocked. Unanswered queries are forgotten after 5 s; at most 256 are in flight.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// Where the relay listens inside the sandbox.
pub(crate) const LISTEN: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 53), 53);
/// Largest query or answer relayed.
const MAX_MESSAGE: usize = 4096;
/// Queries in flight at once.
const MAX_IN_FLIGHT: usize = 256;
/// How long an unanswered query is remembered.
const FORGET_AFTER: Duration = Duration::from_secs(5);

/// A relay's two sockets and its queries in flight.
pub(crate) struct Relay {
    inside: UdpSocket,
    outside: UdpSocket,
    upstream: SocketAddr,
    next_id: u16,
    /// Our id → (the asker, its id, when).
    in_flight: HashMap<u16, (SocketAddr, [u8; 2], Instant)>,
}

/// The host-side socket, made while the keeper is still in the host's network namespace.
pub(crate) fn outside_socket() -> std::io::Result<UdpSocket> {
    UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
}

impl Relay {
    /// The relay, once the keeper is in the sandbox's network namespace (with its loopback
    /// up).
    pub(crate) fn new(outside: UdpSocket, upstream: SocketAddr) -> std::io::Result<Self> {
        let inside = UdpSocket::bind(LISTEN)?;
        inside.set_nonblocking(true)?;
        outside.set_nonblocking(true)?;
        Ok(Self {
            inside,
            outside,
            upstream,
            next_id: 1,
            in_flight: HashMap::new(),
        })
    }

    /// The descriptors to poll.
    pub(crate) fn sockets(&self) -> [&UdpSocket; 2] {
        [&self.inside, &self.outside]
    }

    /// Relays what is waiting on either socket.
    pub(crate) fn pump(&mut self) {
        let mut buf = [0u8; MAX_MESSAGE];
        let now = Instant::now();
        self.in_flight
            .retain(|_, (_, _, at)| now.duration_since(*at) < FORGET_AFTER);
        while let Ok((n, asker)) = self.inside.recv_from(&mut buf) {
            if n < 12 || self.in_flight.len() >= MAX_IN_FLIGHT {
                continue;
            }
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            self.in_flight.insert(id, (asker, [buf[0], buf[1]], now));
            buf[..2].copy_from_slice(&id.to_be_bytes());
            let _ = self.outside.send_to(&buf[..n], self.upstream);
        }
        while let Ok((n, from)) = self.outside.recv_from(&mut buf) {
            if n < 12 || from != self.upstream {
                continue;
            }
            let id = u16::from_be_bytes([buf[0], buf[1]]);
            if let Some((asker, original, _)) = self.in_flight.remove(&id) {
                buf[..2].copy_from_slice(&original);
                let _ = self.inside.send_to(&buf[..n], asker);
            }
        }
    }
}
