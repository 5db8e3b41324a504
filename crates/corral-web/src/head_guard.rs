//! The request-head guard: a thin layer under actix-http, on each connection's bytes.
//!
//! actix-http answers a request head over its private limits (no complete head within its
//! 128 KiB read buffer, or more than 96 header fields) with a bare 431, and a head `httparse`
//! rejects with a bare 400, before any of Corral's code runs; it offers no hook to change
//! either. [`GuardedStream`] sits between the socket and actix-http. It passes every byte
//! through unchanged, but tracks HTTP/1.1 request framing on the read side (`Framer`), so it
//! knows where each request head begins and ends. A head over Corral's limits
//! ([`MAX_HEAD_BYTES`], [`MAX_HEAD_FIELDS`]), or one `httparse` rejects, is dropped together
//! with everything after it on the connection, and actix-http is handed instead a small
//! substitute request carrying a per-process random token (`x-corral-refused`);
//! the request middleware (`crate::middleware`) answers that request with the JSON envelope. The substitute is an
//! ordinary request in its place on the connection, so requests pipelined before the refused
//! head get their own answers first.
//!
//! Anything the framer cannot frame with certainty (a WebSocket upgrade — `Upgrade: websocket`
//! with `Connection: upgrade` —, the method `CONNECT` spelled exactly so, several or unusual
//! Content-Length or Transfer-Encoding fields, a malformed chunked body, the HTTP/2 preface)
//! switches the connection to plain pass-through for good, and actix-http answers as it always
//! did: a wrong boundary would rewrite body bytes. Any other `Upgrade:` field, or a `connect`
//! in another case, is framed as actix-http frames it: as an ordinary request. An
//! `Upgrade: websocket` without `Connection: upgrade` (no handshake, yet actix-http would read
//! the rest of the connection as its body) is refused as malformed.
//!
//! After a request that closes the connection (`Connection: close`, or HTTP/1.0 without
//! `Connection: keep-alive`) and its body, nothing more is handed on: requests pipelined after
//! it are not executed (RFC 9112 §9.6; actix-http would run them all), so a client that retries
//! them on another connection cannot have them run twice. Where it frames, it follows actix-http's own
//! rules (the same `httparse` call, its Content-Length and Transfer-Encoding checks, its
//! chunked-body state machine), so both always agree on where a request ends.
//!
//! Pure framing: it knows no application. [`crate::listen::bind`] builds the listener pipeline
//! with this stream (what `actix_web::HttpServer` did).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The largest request head Corral accepts, in bytes (request line, header fields and the
/// blank line). Below actix-http's 128 KiB read buffer, so a head too large is always refused
/// here, with the envelope, before actix-http could refuse it with a bare 431.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The most header fields a request head may carry: actix-http's own (private) limit, so the
/// guard refuses exactly the heads actix-http would, and answers them with the envelope.
pub const MAX_HEAD_FIELDS: usize = 96;

/// The header field of the substitute request: `<reason> <token>`.
pub const REFUSED_HEADER: &str = "x-corral-refused";

/// How long a refused connection keeps reading and discarding what the client still sends
/// after the answer, so the client reads the answer instead of a reset.
const LINGER: Duration = Duration::from_secs(2);

/// Bytes read from the socket at a time while lingering; a head buffer larger than four of
/// these is given back after use.
const READ_CHUNK: usize = 8 * 1024;

/// Socket reads one poll may make without handing anything on (while discarding after a
/// refusal) before it yields to other connections.
const READ_ROUNDS: usize = 32;

/// The start of the HTTP/2 connection preface (passed through: actix-http answers it).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// Why a request head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Over [`MAX_HEAD_BYTES`] or [`MAX_HEAD_FIELDS`]: 431.
    TooLarge,
    /// Not a request head `httparse` accepts: 400.
    Malformed,
}

impl Refusal {
    fn name(self) -> &'static str {
        match self {
            Refusal::TooLarge => "head-too-large",
            Refusal::Malformed => "malformed-head",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [Refusal::TooLarge, Refusal::Malformed]
            .into_iter()
            .find(|r| r.name() == name)
    }

    /// The HTTP status of the answer.
    pub fn status(self) -> u16 {
        match self {
            Refusal::TooLarge => 431,
            Refusal::Malformed => 400,
        }
    }

