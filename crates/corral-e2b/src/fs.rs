//! Filesystem operations of envd as shell commands and their parsed answers.
//!
//! E2B's SDKs call envd's `filesystem.Filesystem/{Stat,ListDir,MakeDir,Remove,Move}` (Connect-RPC,
//! JSON codec) and `/files` (upload and download). Corral serves them on any provider through
//! one primitive: run a `sh -c` script and read stdout, stderr and the exit code. This module
//! is the pure part of that translation:
//!
//! - [`resolve`] turns a request path into the absolute, cleaned path envd would use (relative
//!   paths and `~` under [`HOME`]);
//! - the wire types ([`StatRequest`], [`EntryInfo`], …) serialize as protojson does (lowerCamelCase,
//!   enum names, int64 as a string, zero values omitted);
//! - `<op>_script` builds one POSIX `sh` script (busybox-compatible: `stat -c`, `readlink -f`,
//!   `mkdir`, `rm`, `mv`, shell globs; no GNU-only options), and `parse_<op>` reads its output.
//!   Scripts print NUL-separated records ending in an `END` record, so any byte in a file name is
//!   carried and a cut-off output is detected; a failure prints a
//!   `CORRAL_FS_ERROR:<code>:<message>` line on stderr (and exits with a code per kind), so the
//!   parsing never depends on a locale's wording;
//! - [`parse_multipart`] reads a `multipart/form-data` upload as the SDK (httpx) sends it, and
//!   [`write_info`] answers an upload the way envd does.
//!
//! Behaviour follows envd: `Remove` of a missing path succeeds, `MakeDir` of an existing
//! directory is `already_exists` (the SDK's `make_dir` then returns `False`), `ListDir` of a file
//! is `invalid_argument`, `Move` creates the destination's parent directories. A symlink is
//! reported with `isSymlink`, its resolved target and its target's type (as recent envd does); a
//! dangling one as `FILE_TYPE_SYMLINK` without a target.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The default user's home: where relative paths resolve, as in E2B's sandboxes.
pub const HOME: &str = "/home/user";

/// The marker a script prints before a failure's code and message.
const ERROR_MARKER: &str = "CORRAL_FS_ERROR:";

/// The most bytes of a command's own output quoted in an error message.
const MAX_QUOTED_OUTPUT: usize = 2000;

/// The most parts one multipart upload may hold.
const MAX_PARTS: usize = 1000;

/// The most bytes one part's header block may take.
const MAX_PART_HEADER_BYTES: usize = 16 * 1024;

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// A Connect error code (<https://connectrpc.com/docs/protocol#error-codes>).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectCode {
    /// `canceled`
    Canceled,
    /// `unknown`
    Unknown,
    /// `invalid_argument`
    InvalidArgument,
    /// `deadline_exceeded`
    DeadlineExceeded,
    /// `not_found`
    NotFound,
    /// `already_exists`
    AlreadyExists,
    /// `permission_denied`
    PermissionDenied,
    /// `resource_exhausted`
    ResourceExhausted,
    /// `failed_precondition`
    FailedPrecondition,
    /// `aborted`
    Aborted,
    /// `out_of_range`
    OutOfRange,
    /// `unimplemented`
    Unimplemented,
    /// `internal`
    Internal,
    /// `unavailable`
    Unavailable,
    /// `data_loss`
    DataLoss,
    /// `unauthenticated`
    Unauthenticated,
}

impl ConnectCode {
    /// Every code, in Connect's order.
    pub const ALL: [ConnectCode; 16] = [
        ConnectCode::Canceled,
        ConnectCode::Unknown,
        ConnectCode::InvalidArgument,
        ConnectCode::DeadlineExceeded,
        ConnectCode::NotFound,
        ConnectCode::AlreadyExists,
        ConnectCode::PermissionDenied,
        ConnectCode::ResourceExhausted,
        ConnectCode::FailedPrecondition,
        ConnectCode::Aborted,
        ConnectCode::OutOfRange,
        ConnectCode::Unimplemented,
        ConnectCode::Internal,
        ConnectCode::Unavailable,
        ConnectCode::DataLoss,
        ConnectCode::Unauthenticated,
    ];

