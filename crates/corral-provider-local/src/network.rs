//! Guarded networking: a sandbox's own network namespace, connected to the outside world by
//! `pasta` (passt's user-mode network stack, as rootless Podman uses it), with the host's
//! loopback, link-local, private and other special ranges unreachable unless the operator
//! allow-lists them.
//!
//! How traffic leaves: the namespace has one interface (`eth0`, a tap device `pasta` holds)
//! with an address of its own in a /30 and a default route to `pasta`'s side of it. `pasta`
//! runs in the host's network namespace (as `nobody` once set up, inside the sandbox's
//! cgroup, so its CPU and memory count against the sandbox) and turns each of the
//! sandbox's connections into a socket of its own on the host. Nothing reaches the host's
//! loopback: `127.0.0.1` inside is the namespace's own loopback, and `pasta` is told not to
//! map the gateway to the host (`--no-map-gw`) nor to forward any port either way (`-t`,
//! `-u`, `-T`, `-U none`). The guard is the namespace's routing table, which the sandbox
//! cannot change (its root holds no capability over the network namespace, which belongs to
//! the host's user namespace, or to the keeper's when the server is not root): an
//! `unreachable` route for each blocked range and for each address of the host itself, so
//! such packets never reach `pasta`; an allow-listed range gets a route through the gateway,
//! which is more specific. IPv6 is off (`-4`). DNS: the sandbox's `/etc/resolv.conf` names
//! `127.0.0.53`, where the sandbox's keeper relays UDP queries to the host's resolver (or
//! the one configured) from the host's side (see `dns`): a resolver at a private or
//! link-local address serves the sandbox without that address becoming reachable.

use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::process::Pid;

use crate::init::proto::GuardedNetwork;
use crate::sys::{self, Forked, SingleThreaded};

/// The namespace's interface.
pub(crate) const INTERFACE: &str = "eth0";
/// The sandbox's address.
const ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 255, 255, 2);
/// `pasta`'s side: gateway and DNS forwarder.
pub(crate) const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 255, 255, 1);

/// Ranges a sandbox never reaches unless allow-listed: "this network", private, shared
/// (carrier-grade NAT), loopback, link-local (cloud metadata services), IETF protocol
/// assignments, benchmarking, multicast and reserved.
pub const BLOCKED_RANGES: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
];

/// An IPv4 range, `a.b.c.d/n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Net {
    /// The first address.
    pub addr: Ipv4Addr,
    /// The prefix length (0 ..= 32).
    pub prefix: u8,
}

impl std::str::FromStr for Ipv4Net {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, prefix) = s.split_once('/').unwrap_or((s, "32"));
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("`{s}` is not an IPv4 range"))?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= 32)
            .ok_or_else(|| format!("`{s}`: bad prefix"))?;
        Ok(Self { addr, prefix })
    }
}

impl std::fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// What the operator allows (`LocalConfig::network`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkConfig {
    /// Ranges reachable despite [`BLOCKED_RANGES`] (and the host's own addresses).
    pub allow: Vec<Ipv4Net>,
    /// The resolver the sandboxes' DNS queries are relayed to, from the host (`None`: the
    /// host's first IPv4 nameserver).
    pub dns_upstream: Option<Ipv4Addr>,
    /// `pasta` (from Debian's `passt` package).
    pub pasta: std::path::PathBuf,
    /// iproute2's `ip`.
    pub ip: std::path::PathBuf,
}

impl Default for NetworkConfig {
    /// Nothing allow-listed, the host's resolver, `/usr/bin/pasta`, and `ip` where Debian
    /// puts it.
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            dns_upstream: None,
            pasta: "/usr/bin/pasta".into(),
            ip: ["/usr/sbin/ip", "/usr/bin/ip", "/sbin/ip", "/bin/ip"]
                .into_iter()
                .map(std::path::PathBuf::from)
                .find(|p| p.exists())
                .unwrap_or_else(|| "/usr/sbin/ip".into()),
        }
    }
}

impl NetworkConfig {
    /// Why guarded networking cannot work here, if it cannot.
    pub(crate) fn check(&self) -> Result<(), String> {
        for (tool, package) in [(&self.pasta, "passt"), (&self.ip, "iproute2")] {
            if !tool.exists() {
                return Err(format!("{} ({package}) is missing", tool.display()));
            }
        }
        // A root server gives pasta a device node of its own; otherwise pasta, as this
        // user, opens the host's.
        if !rustix::process::geteuid().is_root() {
            rustix::fs::open(
                "/dev/net/tun",
                rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| format!("/dev/net/tun cannot be opened by this user ({e}); make it 0666, as Debian's udev rules do"))?;
        }
        Ok(())
    }