    /// The envelope's message.
    pub fn message(self) -> String {
        match self {
            Refusal::TooLarge => format!(
                "request head too large: at most {MAX_HEAD_BYTES} bytes and {MAX_HEAD_FIELDS} \
                 header fields"
            ),
            Refusal::Malformed => "malformed request head".to_owned(),
        }
    }
}

/// This process's token for substitute requests (128 random bits, hex), made once; `None`
/// when the system has no randomness to give, and then the guard never substitutes (it passes
/// such heads through and actix-http answers them as before).
pub(crate) fn token() -> Option<&'static str> {
    static TOKEN: OnceLock<Option<String>> = OnceLock::new();
    TOKEN
        .get_or_init(|| {
            let mut bytes = [0u8; 16];
            match getrandom::fill(&mut bytes) {
                Ok(()) => Some(bytes.iter().map(|b| format!("{b:02x}")).collect()),
                Err(e) => {
                    tracing::warn!(error = %e, "no randomness: oversized request heads get actix-http's bare answers");
                    None
                }
            }
        })
        .as_deref()
}

/// The refusal a substitute request's `x-corral-refused` value stands for, if it carries this
/// process's token (anything else, a client's forgery included, is an ordinary header).
pub(crate) fn refusal_of(value: &[u8]) -> Option<Refusal> {
    let token = token()?;
    let text = std::str::from_utf8(value).ok()?;
    let (reason, given) = text.split_once(' ')?;
    let same = given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if same {
        Refusal::from_name(reason)
    } else {
        None
    }
}

/// The request handed to actix-http in place of a refused head.
pub(crate) fn substitute(refusal: Refusal, token: &str) -> Vec<u8> {
    format!(
        "GET / HTTP/1.1\r\nhost: corral\r\nconnection: close\r\n{REFUSED_HEADER}: {} {token}\r\n\r\n",
        refusal.name()
    )
    .into_bytes()
}

/// Where the read side of a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between requests or inside a head (buffered in [`Framer::head`]).
    Head,
    /// Inside a body of known length: this many bytes left.
    Length(u64),
    /// Inside a chunked body.
    Chunked(Chunked),
    /// Not framed any more: everything is handed on as it comes.
    PassThrough,
    /// A head was refused: the substitute was handed on, everything after is discarded.
    Refused,
    /// The request that closes the connection was handed on: everything after is discarded.
    Closed,
}

/// How the body after a complete head is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    None,
    Length(u64),
    Chunked,
    /// Cannot be framed with certainty.
    Unknown,
}

/// How a complete head is followed: its body, and whether it is the connection's last request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Framing {
    body: Body,
    last: bool,
}

/// A request's `Connection` field as actix-http reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Connection {
    Close,
    KeepAlive,
    Upgrade,
}

/// What one parse of a head buffer found.
#[derive(Debug)]
enum Parsed {
    Partial,
    Complete {
        len: usize,
        body: Framing,
    },
    Refused(Refusal),
    /// Not HTTP/1 (the HTTP/2 preface).
    Foreign,
}

/// The read side's HTTP/1.1 request framing: bytes in, bytes to hand on out (the same bytes,
/// except that each head is held back until complete, and a refused head and all after it are
/// replaced by the substitute request).
#[derive(Debug)]
pub(crate) struct Framer {
    state: State,
    /// The head read so far (never more than `MAX_HEAD_BYTES + 1` bytes).
    head: Vec<u8>,
    /// How much of `head` was already looked at for the blank line that ends a head.
    searched: usize,
    token: Option<&'static str>,
    /// The request being read closes the connection: after its body comes [`State::Closed`].
    last: bool,
}

impl Framer {
    /// A framer for a new connection; `token` marks substitute requests (none: never refuse,
    /// pass such heads through instead).
    pub(crate) fn new(token: Option<&'static str>) -> Self {
        Self {
            state: State::Head,
            head: Vec::new(),
            searched: 0,
            token,
            last: false,
        }
    }

    fn is_pass_through(&self) -> bool {
        self.state == State::PassThrough
    }

    /// Whether everything still read is discarded (after a refusal or the last request).
    fn is_discarding(&self) -> bool {
        matches!(self.state, State::Refused | State::Closed)
    }