    /// The code's name on the wire (`"not_found"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectCode::Canceled => "canceled",
            ConnectCode::Unknown => "unknown",
            ConnectCode::InvalidArgument => "invalid_argument",
            ConnectCode::DeadlineExceeded => "deadline_exceeded",
            ConnectCode::NotFound => "not_found",
            ConnectCode::AlreadyExists => "already_exists",
            ConnectCode::PermissionDenied => "permission_denied",
            ConnectCode::ResourceExhausted => "resource_exhausted",
            ConnectCode::FailedPrecondition => "failed_precondition",
            ConnectCode::Aborted => "aborted",
            ConnectCode::OutOfRange => "out_of_range",
            ConnectCode::Unimplemented => "unimplemented",
            ConnectCode::Internal => "internal",
            ConnectCode::Unavailable => "unavailable",
            ConnectCode::DataLoss => "data_loss",
            ConnectCode::Unauthenticated => "unauthenticated",
        }
    }

    /// The code named `s` on the wire.
    pub fn from_name(s: &str) -> Option<ConnectCode> {
        ConnectCode::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The HTTP status Connect answers a unary call failing with this code.
    pub fn http_status(self) -> u16 {
        match self {
            ConnectCode::Canceled => 499,
            ConnectCode::Unknown => 500,
            ConnectCode::InvalidArgument => 400,
            ConnectCode::DeadlineExceeded => 504,
            ConnectCode::NotFound => 404,
            ConnectCode::AlreadyExists => 409,
            ConnectCode::PermissionDenied => 403,
            ConnectCode::ResourceExhausted => 429,
            ConnectCode::FailedPrecondition => 400,
            ConnectCode::Aborted => 409,
            ConnectCode::OutOfRange => 400,
            ConnectCode::Unimplemented => 501,
            ConnectCode::Internal => 500,
            ConnectCode::Unavailable => 503,
            ConnectCode::DataLoss => 500,
            ConnectCode::Unauthenticated => 401,
        }
    }

    /// The exit code a script ends with for this failure (a second signal beside the marker).
    fn script_exit(self) -> i32 {
        match self {
            ConnectCode::NotFound => 44,
            ConnectCode::AlreadyExists => 45,
            ConnectCode::InvalidArgument => 46,
            ConnectCode::PermissionDenied => 47,
            _ => 48,
        }
    }
}

impl fmt::Display for ConnectCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A filesystem operation's failure: the Connect code the SDK turns into its exception
/// (`not_found` → `NotFoundException`/`FileNotFoundException`, `invalid_argument` →
/// `InvalidArgumentException`, …) and a message for the caller.
///
/// A plain struct rather than a snafu enum: its two fields are the wire's own shape, and every
/// producer in this module picks the code explicitly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsError {
    /// The Connect code.
    pub code: ConnectCode,
    /// What went wrong, for the caller.
    pub message: String,
}

impl FsError {
    /// A failure with `code` and `message`.
    pub fn new(code: ConnectCode, message: impl Into<String>) -> Self {
        FsError { code, message: message.into() }
    }

    fn invalid(message: impl Into<String>) -> Self {
        FsError::new(ConnectCode::InvalidArgument, message)
    }

    fn internal(message: impl Into<String>) -> Self {
        FsError::new(ConnectCode::Internal, message)
    }

    /// The HTTP status of this failure ([`ConnectCode::http_status`]).
    pub fn http_status(&self) -> u16 {
        self.code.http_status()
    }

    /// Connect's unary error body: `{"code": "not_found", "message": "…"}`.
    pub fn connect_body(&self) -> serde_json::Value {
        serde_json::json!({ "code": self.code.as_str(), "message": self.message })
    }

    /// envd's `/files` error body: `{"code": 404, "message": "…"}` (the SDK reads `message`
    /// and maps the HTTP status).
    pub fn files_body(&self) -> serde_json::Value {
        serde_json::json!({ "code": self.http_status(), "message": self.message })
    }
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for FsError {}

// ---------------------------------------------------------------------------------------------
// Paths and quoting
// ---------------------------------------------------------------------------------------------

/// The absolute, cleaned path envd uses for a request path.
///
/// `~` and `~/…` expand to [`HOME`]; a relative path joins [`HOME`]; an empty path is
/// [`HOME`] itself (envd joins it to the home directory too). The result is cleaned as Go's
/// `filepath.Clean`: repeated slashes folded, `.` dropped, `..` resolved lexically and never
/// above `/`, no trailing slash. `~user` (another user's home) and a NUL byte are
/// `invalid_argument`.
pub fn resolve(path: &str) -> Result<String, FsError> {
    if path.contains('\0') {
        return Err(FsError::invalid("path must not contain a NUL byte"));
    }
    let joined = if let Some(rest) = path.strip_prefix('~') {
        if !rest.is_empty() && !rest.starts_with('/') {
            return Err(FsError::invalid(format!(
                "cannot expand another user's home directory in path {path:?}"
            )));
        }
        format!("{HOME}/{rest}")
    } else if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{HOME}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// `s` as one single-quoted `sh` word: safe for any text, quotes and newlines included
/// (a `'` becomes `'\''`).
pub fn shell_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// The last component of a cleaned absolute path (`/` for the root, as Go's `FileInfo.Name`).
fn base_name(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some((_, "")) | None => "/",
        Some((_, name)) => name,
    }
}

// ---------------------------------------------------------------------------------------------
// Wire types
// ---------------------------------------------------------------------------------------------

/// `filesystem.FileType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum FileType {
    /// Neither a regular file nor a directory (or a symlink's target of another kind).
    #[default]
    #[serde(rename = "FILE_TYPE_UNSPECIFIED")]
    Unspecified,
    /// A regular file.
    #[serde(rename = "FILE_TYPE_FILE")]
    File,
    /// A directory.
    #[serde(rename = "FILE_TYPE_DIRECTORY")]
    Directory,
    /// A symlink (only a dangling one: a resolvable one reports its target's type).
    #[serde(rename = "FILE_TYPE_SYMLINK")]
    Symlink,
}

