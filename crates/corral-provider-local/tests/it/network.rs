//! Guarded networking: a sandbox that asked for a network (and whose server allows one)
//! reaches "the outside" — here a network namespace the test makes, joined to the host by a
//! veth pair — and resolves names, but never the host's loopback, the cloud metadata
//! address, or a private range unless the operator allow-listed it. Without a network, it
//! reaches nothing.

use std::io::Write as _;
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use corral_domain::{CreateSandboxRequest, OperationId, Provider};
use corral_provider::{CreateSpec, ProviderError};
use corral_provider_local::{Ipv4Net, LocalCreate, LocalProvider, NetworkConfig};

use crate::{World, ctx, text};

/// The outside world's public-looking address (TEST-NET-3), a metadata-service address and
/// a private one, all served in the test's own namespace.
const PUBLIC: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);
const METADATA: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
const PRIVATE: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
/// What the test's resolver answers for every name.
const RESOLVED: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 77);

fn ip(args: &str) {
    let out = std::process::Command::new("ip")
        .args(args.split_whitespace())
        .output()
        .unwrap();
    assert!(out.status.success(), "ip {args}: {}", text(&out.stderr));
}

/// A network namespace standing for the outside world, with a TCP server on each of its
/// addresses (answering `hello <address>`) and a DNS server, counting the connections
/// each one gets. Removed on drop.
struct Outside {
    name: String,
    veth: String,
    port: u16,
    hits: Vec<(Ipv4Addr, Arc<AtomicUsize>)>,
}

impl Outside {
    fn new() -> Self {
        let tag = std::process::id() % 100_000;
        let name = format!("corral-out-{tag}");
        let (veth, peer) = (format!("cvh{tag}"), format!("cvo{tag}"));
        ip(&format!("netns add {name}"));
        ip(&format!("link add {veth} type veth peer name {peer}"));
        ip(&format!("link set {peer} netns {name}"));
        ip(&format!("addr add 203.0.113.1/24 dev {veth}"));
        ip(&format!("link set {veth} up"));
        for (addr, len) in [(PUBLIC, 24), (METADATA, 32), (PRIVATE, 24)] {
            ip(&format!("-n {name} addr add {addr}/{len} dev {peer}"));
        }
        ip(&format!("-n {name} link set {peer} up"));
        ip(&format!("-n {name} link set lo up"));
        ip(&format!("-n {name} route add default via 203.0.113.1"));
        // The host reaches the other two through the veth too.
        ip(&format!("route add {METADATA}/32 via {PUBLIC} dev {veth}"));
        ip(&format!("route add 10.200.0.0/24 via {PUBLIC} dev {veth}"));
        let port = 20_000 + u16::try_from(tag % 20_000).unwrap();
        let mut hits = Vec::new();
        let netns = std::fs::File::open(format!("/run/netns/{name}")).unwrap();
        for addr in [PUBLIC, METADATA, PRIVATE] {
            let count = Arc::new(AtomicUsize::new(0));
            hits.push((addr, count.clone()));
            let netns = netns.try_clone().unwrap();
            let (ready_tx, ready) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                // This thread alone enters the namespace; its sockets stay there.
                rustix::thread::move_into_link_name_space(
                    std::os::fd::AsFd::as_fd(&netns),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .unwrap();
                let listener = TcpListener::bind((addr, port)).unwrap();
                if addr == PUBLIC {
                    let dns = UdpSocket::bind((addr, 53)).unwrap();
                    std::thread::spawn(move || serve_dns(&dns));
                }
                ready_tx.send(()).unwrap();
                for stream in listener.incoming().flatten() {
                    count.fetch_add(1, Ordering::SeqCst);
                    let mut stream = stream;
                    let _ = stream.write_all(format!("hello {addr}\n").as_bytes());
                }
            });
            ready.recv().unwrap();
        }
        Self {
            name,
            veth,
            port,
            hits,
        }
    }

    fn hits(&self, addr: Ipv4Addr) -> usize {
        self.hits
            .iter()
            .find(|(a, _)| *a == addr)
            .map_or(0, |(_, c)| c.load(Ordering::SeqCst))
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.veth])
            .output();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Answers every A query with [`RESOLVED`].