    /// Takes the bytes of one read; appends what to hand on to `out`.
    pub(crate) fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        loop {
            let same = self.pass(input);
            out.extend_from_slice(&input[..same]);
            input = &input[same..];
            if input.is_empty() {
                return;
            }
            match self.state {
                State::Refused | State::Closed => return,
                // `pass` stops only in a head it cannot hand on as it lies, or after a refusal.
                _ => input = self.head(input, out),
            }
        }
    }

    /// How many leading bytes of `input` are handed on exactly as they are (body bytes,
    /// whole heads within the limits, everything once passing through), advancing over them;
    /// the rest, if any, goes to [`Framer::feed`]. The common case is all of them, so a
    /// stream can leave them where they were read.
    pub(crate) fn pass(&mut self, input: &[u8]) -> usize {
        let mut at = 0;
        while at < input.len() {
            let rest = &input[at..];
            at += match &mut self.state {
                State::PassThrough => rest.len(),
                State::Length(left) => {
                    let n = usize::try_from(*left).map_or(rest.len(), |l| l.min(rest.len()));
                    *left -= n as u64;
                    if *left == 0 {
                        self.state = self.next_head();
                    }
                    n
                }
                State::Chunked(chunked) => match chunked.advance(rest) {
                    (used, Step::More) => used,
                    (used, Step::End) => {
                        self.state = self.next_head();
                        used
                    }
                    // actix-http rejects the body at the same byte; it answers as before.
                    (_, Step::Invalid) => {
                        self.state = State::PassThrough;
                        rest.len()
                    }
                },
                State::Head if self.head.is_empty() => {
                    // The common case: a whole head in one read, parsed where it lies.
                    match inspect(&rest[..rest.len().min(MAX_HEAD_BYTES + 1)]) {
                        Parsed::Complete { len, body } if len <= MAX_HEAD_BYTES => {
                            self.after_head(body);
                            len
                        }
                        _ => return at,
                    }
                }
                State::Head | State::Refused | State::Closed => return at,
            };
        }
        at
    }

    /// The connection's read side ended: a head still incomplete is handed on as it is (actix
    /// sees what it would have seen without the guard), unless it is already malformed.
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) {
        if self.state == State::Head && !self.head.is_empty() {
            match inspect(&self.head) {
                Parsed::Refused(refusal) => {
                    self.refuse(refusal, &[], out);
                }
                _ => {
                    out.extend_from_slice(&self.head);
                    self.reset_head();
                }
            }
        }
    }

    /// Bytes of a head (or the start of one); returns the input after the head.
    fn head<'a>(&mut self, input: &'a [u8], out: &mut Vec<u8>) -> &'a [u8] {
        if self.head.is_empty() {
            // The start of a head (`pass` took it if it was whole and within the limits).
            // Whatever the reads, the verdict depends only on the first `MAX_HEAD_BYTES + 1`
            // bytes (and on where the stream ends), since `httparse` decides left to right.
            match inspect(&input[..input.len().min(MAX_HEAD_BYTES + 1)]) {
                Parsed::Complete { len, body } if len <= MAX_HEAD_BYTES => {
                    out.extend_from_slice(&input[..len]);
                    self.after_head(body);
                    return &input[len..];
                }
                Parsed::Complete { .. } => return self.refuse(Refusal::TooLarge, input, out),
                Parsed::Refused(refusal) => return self.refuse(refusal, input, out),
                Parsed::Foreign => return self.pass_through(input, out),
                Parsed::Partial if input.len() > MAX_HEAD_BYTES => {
                    return self.refuse(Refusal::TooLarge, input, out);
                }
                Parsed::Partial => {
                    self.head.extend_from_slice(input);
                    self.searched = input.len();
                    return &[];
                }
            }
        }
        let old = self.head.len();
        let take = input.len().min(MAX_HEAD_BYTES + 1 - old);
        let rest = &input[take..];
        self.head.extend_from_slice(&input[..take]);
        // Parse again only when a blank line may have arrived (or the limit is reached):
        // linear in the head's size however it is split into reads.
        let from = self.searched.saturating_sub(2);
        self.searched = self.head.len();
        if has_blank_line(&self.head[from..]) || self.head.len() > MAX_HEAD_BYTES {
            match inspect(&self.head) {
                Parsed::Complete { len, body } if len <= MAX_HEAD_BYTES && len > old => {
                    out.extend_from_slice(&self.head[..len]);
                    self.reset_head();
                    self.after_head(body);
                    // All of the read after the head: what was not appended follows it.
                    return &input[len - old..];
                }
                // `head` held no complete head before this read, so `len > old`; were it not,
                // hand everything on unframed rather than guess.
                Parsed::Complete { len, .. } if len <= MAX_HEAD_BYTES => {
                    return self.pass_through(rest, out);
                }
                Parsed::Complete { .. } => return self.refuse(Refusal::TooLarge, rest, out),
                Parsed::Refused(refusal) => return self.refuse(refusal, rest, out),
                Parsed::Foreign => return self.pass_through(rest, out),
                Parsed::Partial => {}
            }
        }
        if self.head.len() > MAX_HEAD_BYTES {
            return self.refuse(Refusal::TooLarge, rest, out);
        }
        rest
    }

    /// Where the read side is once a request (head and body) is over.
    fn next_head(&self) -> State {
        if self.last {
            State::Closed
        } else {
            State::Head
        }
    }

    fn after_head(&mut self, Framing { body, last }: Framing) {
        self.last = last;
        self.state = match body {
            Body::None | Body::Length(0) => self.next_head(),
            Body::Length(n) => State::Length(n),
            Body::Chunked => State::Chunked(Chunked::default()),
            Body::Unknown => State::PassThrough,
        };
    }

    /// Replaces the buffered head and everything after it with the substitute request.
    /// `unread` is input not yet added to `head`.
    fn refuse<'a>(&mut self, refusal: Refusal, unread: &'a [u8], out: &mut Vec<u8>) -> &'a [u8] {
        let Some(token) = self.token else {
            return self.pass_through(unread, out);
        };
        out.extend_from_slice(&substitute(refusal, token));
        self.reset_head();
        self.state = State::Refused;
        &[]
    }

    /// Hands on the buffered head and `unread`, and everything after, unframed.
    fn pass_through<'a>(&mut self, unread: &'a [u8], out: &mut Vec<u8>) -> &'a [u8] {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(unread);
        self.reset_head();
        self.state = State::PassThrough;
        &[]
    }

    fn reset_head(&mut self) {
        if self.head.capacity() > 4 * READ_CHUNK {
            self.head = Vec::new();
        } else {
            self.head.clear();
        }
        self.searched = 0;
    }
}