impl FileType {
    fn is_unspecified(&self) -> bool {
        *self == FileType::Unspecified
    }
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

/// protojson writes an int64 as a JSON string.
fn serialize_i64_string<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

/// An integer as protojson reads it: a JSON number or a decimal string.
#[derive(Deserialize)]
#[serde(untagged)]
enum NumberOrString {
    Number(i64),
    String(String),
}

fn deserialize_i64_lenient<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    match NumberOrString::deserialize(d)? {
        NumberOrString::Number(n) => Ok(n),
        NumberOrString::String(s) => s.trim().parse().map_err(serde::de::Error::custom),
    }
}

fn deserialize_u32_lenient<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = deserialize_i64_lenient(d)?;
    u32::try_from(n).map_err(serde::de::Error::custom)
}

/// `filesystem.EntryInfo`: one file system object.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EntryInfo {
    /// The last path component.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The object's type (a symlink's target's type; see [`EntryInfo::is_symlink`]).
    #[serde(rename = "type", skip_serializing_if = "FileType::is_unspecified")]
    pub r#type: FileType,
    /// The absolute path.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// Size in bytes (of the link itself for a symlink, as `lstat`).
    #[serde(
        skip_serializing_if = "is_zero_i64",
        serialize_with = "serialize_i64_string",
        deserialize_with = "deserialize_i64_lenient"
    )]
    pub size: i64,
    /// Permission bits (`0o644` → 420); a symlink's target's.
    #[serde(skip_serializing_if = "is_zero_u32", deserialize_with = "deserialize_u32_lenient")]
    pub mode: u32,
    /// Go's `FileMode.String()` of the object itself: `-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub permissions: String,
    /// The owner's name (its numeric id when it has none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// The group's name (its numeric id when it has none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Last modification, RFC 3339 (`google.protobuf.Timestamp` in protojson).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_time: Option<String>,
    /// A symlink's fully resolved target; absent for anything else and for a dangling link.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    /// User metadata (`user.e2b.*` extended attributes); Corral reports none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Whether the object is a symlink.
    #[serde(skip_serializing_if = "is_false")]
    pub is_symlink: bool,
}

/// `filesystem.StatRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StatRequest {
    /// The path to describe.
    pub path: String,
}

/// `filesystem.StatResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StatResponse {
    /// The object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// `filesystem.ListDirRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListDirRequest {
    /// The directory to list.
    pub path: String,
    /// How many levels to list; 0 (absent) means 1.
    #[serde(skip_serializing_if = "is_zero_u32", deserialize_with = "deserialize_u32_lenient")]
    pub depth: u32,
}

impl ListDirRequest {
    /// The depth envd lists: `depth`, or 1 when it is 0.
    pub fn effective_depth(&self) -> u32 {
        self.depth.max(1)
    }
}

/// `filesystem.ListDirResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListDirResponse {
    /// The entries, depth first, each directory's entries in byte order (as Go's `WalkDir`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<EntryInfo>,
}

/// `filesystem.MakeDirRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MakeDirRequest {
    /// The directory to make, with its missing parents.
    pub path: String,
}

/// `filesystem.MakeDirResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MakeDirResponse {
    /// The new directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// `filesystem.RemoveRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RemoveRequest {
    /// The file or directory (recursively) to remove.
    pub path: String,
}

/// `filesystem.RemoveResponse` (empty: `{}`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RemoveResponse {}

/// `filesystem.MoveRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MoveRequest {
    /// The object to move.
    pub source: String,
    /// Its new path.
    pub destination: String,
}

/// `filesystem.MoveResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MoveResponse {
    /// The object at its new path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// One entry of the `/files` upload answer (the SDK's `WriteInfo.from_dict` reads `name`,