fn serve_dns(socket: &UdpSocket) {
    let mut buf = [0u8; 512];
    while let Ok((n, from)) = socket.recv_from(&mut buf) {
        if n < 12 {
            continue;
        }
        // The question ends at the root label, then type and class.
        let mut end = 12;
        while end < n && buf[end] != 0 {
            end += usize::from(buf[end]) + 1;
        }
        let end = end + 5;
        if end > n {
            continue;
        }
        let mut answer = Vec::from(&buf[..2]);
        answer.extend([0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
        answer.extend(&buf[12..end]);
        answer.extend([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        answer.extend(RESOLVED.octets());
        let _ = socket.send_to(&answer, from);
    }
}

#[allow(clippy::print_stdout)] // A skipped test says so in its output.
fn prerequisites() -> bool {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: the test's outside network namespace needs root");
        return false;
    }
    let pasta = NetworkConfig::default().pasta;
    if !pasta.exists() {
        assert!(
            !crate::in_ci(),
            "{} is missing: install Debian's passt (.ci/run does)",
            pasta.display()
        );
        println!("skipped: {} (passt) is missing", pasta.display());
        return false;
    }
    true
}

async fn create_with_network(
    provider: &LocalProvider,
    network: bool,
) -> Result<String, ProviderError> {
    let spec = CreateSpec {
        operation_id: OperationId::new(),
        request: CreateSandboxRequest::standard(Provider::Local, None, None),
        timeout_seconds: None,
    };
    let local = LocalCreate {
        network,
        ..LocalCreate::default()
    };
    provider
        .create_with(&ctx(), &spec, &local)
        .await
        .map(|o| o.native_id)
}

/// What a TCP connection from sandbox `id` to `addr:port` reads (`refused: …` when it
/// cannot connect), within 3 s.
async fn connect(world: &World, id: &str, addr: Ipv4Addr, port: u16) -> String {
    let out = world
        .sh(
            id,
            &format!(
                "timeout 3 bash -c 'exec 3<>/dev/tcp/{addr}/{port} && head -n1 <&3' 2>/dev/null \
                 || echo \"refused: $?\""
            ),
        )
        .await;
    text(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_network_reaches_the_outside_and_dns_but_not_the_host_or_private_ranges() {
    if !prerequisites() {
        return;
    }
    let outside = Outside::new();
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let host_port = host.local_addr().unwrap().port();
    let world = World::with(|c| {
        c.network = Some(NetworkConfig {
            dns_upstream: Some(PUBLIC),
            ..NetworkConfig::default()
        });
    });
    assert_eq!(world.provider.containment().network, Ok(()));
    let id = create_with_network(&world.provider, true).await.unwrap();
    let port = outside.port;
    assert_eq!(
        connect(&world, &id, PUBLIC, port).await,
        format!("hello {PUBLIC}")
    );
    let out = world.sh(&id, "getent hosts example.test").await;
    assert!(
        text(&out.stdout).starts_with(&RESOLVED.to_string()),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    for (addr, port) in [
        (METADATA, port),
        (PRIVATE, port),
        (Ipv4Addr::LOCALHOST, host_port),
        // pasta's side of the link is not the host either.
        (Ipv4Addr::new(10, 255, 255, 1), host_port),
        (Ipv4Addr::new(203, 0, 113, 1), host_port),
    ] {
        let got = connect(&world, &id, addr, port).await;
        assert!(got.starts_with("refused"), "{addr}:{port} answered: {got}");
    }
    assert_eq!(outside.hits(METADATA), 0);
    assert_eq!(outside.hits(PRIVATE), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert!(host.accept().is_err(), "the host's loopback was reached");

    // pasta, which carries the sandbox's traffic, counts against the sandbox's cgroup.
    let pasta: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|c| c.starts_with("pasta") || c.starts_with("passt"))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("cgroup")).ok())
        .filter(|c| c.contains(&id))
        .collect();
    assert!(!pasta.is_empty(), "no pasta in the sandbox's cgroup");

    // A sandbox that did not ask for a network has none.
    let none = create_with_network(&world.provider, false).await.unwrap();
    let got = connect(&world, &none, PUBLIC, port).await;
    assert!(got.starts_with("refused"), "{got}");
    let interfaces = world
        .sh(&none, "tail -n +3 /proc/net/dev | cut -d: -f1")
        .await;
    assert_eq!(text(&interfaces.stdout).trim(), "lo");

    // A range the operator allow-lists is reachable; the rest stays blocked.
    let allowing = World::with(|c| {
        c.network = Some(NetworkConfig {
            allow: vec!["10.200.0.0/24".parse::<Ipv4Net>().unwrap()],
            ..NetworkConfig::default()
        });
    });
    let id = create_with_network(&allowing.provider, true).await.unwrap();
    assert_eq!(
        connect(&allowing, &id, PRIVATE, port).await,
        format!("hello {PRIVATE}")
    );
    assert!(
        connect(&allowing, &id, METADATA, port)
            .await
            .starts_with("refused")
    );
    assert_eq!(outside.hits(METADATA), 0);
    drop(outside);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_is_refused_where_the_operator_allows_none() {
    let world = World::new();
    let got = create_with_network(&world.provider, true).await;
    assert!(
        matches!(got, Err(ProviderError::InvalidRequest { .. })),
        "{got:?}"
    );
    let left = std::fs::read_dir(world.root())
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .count();
    assert_eq!(left, 0);
}