/// Whether `bytes` hold a line end followed by an empty line (`\n\n` or `\n\r\n`), the only
/// way a head ends for `httparse`.
fn has_blank_line(bytes: &[u8]) -> bool {
    bytes.iter().enumerate().any(|(i, &b)| {
        b == b'\n'
            && match bytes.get(i + 1) {
                Some(b'\n') => true,
                Some(b'\r') => bytes.get(i + 2) == Some(&b'\n'),
                _ => false,
            }
    })
}

/// Parses a head as actix-http does (the same `httparse` call, 96 fields) and frames its body
/// by actix-http's rules.
fn inspect(buf: &[u8]) -> Parsed {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEAD_FIELDS];
    let mut req = httparse::Request::new(&mut fields);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => match framing_of(&req) {
            Ok(body) => Parsed::Complete { len, body },
            Err(refusal) => Parsed::Refused(refusal),
        },
        Ok(httparse::Status::Partial) => Parsed::Partial,
        Err(_) if buf.starts_with(H2_PREFACE) => Parsed::Foreign,
        Err(httparse::Error::TooManyHeaders) => Parsed::Refused(Refusal::TooLarge),
        Err(_) => Parsed::Refused(Refusal::Malformed),
    }
}

/// The framing of a parsed head: its body and whether it closes the connection.
/// `Upgrade: websocket` without `Connection: upgrade` is refused: no handshake, and actix-http
/// would read everything after it as its body.
fn framing_of(req: &httparse::Request<'_, '_>) -> Result<Framing, Refusal> {
    // actix-http's connection type, read as it reads it: `close` wins, `upgrade` over
    // `keep-alive`; none given: keep-alive from HTTP/1.1 on. It closes the connection after
    // answering any request whose type is not keep-alive.
    let (mut connection, mut websocket) = (None, false);
    for field in req.headers.iter() {
        if field.name.eq_ignore_ascii_case("connection") {
            for option in field_text(field.value)
                .unwrap_or("")
                .split(',')
                .map(str::trim)
            {
                if option.eq_ignore_ascii_case("close") {
                    connection = Some(Connection::Close);
                    break;
                } else if option.eq_ignore_ascii_case("upgrade")
                    && connection != Some(Connection::Close)
                {
                    connection = Some(Connection::Upgrade);
                } else if option.eq_ignore_ascii_case("keep-alive") && connection.is_none() {
                    connection = Some(Connection::KeepAlive);
                }
            }
        } else if field.name.eq_ignore_ascii_case("upgrade") {
            websocket |=
                field_text(field.value).is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
        }
    }
    let body = body_of(req, websocket);
    if websocket && body == Body::Unknown && connection != Some(Connection::Upgrade) {
        return Err(Refusal::Malformed);
    }
    let last = match connection {
        Some(Connection::KeepAlive) => false,
        Some(Connection::Close | Connection::Upgrade) => true,
        None => req.version == Some(0),
    };
    Ok(Framing { body, last })
}

