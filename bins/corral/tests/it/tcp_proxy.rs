//! A loopback TCP proxy that a test can switch between passing traffic, refusing new
//! connections and black-holing everything, and whose live connections it can cut: a
//! PostgreSQL outage (or a network fault) for one server under test, without touching the
//! shared database server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Forwards both ways.
    Pass,
    /// New connections are reset at once; live connections are cut when they next carry
    /// data (a stopped database server).
    Refuse,
    /// New connections are accepted and never answered; live connections carry nothing either
    /// way, their bytes held until the mode changes (a network partition).
    Blackhole,
}

/// The proxy; stops accepting when dropped (live connections are cut).
pub(crate) struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    live: Arc<Mutex<Vec<AbortHandle>>>,
    accepted: Arc<AtomicUsize>,
    acceptor: AbortHandle,
    strand: watch::Sender<u64>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub(crate) async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (mode, _) = watch::channel(Mode::Pass);
        let (strand, _) = watch::channel(0u64);
        let live: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (tx, l, n, st) = (mode.clone(), live.clone(), accepted.clone(), strand.clone());
        let acceptor = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                n.fetch_add(1, Ordering::SeqCst);
                let rx = tx.subscribe();
                if *rx.borrow() == Mode::Refuse {
                    reset(client);
                    continue;
                }
                let task = tokio::spawn(connection(client, upstream, rx, st.subscribe()));
                let mut live = l.lock().unwrap();
                live.retain(|h| !h.is_finished());
                live.push(task.abort_handle());
            }
        })
        .abort_handle();
        Self {
            addr,
            mode,
            live,
            accepted,
            acceptor,
            strand,
        }
    }

    /// Strands every live connection: it stays open but never carries another byte either
    /// way, as when the server behind it vanished without a reset (a failover that moved its
    /// address); new connections are unaffected.
    pub(crate) fn strand(&self) {
        self.strand.send_modify(|e| *e += 1);
    }

    /// `127.0.0.1:<port>`.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the mode (held bytes flow again when leaving `Blackhole` for `Pass`).
    pub(crate) fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Closes every live connection at once (a server restart or a killed backend).
    pub(crate) fn cut(&self) {
        for h in self.live.lock().unwrap().drain(..) {
            h.abort();
        }
    }

    /// Connections accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.cut();
    }
}

/// Closes `socket` with a reset rather than an orderly shutdown.
fn reset(socket: TcpStream) {
    #[allow(deprecated)] // `set_zero_linger` is not in the pinned tokio; this is the same call.
    let _ = socket.set_linger(Some(Duration::ZERO));
    drop(socket);
}

async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    mode: watch::Receiver<Mode>,
    strand: watch::Receiver<u64>,
) {
    // Black-holed from the start: hold the client without connecting upstream.
    let mut wait = mode.clone();
    if wait.wait_for(|m| *m != Mode::Blackhole).await.is_err() {
        return;
    }
    if *wait.borrow() == Mode::Refuse {
        reset(client);
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        reset(client);
        return;
    };
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pump(cr, sw, mode.clone(), strand.clone());
    let down = pump(sr, cw, mode, strand);
    // Either direction ending ends the connection (both halves are dropped).
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    strand: watch::Receiver<u64>,
) {
    let born = *strand.borrow();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if *strand.borrow() != born {
            // Stranded: swallow everything, never close.
            let _keep = (from, to);
            std::future::pending::<()>().await;
            return;
        }
        // Held while black-holed; dropped (the connection cut) once refused.
        match mode.wait_for(|m| *m != Mode::Blackhole).await {
            Ok(m) if *m == Mode::Pass => {}
            _ => return,
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