    /// What the keeper needs for one sandbox.
    pub(crate) fn setup(&self) -> GuardedNetwork {
        let pasta = vec![
            self.pasta.to_string_lossy().into_owned(),
            "--foreground".into(),
            "--quiet".into(),
            "--ipv4-only".into(),
            "--config-net".into(),
            "--ns-ifname".into(),
            INTERFACE.into(),
            "--address".into(),
            ADDRESS.to_string(),
            "--netmask".into(),
            "30".into(),
            "--gateway".into(),
            GATEWAY.to_string(),
            "--no-map-gw".into(),
            // The namespace is named by a helper's /proc entry, gone once pasta has joined;
            // pasta ends with the sandbox's init instead (its keeper kills it).
            "--no-netns-quit".into(),
            // DNS is relayed by the keeper (`dns`), not pasta.
            "--dns".into(),
            "none".into(),
            "--tcp-ports".into(),
            "none".into(),
            "--udp-ports".into(),
            "none".into(),
            "--tcp-ns".into(),
            "none".into(),
            "--udp-ns".into(),
            "none".into(),
        ];
        let mut routes: Vec<String> = BLOCKED_RANGES
            .iter()
            .map(|r| format!("route add unreachable {r}"))
            .collect();
        for host in host_addresses() {
            routes.push(format!("route add unreachable {host}/32"));
        }
        for allowed in &self.allow {
            routes.push(format!("route add {allowed} via {GATEWAY} dev {INTERFACE}"));
        }
        let upstream = self
            .dns_upstream
            .or_else(host_resolver)
            .unwrap_or(Ipv4Addr::LOCALHOST);
        GuardedNetwork {
            pasta,
            interface: INTERFACE.into(),
            ip: self.ip.clone(),
            routes,
            dns_upstream: std::net::SocketAddr::from((upstream, 53)),
        }
    }
}

/// Writes `<root>/.resolv.conf`: the gateway (pasta's DNS forwarder) as the only resolver.
pub(crate) fn write_resolv_conf(root: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    let path = root.join(".resolv.conf");
    std::fs::write(
        &path,
        format!("nameserver {}\noptions edns0\n", crate::dns::LISTEN.ip()),
    )?;
    Ok(path)
}

/// The host's first IPv4 resolver (`/etc/resolv.conf`).
fn host_resolver() -> Option<Ipv4Addr> {
    std::fs::read_to_string("/etc/resolv.conf")
        .ok()?
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .find_map(|a| a.trim().parse().ok())
}

/// The host's own IPv4 addresses (every interface), from `/proc/net/fib_trie`: a sandbox
/// must not reach the host's services through its public address either.
fn host_addresses() -> Vec<Ipv4Addr> {
    let Ok(trie) = std::fs::read_to_string("/proc/net/fib_trie") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in trie.lines() {
        let t = line.trim_start_matches([' ', '|', '+', '-']).trim();
        if let Some(addr) = t
            .split_whitespace()
            .next()
            .and_then(|a| a.parse::<Ipv4Addr>().ok())
        {
            last = Some(addr);
        } else if t.contains("/32 host LOCAL")
            && let Some(addr) = last
            && !out.contains(&addr)
        {
            out.push(addr);
        }
    }
    out
}

/// The keeper's child that becomes `pasta`: forked while the keeper is still in the host's
/// namespaces, it waits until the sandbox's exist, then runs `pasta` against them.
pub(crate) struct Helper {
    pid: Pid,
    go: OwnedFd,
}

/// Gives the helper (still root, about to become the sandbox's uid) a `/dev/net/tun` of its
/// own that any uid may open, in a mount namespace of its own: the host's is often
/// root's alone (mode 0600), and `pasta`, running as the sandbox's uid, opens it to make the
/// sandbox's interface (which also needs `CAP_NET_ADMIN` over the sandbox's network
/// namespace: the tun device is only the door).
fn private_tun(one: &SingleThreaded) -> std::io::Result<()> {
    use rustix::fs::{FileType, Mode, OFlags};
    use rustix::mount::{
        FsMountFlags, FsOpenFlags, MountAttrFlags, MountPropagationFlags, MoveMountFlags,
    };
    sys::unshare(one, rustix::thread::UnshareFlags::NEWNS)?;
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )?;
    let fs = rustix::mount::fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)?;
    rustix::mount::fsconfig_set_string(&fs, "mode", "0755")?;
    rustix::mount::fsconfig_create(&fs)?;
    let tmpfs = rustix::mount::fsmount(
        &fs,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NOEXEC,
    )?;
    rustix::fs::mknodat(
        &tmpfs,
        "tun",
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o666),
        rustix::fs::makedev(10, 200),
    )?;
    rustix::fs::chmodat(
        &tmpfs,
        "tun",
        Mode::from_raw_mode(0o666),
        rustix::fs::AtFlags::empty(),
    )?;
    std::fs::create_dir_all("/dev/net")?;
    let at = rustix::fs::open(
        "/dev/net",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::mount::move_mount(
        &tmpfs,
        "",
        &at,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )?;
    Ok(())
}