/// The body framing of a parsed head, by actix-http's rules (`h1/decoder.rs`); anything those
/// rules reject or hand to an upgrade (`websocket`: the head says `Upgrade: websocket`) is
/// `Unknown` (actix-http answers it, the guard steps aside). Only the method spelled exactly
/// `CONNECT` is actix-http's CONNECT: `connect` is an ordinary extension method to it.
fn body_of(req: &httparse::Request<'_, '_>, websocket: bool) -> Body {
    if req.method == Some("CONNECT") {
        return Body::Unknown;
    }
    let (mut lengths, mut encodings) = (Vec::new(), Vec::new());
    for field in req.headers.iter() {
        if field.name.eq_ignore_ascii_case("content-length") {
            lengths.push(field.value);
        } else if field.name.eq_ignore_ascii_case("transfer-encoding") {
            encodings.push(field.value);
        }
    }
    // actix-http reads a chunked body first, then a WebSocket upgrade's stream to the end.
    let chunked = matches!(encodings.as_slice(), [te] if req.version == Some(1)
        && field_text(te).is_some_and(|v| v.eq_ignore_ascii_case("chunked")));
    if websocket && !chunked {
        return Body::Unknown;
    }
    match (lengths.as_slice(), encodings.as_slice()) {
        ([], []) => Body::None,
        ([], [te])
            if req.version == Some(1)
                && field_text(te).is_some_and(|v| v.eq_ignore_ascii_case("chunked")) =>
        {
            Body::Chunked
        }
        ([cl], []) => field_text(cl)
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse().ok())
            .map_or(Body::Unknown, Body::Length),
        _ => Body::Unknown,
    }
}

/// A field value as actix-http reads it (`HeaderValue::to_str`, then trimmed).
fn field_text(value: &[u8]) -> Option<&str> {
    if !value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
    {
        return None;
    }
    Some(std::str::from_utf8(value).ok()?.trim())
}

/// Where a chunked body is: actix-http's `ChunkedState`, byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum ChunkAt {
    #[default]
    SizeFirst,
    SizeRest,
    SizeLws,
    Extension,
    SizeLf,
    Body,
    BodyCr,
    BodyLf,
    Trailer,
    TrailerLf,
    EndCr,
    EndLf,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Chunked {
    at: ChunkAt,
    /// The current chunk's size, then the bytes of it left.
    size: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// All the input belongs to the body, which goes on.
    More,
    /// The body ended after this many bytes.
    End,
    /// actix-http rejects the body here.
    Invalid,
}

fn hex(b: u8) -> Option<u64> {
    (b as char).to_digit(16).map(u64::from)
}

impl Chunked {
    /// Consumes body bytes from `input`: how many, and what follows.
    fn advance(&mut self, input: &[u8]) -> (usize, Step) {
        use ChunkAt::*;
        let mut i = 0;
        while i < input.len() {
            if self.at == Body {
                let n =
                    usize::try_from(self.size).map_or(input.len() - i, |s| s.min(input.len() - i));
                i += n;
                self.size -= n as u64;
                if self.size == 0 {
                    self.at = BodyCr;
                }
                continue;
            }
            let b = input[i];
            i += 1;
            self.at = match (self.at, b) {
                (SizeFirst, b) => match hex(b) {
                    Some(v) => {
                        self.size = v;
                        SizeRest
                    }
                    None => return (i, Step::Invalid),
                },
                (SizeRest, b'\t' | b' ') => SizeLws,
                (SizeRest, b';') => Extension,
                (SizeRest, b'\r') => SizeLf,
                (SizeRest, b) => {
                    match hex(b).and_then(|v| self.size.checked_mul(16)?.checked_add(v)) {
                        Some(size) => {
                            self.size = size;
                            SizeRest
                        }
                        None => return (i, Step::Invalid),
                    }
                }
                (SizeLws, b'\t' | b' ') => SizeLws,
                (SizeLws, b';') => Extension,
                (SizeLws, b'\r') => SizeLf,
                (Extension, b'\r') => SizeLf,
                (Extension, 0x00..=0x08 | 0x0a..=0x1f | 0x7f) => return (i, Step::Invalid),
                (Extension, _) => Extension,
                (SizeLf, b'\n') if self.size > 0 => Body,
                (SizeLf, b'\n') => EndCr,
                (BodyCr, b'\r') => BodyLf,
                (BodyLf, b'\n') => SizeFirst,
                (Trailer, b'\r') => TrailerLf,
                (Trailer, _) => Trailer,
                (TrailerLf, b'\n') => EndCr,
                (EndCr, b'\r') => EndLf,
                (EndCr, _) => Trailer,
                (EndLf, b'\n') => {
                    self.at = Done;
                    return (i, Step::End);
                }
                _ => return (i, Step::Invalid),
            };
        }
        (i, Step::More)
    }
}

