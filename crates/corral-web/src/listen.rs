//! The listener: every address `listen` resolves to, bound as `actix_web::HttpServer` binds,
//! each connection passed through [`GuardedStream`] before actix-http, then the app. It sits
//! above the app builder, like the binary's call to it.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use crate::app::{Mount, app};
use crate::edge::{Counted, Edge};
use crate::head_guard::GuardedStream;
use crate::mcp_origin::McpOrigins;
use crate::state::AppState;

/// The listen backlog `actix_web::HttpServer` uses.
const BACKLOG: i32 = 1024;

/// Seconds in-flight requests get to finish on SIGTERM or SIGINT.
const SHUTDOWN_TIMEOUT_SECS: u64 = 30;

/// The server, built and not yet started, and the addresses it listens on.
pub struct Bound {
    /// Runs until SIGTERM or SIGINT (graceful: in-flight requests get 30 s), when awaited.
    pub server: actix_server::Server,
    /// Every address bound (one `listen` may resolve to several).
    pub addrs: Vec<SocketAddr>,
}

/// Binds `listen` (every address it resolves to) and builds the HTTP server over it, each
/// connection through a [`GuardedStream`]: what `actix_web::HttpServer::new(..).bind(..)` did,
/// with the same settings (keep-alive 5 s, first request within 5 s, disconnect 1 s,
/// half-closed reads allowed, graceful shutdown in 30 s). `mount` is as for [`app`].
///
/// Each connection is first counted by `edge` ([`Edge::admit`]): one over a connection cap
/// is closed at accept, before a byte is read; the others hold their place until they close.
/// `edge` is also in the app data, for the body deadlines, the client address and
/// `/metrics`; so is `mcp`, the browser origins `/mcp` accepts besides the public URL's.
pub fn bind(
    listen: &str,
    workers: usize,
    state: AppState,
    mount: Mount,
    edge: Arc<Edge>,
    mcp: McpOrigins,
) -> io::Result<Bound> {
    use actix_http::{HttpService, KeepAlive, Protocol, error::DispatchError};
    use actix_service::{ServiceFactoryExt as _, fn_service, map_config};
    use actix_web::dev::AppConfig;

    let mut listeners = Vec::new();
    let mut error = None;
    for addr in listen.to_socket_addrs()? {
        match tcp_listener(addr) {
            Ok(listener) => listeners.push(listener),
            Err(e) => error = Some(e),
        }
    }
    if listeners.is_empty() {
        return Err(error.unwrap_or_else(|| io::Error::other("no address to listen on")));
    }
    let mut builder = actix_server::Server::build()
        .workers(workers)
        .shutdown_timeout(SHUTDOWN_TIMEOUT_SECS);
    let shutdown = builder.graceful_shutdown_signal();
    let mut addrs = Vec::new();
    for listener in listeners {
        let addr = listener.local_addr()?;
        addrs.push(addr);
        let (state, shutdown, edge, mcp) =
            (state.clone(), shutdown.clone(), edge.clone(), mcp.clone());
        builder = builder.listen(format!("corral-{addr}"), listener, move || {
            let shutdown = shutdown.clone();
            let http = HttpService::build()
                .graceful_shutdown_signal(move || {
                    let signal = shutdown.clone();
                    async move { signal.notified().await }
                })
                .keep_alive(KeepAlive::default())
                .client_request_timeout(Duration::from_secs(5))
                .client_disconnect_timeout(Duration::from_secs(1))
                .h1_allow_half_closed(true)
                .local_addr(addr)
                // Nothing in Corral reads the app config's host or address (no
                // `connection_info`, `url_for` or `app_config`), so the stable default serves
                // rather than the semver-exempt constructor `HttpServer` uses.
                // `/mcp`'s allowed browser origins (`crate::mcp_origin`).
                .finish(map_config(
                    app(state.clone(), mount)
                        .app_data(actix_web::web::Data::new(mcp.clone()))
                        .app_data(actix_web::web::Data::from(edge.clone())),
                    |()| AppConfig::default(),
                ));
            let edge = edge.clone();
            fn_service(move |io: tokio::net::TcpStream| {
                // Streamed answers (SSE, the E2B door's Connect streams) are many small
                // writes: with Nagle's algorithm each one after the first waits for the
                // client's delayed ACK (40 ms on Linux). Failing to set it costs only that.
                let _ = io.set_nodelay(true);
                let peer = io.peer_addr().ok();
                let slot = edge.admit(peer.map(|p| p.ip()));
                async move {
                    // Over a cap: dropping the socket closes it, and actix-server ignores
                    // the error.
                    let Some(slot) = slot else {
                        return Err(DispatchError::Io(io::Error::other("connection cap")));
                    };
                    let io = Counted::new(io, slot);
                    Ok((GuardedStream::new(io), Protocol::Http1, peer))
                }
            })
            .and_then(http)
        })?;
    }
    Ok(Bound {
        server: builder.run(),
        addrs,
    })
}

/// A listening socket as `actix_web::HttpServer::bind` makes one (address reuse, backlog
/// 1024).
fn tcp_listener(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}
