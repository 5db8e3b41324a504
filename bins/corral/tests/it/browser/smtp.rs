//! A tiny SMTP server on loopback that accepts every message and keeps it, so a test can read
//! the sign-in link a real mailer sent over a real socket. It speaks just enough of RFC 5321
//! (EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, QUIT); no TLS, no AUTH.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpListener;

/// One message received.
#[derive(Debug, Clone)]
pub(crate) struct Message {
    /// The envelope recipients.
    pub(crate) to: Vec<String>,
    /// The raw message (headers and body), dot-unstuffed.
    pub(crate) data: String,
}

/// The listener and what it caught.
#[derive(Clone)]
pub(crate) struct Smtp {
    pub(crate) port: u16,
    inbox: Arc<Mutex<Vec<Message>>>,
}

impl Smtp {
    /// Listens on `127.0.0.1:<free port>`.
    pub(crate) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let inbox = Arc::new(Mutex::new(Vec::new()));
        let caught = inbox.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let caught = caught.clone();
                tokio::spawn(async move {
                    let _ = session(stream, caught).await;
                });
            }
        });
        Smtp { port, inbox }
    }

    /// Waits (up to 10 s) for a message to `to` and returns the latest.
    pub(crate) async fn wait_for(&self, to: &str) -> Message {
        self.wait_for_containing(to, "").await
    }

    /// Waits (up to 10 s) for a message to `to` whose decoded body contains `needle`.
    pub(crate) async fn wait_for_containing(&self, to: &str, needle: &str) -> Message {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = self
                .inbox
                .lock()
                .unwrap()
                .iter()
                .rev()
                .find(|m| {
                    m.to.iter().any(|t| t.eq_ignore_ascii_case(to))
                        && decoded_body(&m.data).contains(needle)
                })
                .cloned();
            if let Some(m) = found {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "no mail to {to} with `{needle}` arrived"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn session(
    stream: tokio::net::TcpStream,
    inbox: Arc<Mutex<Vec<Message>>>,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    write.write_all(b"220 corral-test ESMTP\r\n").await?;
    let mut to = Vec::new();
    loop {
        let mut line = String::new();
        if lines.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let cmd = line.trim_end().to_owned();
        let verb = cmd
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        match verb.as_str() {
            "EHLO" => {
                write
                    .write_all(b"250-corral-test\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n")
                    .await?
            }
            "HELO" | "NOOP" => write.write_all(b"250 ok\r\n").await?,
            "MAIL" => {
                to.clear();
                write.write_all(b"250 ok\r\n").await?;
            }
            "RCPT" => {
                let addr = cmd
                    .split_once(':')
                    .map(|(_, a)| a.trim().trim_start_matches('<'))
                    .and_then(|a| a.split('>').next())
                    .unwrap_or_default()
                    .to_owned();
                to.push(addr);
                write.write_all(b"250 ok\r\n").await?;
            }
            "RSET" => {
                to.clear();
                write.write_all(b"250 ok\r\n").await?;
            }
            "DATA" => {
                write.write_all(b"354 end with <CRLF>.<CRLF>\r\n").await?;
                let mut data = String::new();
                loop {
                    let mut l = String::new();
                    if lines.read_line(&mut l).await? == 0 {
                        return Ok(());
                    }
                    if l == ".\r\n" || l == ".\n" {
                        break;
                    }
                    data.push_str(l.strip_prefix('.').unwrap_or(&l));
                }
                inbox.lock().unwrap().push(Message {
                    to: std::mem::take(&mut to),
                    data,
                });
                write.write_all(b"250 queued\r\n").await?;
            }
            "QUIT" => {
                write.write_all(b"221 bye\r\n").await?;
                return Ok(());
            }
            _ => write.write_all(b"502 not implemented\r\n").await?,
        }
    }
}

/// The decoded text of a message body: undoes quoted-printable soft breaks and `=XX` escapes
/// (mailers wrap long links that way), leaving other bodies as they are.
pub(crate) fn decoded_body(data: &str) -> String {
    let body = data.split_once("\r\n\r\n").map_or(data, |(_, b)| b);
    let joined = body.replace("=\r\n", "").replace("=\n", "");
    let bytes = joined.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'=' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