impl Helper {
    /// Forks the helper (from the keeper, before it leaves the host's namespaces).
    pub(crate) fn fork(one: &SingleThreaded, net: &GuardedNetwork) -> Result<Self, String> {
        let (go_r, go_w) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| e.to_string())?;
        let mut argv = Vec::new();
        for a in &net.pasta {
            argv.push(
                std::ffi::CString::new(a.as_str())
                    .map_err(|_| "a NUL byte in pasta's arguments")?,
            );
        }
        match sys::fork(one).map_err(|e| format!("cannot fork the network helper: {e}"))? {
            Forked::Child => {
                drop(go_w);
                // "<holder pid> <uid or ->": whose namespaces to join, and as whom.
                let mut buf = [0u8; 64];
                let n = rustix::io::read(&go_r, &mut buf).unwrap_or(0);
                let message = std::str::from_utf8(&buf[..n])
                    .unwrap_or_default()
                    .to_owned();
                let mut parts = message.split_whitespace();
                let (Some(holder), Some(uid)) = (parts.next(), parts.next()) else {
                    sys::exit_now(0)
                };
                if let Ok(uid) = uid.parse::<u32>() {
                    if private_tun(one).is_err() {
                        sys::exit_now(126)
                    }
                    // As the sandbox's own host uid, never root: the namespaces are that
                    // uid's to join.
                    let (u, g) = (
                        rustix::process::Uid::from_raw(uid),
                        rustix::process::Gid::from_raw(uid),
                    );
                    let dropped = rustix::thread::set_thread_groups(&[])
                        .and_then(|()| rustix::thread::set_thread_res_gid(g, g, g))
                        .and_then(|()| rustix::thread::set_thread_res_uid(u, u, u));
                    if dropped.is_err() {
                        sys::exit_now(126)
                    }
                }
                let ns = |kind: &str| std::ffi::CString::new(format!("/proc/{holder}/ns/{kind}"));
                let (Ok(netns), Ok(userns)) = (ns("net"), ns("user")) else {
                    sys::exit_now(127)
                };
                argv.extend([c"--userns".to_owned(), userns, c"--netns".to_owned(), netns]);
                // Its stdin is the keeper's channel: not for pasta.
                if let Ok(null) = rustix::fs::open(
                    "/dev/null",
                    rustix::fs::OFlags::RDWR,
                    rustix::fs::Mode::empty(),
                ) {
                    let _ = rustix::stdio::dup2_stdin(&null);
                }
                let _ = sys::sigpipe(false);
                let e = sys::exec(&argv[0], &argv, &[]);
                let _ =
                    rustix::io::write(rustix::stdio::stderr(), format!("pasta: {e}\n").as_bytes());
                sys::exit_now(127)
            }
            Forked::Parent(pid) => Ok(Self { pid, go: go_w }),
        }
    }

    /// Lets `pasta` start against the namespaces of `holder` (as `uid`, when given), waits
    /// until the namespace's interface has its default route (the keeper is in that
    /// namespace now), then brings the loopback up and adds the guard routes.
    pub(crate) fn start(
        self,
        holder: Pid,
        uid: Option<u32>,
        net: &GuardedNetwork,
        patience: Duration,
    ) -> Result<Pid, String> {
        let kill = |why: String| {
            let _ = rustix::process::kill_process(self.pid, rustix::process::Signal::KILL);
            let _ = rustix::process::waitpid(Some(self.pid), rustix::process::WaitOptions::empty());
            why
        };
        let message = format!(
            "{} {}",
            holder.as_raw_nonzero(),
            uid.map_or_else(|| "-".to_owned(), |u| u.to_string())
        );
        rustix::io::write(&self.go, message.as_bytes())
            .map_err(|e| kill(format!("the network helper: {e}")))?;
        let deadline = Instant::now() + patience;
        loop {
            let routes = std::fs::read_to_string("/proc/self/net/route").unwrap_or_default();
            let up = routes.lines().skip(1).any(|l| {
                let mut f = l.split_whitespace();
                f.next() == Some(net.interface.as_str()) && f.next() == Some("00000000")
            });
            if up {
                break;
            }
            if let Ok(Some(_)) =
                rustix::process::waitpid(Some(self.pid), rustix::process::WaitOptions::NOHANG)
            {
                return Err("pasta exited before the network came up".into());
            }
            if Instant::now() > deadline {
                return Err(kill(format!("the network did not come up in {patience:?}")));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut ip = std::process::Command::new(&net.ip)
            .args(["-batch", "-"])
            .env_clear()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| kill(format!("{}: {e}", net.ip.display())))?;
        if let Some(mut stdin) = ip.stdin.take() {
            use std::io::Write as _;
            let mut batch = String::from("link set lo up\n");
            batch.push_str(&net.routes.join("\n"));
            let _ = stdin.write_all(batch.as_bytes());
        }
        let out = ip
            .wait_with_output()
            .map_err(|e| kill(format!("ip: {e}")))?;
        if !out.status.success() {
            return Err(kill(format!(
                "cannot add the guard routes: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(self.pid)
    }
}