/// A connection's stream as actix-http sees it: the socket's bytes through a `Framer` on the
/// read side, unchanged on the write side.
pub struct GuardedStream<S> {
    io: S,
    framer: Framer,
    /// Bytes to hand on, from `out_at` (only what differs from the socket's bytes: a held
    /// head once complete, a substitute).
    out: Vec<u8>,
    out_at: usize,
    /// Read buffer of the linger after a refusal.
    scratch: Vec<u8>,
    eof: bool,
    write_closed: bool,
    linger: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> GuardedStream<S> {
    /// Guards `io` with this process's token.
    pub fn new(io: S) -> Self {
        Self::with_token(io, token())
    }

    pub(crate) fn with_token(io: S, token: Option<&'static str>) -> Self {
        Self {
            io,
            framer: Framer::new(token),
            out: Vec::new(),
            out_at: 0,
            scratch: Vec::new(),
            eof: false,
            write_closed: false,
            linger: None,
        }
    }
}

impl<S: AsyncRead + Unpin> GuardedStream<S> {
    /// One read from the socket into `scratch`: the byte count (0 at end of stream).
    fn poll_socket(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.scratch.is_empty() {
            self.scratch = vec![0; READ_CHUNK];
        }
        let mut rb = ReadBuf::new(&mut self.scratch);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
        Poll::Ready(Ok(rb.filled().len()))
    }

    /// After a refusal or the connection's last request: the answer is out, the write side is
    /// closed; reads and discards until the client closes or [`LINGER`] passes.
    fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>
    where
        S: AsyncWrite,
    {
        if !self.write_closed {
            ready!(Pin::new(&mut self.io).poll_shutdown(cx))?;
            self.write_closed = true;
        }
        for _ in 0..READ_ROUNDS {
            if self.eof {
                return Poll::Ready(Ok(()));
            }
            match self.poll_socket(cx) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => self.eof = true,
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => break,
            }
        }
        if self.eof {
            return Poll::Ready(Ok(()));
        }
        let linger = self
            .linger
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(LINGER)));
        ready!(linger.as_mut().poll(cx));
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for GuardedStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        for _ in 0..READ_ROUNDS {
            if this.out_at < this.out.len() {
                let n = (this.out.len() - this.out_at).min(buf.remaining());
                buf.put_slice(&this.out[this.out_at..this.out_at + n]);
                this.out_at += n;
                if this.out_at == this.out.len() {
                    this.out = Vec::new();
                    this.out_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            if this.framer.is_pass_through() {
                return Pin::new(&mut this.io).poll_read(cx, buf);
            }
            // Read where actix-http reads; bytes handed on as they are stay there.
            let before = buf.filled().len();
            ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
            let read = buf.filled().len() - before;
            if read == 0 {
                this.eof = true;
                this.framer.finish(&mut this.out);
                continue;
            }
            let same = this.framer.pass(&buf.filled()[before..]);
            if same == read {
                return Poll::Ready(Ok(()));
            }
            // A head to hold back, refuse or discard: the rest of the read goes through
            // `feed`, and what it hands on follows (now or on the next read).
            let rest = buf.filled()[before + same..].to_vec();
            buf.set_filled(before + same);
            this.framer.feed(&rest, &mut this.out);
            if same > 0 {
                return Poll::Ready(Ok(()));
            }
        }
        // Only discarding (after a refusal or the last request) gets here: let other connections run.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for GuardedStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.framer.is_discarding() {
            this.poll_linger(cx)
        } else {
            Pin::new(&mut this.io).poll_shutdown(cx)
        }
    }
}

#[cfg(test)]
mod tests;