/// `type` and `path`): `{"name": "a.txt", "type": "file", "path": "/home/user/a.txt"}`.
/// `path` must be the resolved absolute path.
pub fn write_info(path: &str) -> serde_json::Value {
    serde_json::json!({ "name": base_name(path), "type": "file", "path": path })
}

// ---------------------------------------------------------------------------------------------
// Scripts
// ---------------------------------------------------------------------------------------------

/// Shared shell functions. `die CODE MESSAGE EXIT` reports a failure; `noent PATH` tells a
/// missing path from an unsearchable parent; `emit PATH` prints one entry record:
/// `E\0path\0<lstat fields>\0<target's raw mode>\0<resolved target>\0`.
const PRELUDE: &str = r#"LC_ALL=C; export LC_ALL
die() { printf 'CORRAL_FS_ERROR:%s:%s\n' "$1" "$2" >&2; exit "$3"; }
parent() { case "$1" in */*) q=${1%/*} ;; *) q= ;; esac; [ -n "$q" ] || q=/; printf '%s' "$q"; }
noent() {
  d=$(parent "$1")
  if [ -d "$d" ] && [ ! -x "$d" ]; then die permission_denied "permission denied: $1" 47; fi
  die not_found "no such file or directory: $1" 44
}
emit() {
  l=$(stat -c '%f %s %u %g %Y %U %G' "$1" 2>/dev/null) || return 1
  k=; t=
  if [ -L "$1" ] && [ -e "$1" ]; then
    k=$(stat -L -c '%f' "$1" 2>/dev/null) || k=
    t=$(readlink -f "$1" 2>/dev/null) || t=
  fi
  printf 'E\0%s\0%s\0%s\0%s\0' "$1" "$l" "$k" "$t"
}
mkparents() {
  if ! e=$(mkdir -p "$1" 2>&1); then
    a=$1
    while [ -n "$a" ] && [ ! -e "$a" ]; do a=${a%/*}; done
    [ -n "$a" ] || a=/
    [ -d "$a" ] || die invalid_argument "not a directory: $a" 46
    [ -w "$a" ] || die permission_denied "permission denied: $a" 47
    die internal "mkdir failed: $e" 48
  fi
}
"#;

fn script(body: &str) -> String {
    format!("{PRELUDE}{body}printf 'END\\0'\n")
}

/// The script answering `Stat`: the object at the path, symlinks not followed.
pub fn stat_script(req: &StatRequest) -> Result<String, FsError> {
    let p = shell_quote(&resolve(&req.path)?);
    Ok(script(&format!(
        "p={p}\n\
         [ -e \"$p\" ] || [ -L \"$p\" ] || noent \"$p\"\n\
         emit \"$p\" || die internal \"cannot stat $p\" 48\n"
    )))
}

/// The script answering `ListDir`: the entries under the directory (a symlink to one is
/// listed through), `effective_depth` levels deep, symlinked subdirectories not entered.
pub fn list_dir_script(req: &ListDirRequest) -> Result<String, FsError> {
    let path = resolve(&req.path)?;
    // The walk globs "$dir"/*; the root's prefix is empty so entries read "/bin", not "//bin".
    let prefix = if path == "/" { String::new() } else { path.clone() };
    let p = shell_quote(&path);
    let prefix = shell_quote(&prefix);
    let depth = req.effective_depth();
    Ok(script(&format!(
        "p={p}\n\
         [ -e \"$p\" ] || noent \"$p\"\n\
         [ -d \"$p\" ] || die invalid_argument \"path is not a directory: $p\" 46\n\
         {{ [ -r \"$p\" ] && [ -x \"$p\" ]; }} || die permission_denied \"permission denied: $p\" 47\n\
         walk() (\n\
           for f in \"$1\"/* \"$1\"/.[!.]* \"$1\"/..?*; do\n\
             if [ -e \"$f\" ] || [ -L \"$f\" ]; then\n\
               emit \"$f\" || continue\n\
               if [ \"$2\" -gt 1 ] && [ -d \"$f\" ] && [ ! -L \"$f\" ]; then walk \"$f\" $(($2 - 1)); fi\n\
             fi\n\
           done\n\
         )\n\
         walk {prefix} {depth}\n"
    )))
}

/// The script answering `MakeDir`: the directory and its missing parents.
pub fn make_dir_script(req: &MakeDirRequest) -> Result<String, FsError> {
    let p = shell_quote(&resolve(&req.path)?);
    Ok(script(&format!(
        "p={p}\n\
         if [ -e \"$p\" ]; then\n\
           [ -d \"$p\" ] && die already_exists \"directory already exists: $p\" 45\n\
           die invalid_argument \"path already exists but it is not a directory: $p\" 46\n\
         fi\n\
         mkparents \"$p\"\n\
         emit \"$p\" || die internal \"cannot stat $p\" 48\n"
    )))
}

/// The script answering `Remove`: the object, recursively; a missing path is no failure (as
/// envd's `os.RemoveAll`). `/` is refused.
pub fn remove_script(req: &RemoveRequest) -> Result<String, FsError> {
    let path = resolve(&req.path)?;
    if path == "/" {
        return Err(FsError::invalid("refusing to remove /"));
    }
    let p = shell_quote(&path);
    Ok(script(&format!(
        "p={p}\n\
         if [ -e \"$p\" ] || [ -L \"$p\" ]; then\n\
           if ! e=$(rm -rf \"$p\" 2>&1); then\n\
             [ -w \"$(parent \"$p\")\" ] || die permission_denied \"permission denied: $p\" 47\n\
             die internal \"rm failed: $e\" 48\n\
           fi\n\
         fi\n"
    )))
}

/// The script answering `Move`: a rename (the destination's parents made as needed; an
/// existing file or symlink there replaced, an existing directory only by a directory and
/// only when empty, as `rename(2)`), then the object at its new path.
pub fn move_script(req: &MoveRequest) -> Result<String, FsError> {
    let source = resolve(&req.source)?;
    let destination = resolve(&req.destination)?;
    if source == "/" {
        return Err(FsError::invalid("cannot move /"));
    }
    if destination.starts_with(&format!("{source}/")) {
        return Err(FsError::invalid(format!(
            "cannot move {source} into itself ({destination})"
        )));
    }
    let s = shell_quote(&source);
    let d = shell_quote(&destination);
    Ok(script(&format!(
        "s={s}; d={d}\n\
         [ -e \"$s\" ] || [ -L \"$s\" ] || noent \"$s\"\n\
         if [ \"$s\" != \"$d\" ]; then\n\
           if [ -d \"$d\" ] && [ ! -L \"$d\" ]; then\n\
             {{ [ -d \"$s\" ] && [ ! -L \"$s\" ] && rmdir \"$d\" 2>/dev/null; }} || die already_exists \"destination is an existing directory: $d\" 45\n\
           fi\n\
           mkparents \"$(parent \"$d\")\"\n\
           if [ -L \"$d\" ]; then rm -f \"$d\"; fi\n\
           if ! e=$(mv -f \"$s\" \"$d\" 2>&1); then\n\
             {{ [ -w \"$(parent \"$s\")\" ] && [ -w \"$(parent \"$d\")\" ]; }} || die permission_denied \"permission denied: $s -> $d\" 47\n\
             die internal \"mv failed: $e\" 48\n\
           fi\n\
         fi\n\
         emit \"$d\" || die internal \"cannot stat $d\" 48\n"
    )))
}

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

/// `text` cut to at most [`MAX_QUOTED_OUTPUT`] bytes on a character boundary.
fn bounded(text: &str) -> &str {
    if text.len() <= MAX_QUOTED_OUTPUT {
        return text;
    }
    let mut end = MAX_QUOTED_OUTPUT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The failure a script reported, or an `internal` one quoting its output.
fn script_failure(stdout: &str, stderr: &str, exit_code: i32) -> FsError {
    for stream in [stderr, stdout] {
        if let Some(at) = stream.find(ERROR_MARKER) {
            let rest = &stream[at + ERROR_MARKER.len()..];
            if let Some((name, message)) = rest.split_once(':') {
                if let Some(code) = ConnectCode::from_name(name) {
                    return FsError::new(code, bounded(message.trim_end()).to_owned());
                }
            }
        }
    }
    let said = if stderr.trim().is_empty() { stdout } else { stderr };
    FsError::internal(format!(
        "filesystem command failed with exit code {exit_code}: {}",
        bounded(said.trim())
    ))
}

/// One `emit` record.
struct Record<'a> {
    path: &'a str,
    lstat: &'a str,
    target_mode: &'a str,
    target: &'a str,
}

/// The records of a successful script's stdout; `internal` when it is not whole (no `END`,
/// as when the output was cut at a size limit) or not in the script's format.
fn records<'a>(stdout: &'a str, stderr: &str, exit_code: i32) -> Result<Vec<Record<'a>>, FsError> {
    if exit_code != 0 {
        return Err(script_failure(stdout, stderr, exit_code));
    }
    let malformed = |why: &str| {
        FsError::internal(format!("unexpected output from the filesystem command ({why})"))
    };
    let mut fields = stdout.split('\0');
    let mut out = Vec::new();
    loop {
        match fields.next() {
            Some("E") => {
                let mut next = || fields.next().ok_or_else(|| malformed("a record is cut short"));
                let path = next()?;
                let lstat = next()?;
                let target_mode = next()?;
                let target = next()?;
                out.push(Record { path, lstat, target_mode, target });
            }
            Some("END") => {
                return match (fields.next(), fields.next()) {
                    (Some(""), None) => Ok(out),
                    _ => Err(malformed("output follows its end")),
                };
            }
            Some(_) => return Err(malformed("an unknown record")),
            None => return Err(malformed("the output is incomplete")),
        }
    }
}

/// Go's `os.FileMode` bits for a raw `st_mode`, then `FileMode.String()`.
pub fn go_mode_string(raw: u32) -> String {
    const S_IFMT: u32 = 0o170000;
    let kind = raw & S_IFMT;
    // "dalTLDpSugct?" in Go's bit order; append/exclusive/temporary never come from stat.
    let flags = [
        ('d', kind == 0o040000),
        ('L', kind == 0o120000),
        ('D', kind == 0o060000 || kind == 0o020000),
        ('p', kind == 0o010000),
        ('S', kind == 0o140000),
        ('u', raw & 0o4000 != 0),
        ('g', raw & 0o2000 != 0),
        ('c', kind == 0o020000),
        ('t', raw & 0o1000 != 0),
    ];
    let mut out: String = flags.iter().filter(|(_, on)| *on).map(|(c, _)| *c).collect();
    if out.is_empty() {
        out.push('-');
    }
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        out.push(if raw & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    out
}

fn type_of(raw: u32) -> FileType {
    match raw & 0o170000 {
        0o100000 => FileType::File,
        0o040000 => FileType::Directory,
        _ => FileType::Unspecified,
    }
}

fn entry_from(record: &Record<'_>) -> Result<EntryInfo, FsError> {
    let bad = || {
        FsError::internal(format!(
            "unexpected stat output for {}: {:?}",
            record.path,
            bounded(record.lstat)
        ))
    };
    // "%f %s %u %g %Y %U %G": names last, so only they could hold odd characters.
    let mut f = record.lstat.splitn(7, ' ');
    let mut field = || f.next().ok_or_else(bad);
    let raw = u32::from_str_radix(field()?, 16).map_err(|_| bad())?;
    let size: i64 = field()?.parse().map_err(|_| bad())?;
    let uid = field()?;
    let gid = field()?;
    let mtime: i64 = field()?.parse().map_err(|_| bad())?;
    let user = field()?;
    let group = field()?;
    // busybox and GNU both print UNKNOWN for an id without a name; envd falls back to the id.
    let owner = if user == "UNKNOWN" { uid } else { user };
    let group = if group == "UNKNOWN" { gid } else { group };
    let is_symlink = raw & 0o170000 == 0o120000;
    let (r#type, mode, symlink_target) = if is_symlink {
        if record.target_mode.is_empty() || record.target.is_empty() {
            (FileType::Symlink, 0, None)
        } else {
            let target_raw = u32::from_str_radix(record.target_mode, 16).map_err(|_| bad())?;
            (type_of(target_raw), target_raw & 0o777, Some(record.target.to_owned()))
        }
    } else {
        (type_of(raw), raw & 0o777, None)
    };
    let modified_time = chrono::DateTime::from_timestamp(mtime, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    Ok(EntryInfo {
        name: base_name(record.path).to_owned(),
        r#type,
        path: record.path.to_owned(),
        size,
        mode,
        permissions: go_mode_string(raw),
        owner: owner.to_owned(),
        group: group.to_owned(),
        modified_time,
        symlink_target,
        metadata: BTreeMap::new(),
        is_symlink,
    })
}

fn single_entry(stdout: &str, stderr: &str, exit_code: i32) -> Result<EntryInfo, FsError> {
    let records = records(stdout, stderr, exit_code)?;
    match records.as_slice() {
        [one] => entry_from(one),
        _ => Err(FsError::internal(format!(
            "expected one entry from the filesystem command, got {}",
            records.len()
        ))),
    }
}

/// The answer to `Stat` from [`stat_script`]'s output.
pub fn parse_stat(stdout: &str, stderr: &str, exit_code: i32) -> Result<StatResponse, FsError> {
    Ok(StatResponse { entry: Some(single_entry(stdout, stderr, exit_code)?) })
}

/// Orders paths as Go's `filepath.WalkDir` visits them: by components, bytewise.
fn walk_order(a: &EntryInfo, b: &EntryInfo) -> std::cmp::Ordering {
    a.path.split('/').map(str::as_bytes).cmp(b.path.split('/').map(str::as_bytes))
}

/// The answer to `ListDir` from [`list_dir_script`]'s output.
pub fn parse_list_dir(
    stdout: &str,
    stderr: &str,
    exit_code: i32,
) -> Result<ListDirResponse, FsError> {
    let mut entries = records(stdout, stderr, exit_code)?
        .iter()
        .map(entry_from)
        .collect::<Result<Vec<_>, _>>()?;
    entries.sort_by(walk_order);
    Ok(ListDirResponse { entries })
}

/// The answer to `MakeDir` from [`make_dir_script`]'s output.
pub fn parse_make_dir(
    stdout: &str,
    stderr: &str,
    exit_code: i32,
) -> Result<MakeDirResponse, FsError> {
    Ok(MakeDirResponse { entry: Some(single_entry(stdout, stderr, exit_code)?) })
}

/// The answer to `Remove` from [`remove_script`]'s output.
pub fn parse_remove(
    stdout: &str,
    stderr: &str,
    exit_code: i32,
) -> Result<RemoveResponse, FsError> {
    let records = records(stdout, stderr, exit_code)?;
    if records.is_empty() {
        Ok(RemoveResponse {})
    } else {
        Err(FsError::internal("unexpected entries from the remove command"))
    }
}

/// The answer to `Move` from [`move_script`]'s output.
pub fn parse_move(stdout: &str, stderr: &str, exit_code: i32) -> Result<MoveResponse, FsError> {
    Ok(MoveResponse { entry: Some(single_entry(stdout, stderr, exit_code)?) })
}

// ---------------------------------------------------------------------------------------------
// Multipart uploads
// ---------------------------------------------------------------------------------------------

/// One `file` part of a `multipart/form-data` upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadPart {
    /// The part's `filename` (the SDK sends the target path there), unescaped; `None` when
    /// absent. Percent signs stay as sent (envd, like Go, does not decode them).
    pub filename: Option<String>,
    /// The part's bytes.
    pub data: Vec<u8>,
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from > haystack.len() {
        return None;
    }
    haystack[from..].windows(needle.len()).position(|w| w == needle).map(|i| i + from)
}

/// Splits `s` at `;` outside quoted strings, trimming each piece.
fn split_params(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == ';' && !quoted {
            out.push(s[start..i].trim());
            start = i + 1;
        }
    }
    out.push(s[start..].trim());
    out
}

/// A header parameter's value: a quoted string unescaped, or the token as is.
fn param_value(raw: &str) -> Result<String, FsError> {
    let raw = raw.trim();
    let Some(inner) = raw.strip_prefix('"') else {
        return Ok(raw.to_owned());
    };
    let inner = inner
        .strip_suffix('"')
        .ok_or_else(|| FsError::invalid("multipart: unterminated quoted parameter"))?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.extend(chars.next());
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// The parameters of a `type; a=b; c="d"` header value, names lowercased.
fn params(value: &str) -> Result<(String, Vec<(String, String)>), FsError> {
    let mut pieces = split_params(value).into_iter();
    let head = pieces.next().unwrap_or_default().to_ascii_lowercase();
    let mut out = Vec::new();
    for piece in pieces {
        if piece.is_empty() {
            continue;
        }
        let (name, raw) = piece
            .split_once('=')
            .ok_or_else(|| FsError::invalid(format!("multipart: malformed parameter {piece:?}")))?;
        out.push((name.trim().to_ascii_lowercase(), param_value(raw)?));
    }
    Ok((head, out))
}

/// RFC 5987 `UTF-8''percent%20encoded` (the form `filename*` takes).
fn ext_value(v: &str) -> Option<String> {
    let (charset, rest) = v.split_once('\'')?;
    let (_, encoded) = rest.split_once('\'')?;
    if !charset.eq_ignore_ascii_case("utf-8") {
        return None;
    }
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The `file` parts of a `multipart/form-data` body (RFC 7578), in order; other parts are
/// skipped, as envd does. A content type that is not multipart/form-data or has no boundary,
/// a body without its closing delimiter, a part without its blank line, or more than 1000
/// parts is `invalid_argument`. Lines end in CRLF; a body whose first delimiter line ends
/// in a bare LF is read with LF endings throughout (as Go's reader does).
pub fn parse_multipart(content_type: &str, body: &[u8]) -> Result<Vec<UploadPart>, FsError> {
    let (media, ps) = params(content_type)?;
    if media != "multipart/form-data" {
        return Err(FsError::invalid(format!(
            "expected a multipart/form-data body, got {media:?}"
        )));
    }
    let boundary = ps
        .into_iter()
        .find(|(n, _)| n == "boundary")
        .map(|(_, v)| v)
        .filter(|b| !b.is_empty() && b.len() <= 200)
        .ok_or_else(|| FsError::invalid("multipart: the content type names no boundary"))?;
    let dash_boundary = format!("--{boundary}").into_bytes();
    let truncated = || FsError::invalid("multipart: the body ends before its closing delimiter");

    // The first delimiter: at the very start, or after a preamble line.
    let first = if body.starts_with(&dash_boundary) {
        0
    } else {
        let mut crlf = b"\r\n".to_vec();
        crlf.extend_from_slice(&dash_boundary);
        let mut lf = b"\n".to_vec();
        lf.extend_from_slice(&dash_boundary);
        match (find(body, &crlf, 0), find(body, &lf, 0)) {
            (Some(a), Some(b)) => a.min(b) + if a <= b { 2 } else { 1 },
            (Some(a), None) => a + 2,
            (None, Some(b)) => b + 1,
            (None, None) => return Err(truncated()),
        }
    };
    let mut at = first + dash_boundary.len();
    if body[at..].starts_with(b"--") {
        return Ok(Vec::new());
    }
    // The line ending the first delimiter line decides CRLF or LF.
    let rest = &body[at..];
    let pad = rest.iter().take_while(|b| **b == b' ' || **b == b'\t').count();
    let eol: &[u8] = if rest[pad..].starts_with(b"\r\n") {
        b"\r\n"
    } else if rest[pad..].starts_with(b"\n") {
        b"\n"
    } else {
        return Err(FsError::invalid("multipart: malformed delimiter line"));
    };
    at += pad + eol.len();
    let mut delimiter = eol.to_vec();
    delimiter.extend_from_slice(&dash_boundary);
    let mut blank = eol.to_vec();
    blank.extend_from_slice(eol);

    let mut parts = Vec::new();
    for _ in 0..=MAX_PARTS {
        // Headers end at the first blank line (or at once when the part has none).
        let (headers, data_start) = if body[at..].starts_with(eol) {
            (&body[at..at], at + eol.len())
        } else {
            let end = find(body, &blank, at).ok_or_else(truncated)?;
            (&body[at..end], end + blank.len())
        };
        if headers.len() > MAX_PART_HEADER_BYTES {
            return Err(FsError::invalid("multipart: a part's headers are too long"));
        }
        let data_end = find(body, &delimiter, data_start).ok_or_else(truncated)?;
        if let Some(part) = file_part(headers, &body[data_start..data_end], eol)? {
            if parts.len() == MAX_PARTS {
                break;
            }
            parts.push(part);
        }
        at = data_end + delimiter.len();
        let rest = &body[at..];
        if rest.starts_with(b"--") {
            return Ok(parts);
        }
        let pad = rest.iter().take_while(|b| **b == b' ' || **b == b'\t').count();
        if !rest[pad..].starts_with(eol) {
            return Err(FsError::invalid("multipart: malformed delimiter line"));
        }
        at += pad + eol.len();
    }
    Err(FsError::invalid(format!("multipart: more than {MAX_PARTS} parts")))
}

/// The part as an upload when it is form field `file`.
fn file_part(headers: &[u8], data: &[u8], eol: &[u8]) -> Result<Option<UploadPart>, FsError> {
    let text = String::from_utf8_lossy(headers);
    let eol = if eol == b"\r\n" { "\r\n" } else { "\n" };
    // Unfold obsolete continuation lines before reading them.
    let mut lines: Vec<String> = Vec::new();
    for line in text.split(eol) {
        if line.starts_with([' ', '\t']) {
            match lines.last_mut() {
                Some(last) => last.push_str(line),
                None => return Err(FsError::invalid("multipart: malformed part header")),
            }
        } else if !line.is_empty() {
            lines.push(line.to_owned());
        }
    }
    let mut disposition = None;
    for line in &lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| FsError::invalid("multipart: malformed part header"))?;
        if name.trim().eq_ignore_ascii_case("content-disposition") {
            disposition = Some(value.trim().to_owned());
        }
    }
    let Some(disposition) = disposition else {
        return Ok(None);
    };
    let (kind, ps) = params(&disposition)?;
    if kind != "form-data" {
        return Ok(None);
    }
    let field = |key: &str| ps.iter().find(|(n, _)| n == key).map(|(_, v)| v.clone());
    if field("name").as_deref() != Some("file") {
        return Ok(None);
    }
    let filename = field("filename*").and_then(|v| ext_value(&v)).or_else(|| field("filename"));
    Ok(Some(UploadPart { filename, data: data.to_vec() }))
}

