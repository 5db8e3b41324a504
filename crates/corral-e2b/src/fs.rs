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
//! - `/files`: the bytes travel through Corral's file use cases (each provider's own file API);
//!   [`parse_multipart`] reads a `multipart/form-data` upload as the SDK (httpx) sends it, and
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
        FsError {
            code,
            message: message.into(),
        }
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

/// The string [`shell_quote`] quoted, or `None` for anything it could not have made.
pub fn shell_unquote(quoted: &str) -> Option<String> {
    let inner = quoted.strip_prefix('\'')?.strip_suffix('\'')?;
    let mut out = String::with_capacity(inner.len());
    for (i, part) in inner.split("'\\''").enumerate() {
        if part.contains('\'') {
            return None;
        }
        if i > 0 {
            out.push('\'');
        }
        out.push_str(part);
    }
    Some(out)
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
    #[serde(
        skip_serializing_if = "is_zero_u32",
        deserialize_with = "deserialize_u32_lenient"
    )]
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
    #[serde(
        skip_serializing_if = "is_zero_u32",
        deserialize_with = "deserialize_u32_lenient"
    )]
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

/// Shared shell functions. `die CODE MESSAGE` reports a failure and exits 44 (`not_found`),
/// 45 (`already_exists`), 46 (`invalid_argument`), 47 (`permission_denied`) or 48 (anything
/// else); `noent PATH` tells a missing path from an unsearchable parent; `emit PATH` prints one entry record:
/// `E\0path\0<lstat fields>\0<target's raw mode>\0<resolved target>\0`.
const PRELUDE: &str = r#"LC_ALL=C; export LC_ALL
die() {
  case $1 in not_found) x=44 ;; already_exists) x=45 ;; invalid_argument) x=46 ;;
    permission_denied) x=47 ;; *) x=48 ;; esac
  printf 'CORRAL_FS_ERROR:%s:%s\n' "$1" "$2" >&2; exit "$x"
}
parent() { case "$1" in */*) q=${1%/*} ;; *) q= ;; esac; [ -n "$q" ] || q=/; printf '%s' "$q"; }
noent() {
  n=$(parent "$1")
  if [ -d "$n" ] && [ ! -x "$n" ]; then die permission_denied "permission denied: $1"; fi
  die not_found "no such file or directory: $1"
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
    [ -d "$a" ] || die invalid_argument "not a directory: $a"
    [ -w "$a" ] || die permission_denied "permission denied: $a"
    die internal "mkdir failed: $e"
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
         emit \"$p\" || die internal \"cannot stat $p\"\n"
    )))
}

/// The script answering `ListDir`: the entries under the directory (a symlink to one is
/// listed through), `effective_depth` levels deep, symlinked subdirectories not entered.
pub fn list_dir_script(req: &ListDirRequest) -> Result<String, FsError> {
    let path = resolve(&req.path)?;
    // The walk globs "$dir"/*; the root's prefix is empty so entries read "/bin", not "//bin".
    let prefix = if path == "/" {
        String::new()
    } else {
        path.clone()
    };
    let p = shell_quote(&path);
    let prefix = shell_quote(&prefix);
    let depth = req.effective_depth();
    Ok(script(&format!(
        "p={p}\n\
         [ -e \"$p\" ] || noent \"$p\"\n\
         [ -d \"$p\" ] || die invalid_argument \"path is not a directory: $p\"\n\
         {{ [ -r \"$p\" ] && [ -x \"$p\" ]; }} || die permission_denied \"permission denied: $p\"\n\
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
           [ -d \"$p\" ] && die already_exists \"directory already exists: $p\"\n\
           die invalid_argument \"path already exists but it is not a directory: $p\"\n\
         fi\n\
         mkparents \"$p\"\n\
         emit \"$p\" || die internal \"cannot stat $p\"\n"
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
             [ -w \"$(parent \"$p\")\" ] || die permission_denied \"permission denied: $p\"\n\
             die internal \"rm failed: $e\"\n\
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
             {{ [ -d \"$s\" ] && [ ! -L \"$s\" ] && rmdir \"$d\" 2>/dev/null; }} || die already_exists \"destination is an existing directory: $d\"\n\
           fi\n\
           mkparents \"$(parent \"$d\")\"\n\
           if [ -L \"$d\" ]; then rm -f \"$d\"; fi\n\
           if ! e=$(mv -f \"$s\" \"$d\" 2>&1); then\n\
             {{ [ -w \"$(parent \"$s\")\" ] && [ -w \"$(parent \"$d\")\" ]; }} || die permission_denied \"permission denied: $s -> $d\"\n\
             die internal \"mv failed: $e\"\n\
           fi\n\
         fi\n\
         emit \"$d\" || die internal \"cannot stat $d\"\n"
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
            if let Some((name, message)) = rest.split_once(':')
                && let Some(code) = ConnectCode::from_name(name)
            {
                return FsError::new(code, bounded(message.trim_end()).to_owned());
            }
        }
    }
    let said = if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    };
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
        FsError::internal(format!(
            "unexpected output from the filesystem command ({why})"
        ))
    };
    let mut fields = stdout.split('\0');
    let mut out = Vec::new();
    loop {
        match fields.next() {
            Some("E") => {
                let mut next = || {
                    fields
                        .next()
                        .ok_or_else(|| malformed("a record is cut short"))
                };
                let path = next()?;
                let lstat = next()?;
                let target_mode = next()?;
                let target = next()?;
                out.push(Record {
                    path,
                    lstat,
                    target_mode,
                    target,
                });
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
    let mut out: String = flags
        .iter()
        .filter(|(_, on)| *on)
        .map(|(c, _)| *c)
        .collect();
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
            (
                type_of(target_raw),
                target_raw & 0o777,
                Some(record.target.to_owned()),
            )
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
    Ok(StatResponse {
        entry: Some(single_entry(stdout, stderr, exit_code)?),
    })
}

/// Orders paths as Go's `filepath.WalkDir` visits them: by components, bytewise.
fn walk_order(a: &EntryInfo, b: &EntryInfo) -> std::cmp::Ordering {
    a.path
        .split('/')
        .map(str::as_bytes)
        .cmp(b.path.split('/').map(str::as_bytes))
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
    Ok(MakeDirResponse {
        entry: Some(single_entry(stdout, stderr, exit_code)?),
    })
}

/// The answer to `Remove` from [`remove_script`]'s output.
pub fn parse_remove(stdout: &str, stderr: &str, exit_code: i32) -> Result<RemoveResponse, FsError> {
    let records = records(stdout, stderr, exit_code)?;
    if records.is_empty() {
        Ok(RemoveResponse {})
    } else {
        Err(FsError::internal(
            "unexpected entries from the remove command",
        ))
    }
}

/// The answer to `Move` from [`move_script`]'s output.
pub fn parse_move(stdout: &str, stderr: &str, exit_code: i32) -> Result<MoveResponse, FsError> {
    Ok(MoveResponse {
        entry: Some(single_entry(stdout, stderr, exit_code)?),
    })
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
    haystack[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
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
///
/// envd writes each part to the `path` query parameter when one is given (the SDK sends it
/// with a single file), else to the part's filename, resolved as [`resolve`]; two parts aimed
/// at one path are a 400.
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
    let pad = rest
        .iter()
        .take_while(|b| **b == b' ' || **b == b'\t')
        .count();
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
        let pad = rest
            .iter()
            .take_while(|b| **b == b' ' || **b == b'\t')
            .count();
        if !rest[pad..].starts_with(eol) {
            return Err(FsError::invalid("multipart: malformed delimiter line"));
        }
        at += pad + eol.len();
    }
    Err(FsError::invalid(format!(
        "multipart: more than {MAX_PARTS} parts"
    )))
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
    let filename = field("filename*")
        .and_then(|v| ext_value(&v))
        .or_else(|| field("filename"));
    Ok(Some(UploadPart {
        filename,
        data: data.to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
    use std::path::{Path, PathBuf};
    use std::process::Command;

    // ---- shells ---------------------------------------------------------------------------

    /// A shell the scripts run under, with the PATH it gets.
    struct Shell {
        name: &'static str,
        program: PathBuf,
        args: Vec<String>,
        path_env: Option<PathBuf>,
        _bin: Option<tempfile::TempDir>,
    }

    impl Shell {
        fn run(&self, script: &str) -> (String, String, i32) {
            let mut cmd = Command::new(&self.program);
            cmd.args(&self.args).arg("-c").arg(script);
            if let Some(path) = &self.path_env {
                cmd.env_clear().env("PATH", path);
            }
            let out = cmd.output().expect("the shell runs");
            (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
                out.status.code().expect("the shell exits with a code"),
            )
        }
    }

    /// The busybox binary: `CORRAL_TEST_BUSYBOX`, else /bin/busybox or /usr/bin/busybox.
    /// Missing busybox fails the test: the sandboxes of the `local` provider are busybox, so
    /// passing only under GNU tools proves too little (`apt-get install busybox-static`).
    fn busybox() -> PathBuf {
        if let Some(p) = std::env::var_os("CORRAL_TEST_BUSYBOX") {
            return PathBuf::from(p);
        }
        ["/bin/busybox", "/usr/bin/busybox"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .expect("busybox is required for these tests (apt-get install busybox-static, or set CORRAL_TEST_BUSYBOX)")
    }

    /// /bin/sh with the machine's tools, and busybox's sh with only busybox applets on PATH
    /// (so `stat`, `readlink`, … are busybox's, not GNU's).
    fn shells() -> Vec<Shell> {
        let bb = busybox();
        let bin = tempfile::tempdir().expect("temp dir");
        for applet in [
            "sh", "stat", "readlink", "mkdir", "rm", "rmdir", "mv", "printf", "test", "[",
        ] {
            symlink(&bb, bin.path().join(applet)).expect("applet link");
        }
        vec![
            Shell {
                name: "/bin/sh",
                program: "/bin/sh".into(),
                args: vec![],
                path_env: None,
                _bin: None,
            },
            Shell {
                name: "busybox",
                program: bb,
                args: vec!["sh".into()],
                path_env: Some(bin.path().to_path_buf()),
                _bin: Some(bin),
            },
        ]
    }

    #[test]
    fn the_busybox_shell_runs_busybox_applets_only() {
        let shells = shells();
        let (o, e, _) = shells[1].run("stat --help 2>&1; readlink --help 2>&1; mv --help 2>&1");
        assert_eq!(o.matches("BusyBox").count(), 3, "{o}{e}");
    }

    /// A fixture tree:
    /// a.txt ("hello", 0644), .hidden, sub/ (0755), sub/inner/, sub/inner/deep.txt,
    /// sub/x.txt, link -> a.txt, dirlink -> sub, broken -> missing, "we'ird\nname |x" (0600).
    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        let p = dir.path();
        std::fs::write(p.join("a.txt"), "hello").expect("write");
        std::fs::set_permissions(p.join("a.txt"), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        std::fs::write(p.join(".hidden"), "").expect("write");
        std::fs::create_dir_all(p.join("sub/inner")).expect("mkdir");
        std::fs::set_permissions(p.join("sub"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        std::fs::write(p.join("sub/inner/deep.txt"), "deep").expect("write");
        std::fs::write(p.join("sub/x.txt"), "x").expect("write");
        symlink(p.join("a.txt"), p.join("link")).expect("symlink");
        symlink("sub", p.join("dirlink")).expect("symlink");
        symlink(p.join("missing"), p.join("broken")).expect("symlink");
        let odd = p.join("we'ird\nname |x");
        std::fs::write(&odd, "odd!").expect("write");
        std::fs::set_permissions(&odd, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        dir
    }

    fn s(p: &Path) -> String {
        p.to_str().expect("utf-8 temp path").to_owned()
    }

    fn me() -> String {
        let out = Command::new("id").arg("-un").output().expect("id runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn rfc3339(p: &Path) -> String {
        let secs = std::fs::symlink_metadata(p).expect("lstat").mtime();
        chrono::DateTime::from_timestamp(secs, 0)
            .expect("valid time")
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }

    fn stat(sh: &Shell, path: &str) -> Result<StatResponse, FsError> {
        let script = stat_script(&StatRequest { path: path.into() })?;
        let (o, e, c) = sh.run(&script);
        parse_stat(&o, &e, c)
    }

    fn list(sh: &Shell, path: &str, depth: u32) -> Result<ListDirResponse, FsError> {
        let script = list_dir_script(&ListDirRequest {
            path: path.into(),
            depth,
        })?;
        let (o, e, c) = sh.run(&script);
        parse_list_dir(&o, &e, c)
    }

    fn make_dir(sh: &Shell, path: &str) -> Result<MakeDirResponse, FsError> {
        let script = make_dir_script(&MakeDirRequest { path: path.into() })?;
        let (o, e, c) = sh.run(&script);
        parse_make_dir(&o, &e, c)
    }

    fn remove(sh: &Shell, path: &str) -> Result<RemoveResponse, FsError> {
        let script = remove_script(&RemoveRequest { path: path.into() })?;
        let (o, e, c) = sh.run(&script);
        parse_remove(&o, &e, c)
    }

    fn mv(sh: &Shell, source: &str, destination: &str) -> Result<MoveResponse, FsError> {
        let script = move_script(&MoveRequest {
            source: source.into(),
            destination: destination.into(),
        })?;
        let (o, e, c) = sh.run(&script);
        parse_move(&o, &e, c)
    }

    fn code<T: fmt::Debug>(r: Result<T, FsError>) -> ConnectCode {
        r.expect_err("expected a failure").code
    }

    // ---- real shells: Stat ------------------------------------------------------------------

    #[test]
    fn stat_describes_a_file_a_directory_and_symlinks_under_both_shells() {
        for sh in shells() {
            let dir = fixture();
            let root = s(dir.path());
            let a = stat(&sh, &format!("{root}/a.txt"))
                .expect(sh.name)
                .entry
                .expect("entry");
            assert_eq!(a.name, "a.txt", "{}", sh.name);
            assert_eq!(a.path, format!("{root}/a.txt"));
            assert_eq!(a.r#type, FileType::File);
            assert_eq!(a.size, 5);
            assert_eq!(a.mode, 0o644);
            assert_eq!(a.permissions, "-rw-r--r--");
            assert_eq!(a.owner, me());
            assert!(!a.group.is_empty());
            assert_eq!(a.modified_time, Some(rfc3339(&dir.path().join("a.txt"))));
            assert_eq!(a.symlink_target, None);
            assert!(!a.is_symlink);

            let d = stat(&sh, &format!("{root}/sub/"))
                .expect(sh.name)
                .entry
                .expect("entry");
            assert_eq!(
                (d.name.as_str(), d.r#type, d.mode),
                ("sub", FileType::Directory, 0o755)
            );
            assert_eq!(d.permissions, "drwxr-xr-x", "{}", sh.name);
            assert_eq!(d.path, format!("{root}/sub"));

            let l = stat(&sh, &format!("{root}/link"))
                .expect(sh.name)
                .entry
                .expect("entry");
            let target = std::fs::canonicalize(dir.path().join("a.txt")).expect("canonical");
            assert!(l.is_symlink, "{}", sh.name);
            assert_eq!(l.r#type, FileType::File, "a link reports its target's type");
            assert_eq!(
                l.symlink_target.as_deref(),
                Some(s(&target).as_str()),
                "{}",
                sh.name
            );
            assert_eq!(l.mode, 0o644, "a link reports its target's permission bits");
            assert_eq!(l.permissions, "Lrwxrwxrwx", "{}", sh.name);
            assert_eq!(
                l.size,
                s(&dir.path().join("a.txt")).len() as i64,
                "lstat size"
            );

            let dl = stat(&sh, &format!("{root}/dirlink"))
                .expect(sh.name)
                .entry
                .expect("entry");
            assert_eq!(
                (dl.r#type, dl.is_symlink),
                (FileType::Directory, true),
                "{}",
                sh.name
            );

            let b = stat(&sh, &format!("{root}/broken"))
                .expect(sh.name)
                .entry
                .expect("entry");
            assert_eq!(
                (b.r#type, b.is_symlink, b.symlink_target),
                (FileType::Symlink, true, None)
            );

            let odd = stat(&sh, &format!("{root}/we'ird\nname |x"))
                .expect(sh.name)
                .entry
                .expect("entry");
            assert_eq!(odd.name, "we'ird\nname |x", "{}", sh.name);
            assert_eq!(
                (odd.size, odd.mode, odd.permissions.as_str()),
                (4, 0o600, "-rw-------")
            );

            let missing = stat(&sh, &format!("{root}/nope"));
            assert_eq!(code(missing), ConnectCode::NotFound, "{}", sh.name);
            let under_file = stat(&sh, &format!("{root}/a.txt/x"));
            assert_eq!(code(under_file), ConnectCode::NotFound, "{}", sh.name);
        }
    }

    #[test]
    fn stat_reports_the_script_exit_code_and_marker_for_a_missing_path() {
        for sh in shells() {
            let dir = fixture();
            let script = stat_script(&StatRequest {
                path: format!("{}/nope", s(dir.path())),
            })
            .expect("script");
            let (o, e, c) = sh.run(&script);
            assert_eq!(c, 44, "{}: {e}", sh.name);
            assert!(
                e.starts_with("CORRAL_FS_ERROR:not_found:"),
                "{}: {e}",
                sh.name
            );
            assert_eq!(o, "");
        }
    }

    // ---- real shells: ListDir ---------------------------------------------------------------

    #[test]
    fn list_dir_lists_depth_first_in_byte_order_to_the_asked_depth() {
        for sh in shells() {
            let dir = fixture();
            let root = s(dir.path());
            let names = |r: &ListDirResponse| {
                r.entries
                    .iter()
                    .map(|e| e.path[root.len() + 1..].to_owned())
                    .collect::<Vec<_>>()
            };
            let one = list(&sh, &root, 0).expect(sh.name);
            assert_eq!(
                names(&one),
                [
                    ".hidden",
                    "a.txt",
                    "broken",
                    "dirlink",
                    "link",
                    "sub",
                    "we'ird\nname |x"
                ],
                "{}",
                sh.name
            );
            assert_eq!(one, list(&sh, &root, 1).expect(sh.name), "depth 0 means 1");
            let sub = one
                .entries
                .iter()
                .find(|e| e.name == "sub")
                .expect("sub listed");
            assert_eq!((sub.r#type, sub.mode), (FileType::Directory, 0o755));
            let link = one
                .entries
                .iter()
                .find(|e| e.name == "dirlink")
                .expect("dirlink listed");
            assert!(link.is_symlink && link.r#type == FileType::Directory);

            let two = list(&sh, &root, 2).expect(sh.name);
            assert_eq!(
                names(&two),
                [
                    ".hidden",
                    "a.txt",
                    "broken",
                    "dirlink",
                    "link",
                    "sub",
                    "sub/inner",
                    "sub/x.txt",
                    "we'ird\nname |x"
                ],
                "{}: a symlinked directory is not entered",
                sh.name
            );
            let three = list(&sh, &root, 3).expect(sh.name);
            assert!(
                names(&three).contains(&"sub/inner/deep.txt".to_owned()),
                "{}",
                sh.name
            );
            assert_eq!(three.entries.len(), 10);

            // Through a symlink to a directory: paths stay under the asked path.
            let through = list(&sh, &format!("{root}/dirlink"), 1).expect(sh.name);
            let paths: Vec<_> = through.entries.iter().map(|e| e.path.clone()).collect();
            assert_eq!(
                paths,
                [
                    format!("{root}/dirlink/inner"),
                    format!("{root}/dirlink/x.txt")
                ]
            );

            let empty = list(&sh, &format!("{root}/sub/inner/"), 5).expect(sh.name);
            assert_eq!(empty.entries.len(), 1);
            std::fs::remove_file(dir.path().join("sub/inner/deep.txt")).expect("rm");
            assert!(
                list(&sh, &format!("{root}/sub/inner"), 1)
                    .expect(sh.name)
                    .entries
                    .is_empty()
            );

            assert_eq!(
                code(list(&sh, &format!("{root}/a.txt"), 1)),
                ConnectCode::InvalidArgument
            );
            assert_eq!(
                code(list(&sh, &format!("{root}/nope"), 1)),
                ConnectCode::NotFound
            );
            assert_eq!(
                code(list(&sh, &format!("{root}/broken"), 1)),
                ConnectCode::NotFound
            );
        }
    }

    #[test]
    fn list_dir_of_the_root_has_single_slash_paths() {
        for sh in shells() {
            let r = list(&sh, "/", 1).expect(sh.name);
            assert!(r.entries.iter().any(|e| e.path == "/tmp"), "{}", sh.name);
            assert!(
                r.entries.iter().all(|e| !e.path.starts_with("//")),
                "{}",
                sh.name
            );
        }
    }

    #[test]
    fn a_cut_off_listing_is_an_internal_error_not_a_short_answer() {
        let sh = &shells()[0];
        let dir = fixture();
        let script = list_dir_script(&ListDirRequest {
            path: s(dir.path()),
            depth: 2,
        })
        .expect("script");
        let (o, e, c) = sh.run(&script);
        assert!(parse_list_dir(&o, &e, c).is_ok());
        for cut in [0, 1, o.len() / 2, o.len() - 4, o.len() - 1] {
            let r = parse_list_dir(&o[..cut], &e, c);
            assert_eq!(code(r), ConnectCode::Internal, "cut at {cut}");
        }
    }

    // ---- real shells: MakeDir, Remove, Move --------------------------------------------------

    #[test]
    fn make_dir_creates_parents_and_reports_existing_paths() {
        for sh in shells() {
            let dir = fixture();
            let root = s(dir.path());
            let made = make_dir(&sh, &format!("{root}/n1/n2"))
                .expect(sh.name)
                .entry
                .expect("entry");
            assert!(dir.path().join("n1/n2").is_dir(), "{}", sh.name);
            assert_eq!(
                (made.name.as_str(), made.r#type),
                ("n2", FileType::Directory)
            );
            assert_eq!(made.path, format!("{root}/n1/n2"));

            assert_eq!(
                code(make_dir(&sh, &format!("{root}/n1/n2"))),
                ConnectCode::AlreadyExists
            );
            assert_eq!(
                code(make_dir(&sh, &format!("{root}/dirlink"))),
                ConnectCode::AlreadyExists
            );
            assert_eq!(
                code(make_dir(&sh, &format!("{root}/a.txt"))),
                ConnectCode::InvalidArgument
            );
            let under_file = make_dir(&sh, &format!("{root}/a.txt/child"));
            assert_eq!(
                code(under_file),
                ConnectCode::InvalidArgument,
                "{}",
                sh.name
            );
        }
    }

    #[test]
    fn remove_deletes_files_trees_and_links_and_ignores_missing_paths() {
        for sh in shells() {
            let dir = fixture();
            let root = s(dir.path());
            remove(&sh, &format!("{root}/link")).expect(sh.name);
            assert!(!dir.path().join("link").exists() && dir.path().join("a.txt").exists());
            remove(&sh, &format!("{root}/dirlink")).expect(sh.name);
            assert!(
                dir.path().join("sub/x.txt").exists(),
                "{}: the link's target stays",
                sh.name
            );
            remove(&sh, &format!("{root}/sub")).expect(sh.name);
            assert!(!dir.path().join("sub").exists(), "{}", sh.name);
            remove(&sh, &format!("{root}/broken")).expect(sh.name);
            assert!(std::fs::symlink_metadata(dir.path().join("broken")).is_err());
            remove(&sh, &format!("{root}/we'ird\nname |x")).expect(sh.name);
            assert!(!dir.path().join("we'ird\nname |x").exists());
            remove(&sh, &format!("{root}/nope")).expect("a missing path is no failure");
            assert!(dir.path().join("a.txt").exists());
        }
        assert_eq!(
            code(remove_script(&RemoveRequest {
                path: "/a/..".into()
            })),
            ConnectCode::InvalidArgument
        );
    }

    #[test]
    fn move_renames_makes_parents_and_reports_the_new_entry() {
        for sh in shells() {
            let dir = fixture();
            let root = s(dir.path());
            let moved = mv(
                &sh,
                &format!("{root}/a.txt"),
                &format!("{root}/new/deeper/b.txt"),
            )
            .expect(sh.name)
            .entry
            .expect("entry");
            assert_eq!(
                std::fs::read_to_string(dir.path().join("new/deeper/b.txt")).expect("read"),
                "hello"
            );
            assert!(!dir.path().join("a.txt").exists());
            assert_eq!(
                (moved.name.as_str(), moved.r#type, moved.size),
                ("b.txt", FileType::File, 5)
            );
            assert_eq!(moved.path, format!("{root}/new/deeper/b.txt"));

            // Onto an existing file: replaced, as rename(2).
            mv(
                &sh,
                &format!("{root}/sub/x.txt"),
                &format!("{root}/new/deeper/b.txt"),
            )
            .expect(sh.name);
            assert_eq!(
                std::fs::read_to_string(dir.path().join("new/deeper/b.txt")).expect("read"),
                "x"
            );

            // A directory onto a non-empty directory, or a file onto a directory: refused.
            let r = mv(&sh, &format!("{root}/sub"), &format!("{root}/new"));
            assert_eq!(code(r), ConnectCode::AlreadyExists, "{}", sh.name);
            let r = mv(&sh, &format!("{root}/.hidden"), &format!("{root}/new"));
            assert_eq!(code(r), ConnectCode::AlreadyExists, "{}", sh.name);
            assert!(dir.path().join("sub/inner").is_dir() && dir.path().join(".hidden").exists());
            // A directory onto an empty directory: replaces it.
            std::fs::create_dir(dir.path().join("empty")).expect("mkdir");
            mv(&sh, &format!("{root}/sub"), &format!("{root}/empty")).expect(sh.name);
            assert!(
                dir.path().join("empty/inner/deep.txt").exists(),
                "{}",
                sh.name
            );

            // Onto a symlink to a directory: the link is replaced, nothing moves into its target.
            std::fs::create_dir(dir.path().join("t")).expect("mkdir");
            symlink(dir.path().join("t"), dir.path().join("tl")).expect("symlink");
            mv(&sh, &format!("{root}/.hidden"), &format!("{root}/tl")).expect(sh.name);
            assert!(dir.path().join("tl").is_file() && !dir.path().join("t/.hidden").exists());

            // Same path: nothing to do.
            mv(&sh, &format!("{root}/tl"), &format!("{root}/tl/")).expect(sh.name);

            let r = mv(&sh, &format!("{root}/nope"), &format!("{root}/other"));
            assert_eq!(code(r), ConnectCode::NotFound, "{}", sh.name);
            let r = mv(&sh, &format!("{root}/t"), &format!("{root}/tl/x"));
            assert_eq!(
                code(r),
                ConnectCode::InvalidArgument,
                "{}: parent is a file",
                sh.name
            );
        }
        let into_itself = move_script(&MoveRequest {
            source: "/a".into(),
            destination: "/a/b".into(),
        });
        assert_eq!(code(into_itself), ConnectCode::InvalidArgument);
    }

    #[test]
    fn script_failures_parse_from_the_marker_whatever_else_is_printed() {
        for sh in shells() {
            for name in [
                "not_found",
                "already_exists",
                "invalid_argument",
                "permission_denied",
                "internal",
            ] {
                let script = format!("{PRELUDE}echo noise >&2; die {name} 'it: failed'\n");
                let (o, e, c) = sh.run(&script);
                let err = parse_stat(&o, &e, c).expect_err("a failure");
                assert_eq!(err.code.as_str(), name, "{}", sh.name);
                assert_eq!(err.message, "it: failed");
                let expected_exit = match name {
                    "not_found" => 44,
                    "already_exists" => 45,
                    "invalid_argument" => 46,
                    "permission_denied" => 47,
                    _ => 48,
                };
                assert_eq!(c, expected_exit, "{}", sh.name);
            }
        }
        // No marker (say, the shell itself failed): internal, quoting what the command said.
        let err = parse_stat("", "sh: stat: not found\n", 127).expect_err("a failure");
        assert_eq!(err.code, ConnectCode::Internal);
        assert!(err.message.contains("127") && err.message.contains("stat: not found"));
        // An unknown code name is not trusted.
        let err = parse_stat("", "CORRAL_FS_ERROR:bogus:x\n", 48).expect_err("a failure");
        assert_eq!(err.code, ConnectCode::Internal);
        // Output combined into stdout still carries the marker.
        let err = parse_move("CORRAL_FS_ERROR:not_found:gone\n", "", 44).expect_err("a failure");
        assert_eq!(
            (err.code, err.message.as_str()),
            (ConnectCode::NotFound, "gone")
        );
    }

    // ---- pure parts ------------------------------------------------------------------------

    #[test]
    fn resolve_cleans_absolute_paths_and_puts_relative_ones_under_home() {
        let ok = |p: &str| resolve(p).expect(p);
        assert_eq!(ok("/a/b"), "/a/b");
        assert_eq!(ok("//a///b//"), "/a/b");
        assert_eq!(ok("/a/./b/../c"), "/a/c");
        assert_eq!(ok("/../../etc"), "/etc");
        assert_eq!(ok("/"), "/");
        assert_eq!(ok("/.."), "/");
        assert_eq!(ok("file.txt"), "/home/user/file.txt");
        assert_eq!(ok("dir/../x"), "/home/user/x");
        assert_eq!(ok("../../../../x"), "/x");
        assert_eq!(ok("./"), "/home/user");
        assert_eq!(ok(""), "/home/user");
        assert_eq!(ok("~"), "/home/user");
        assert_eq!(ok("~/a"), "/home/user/a");
        assert_eq!(ok("a~b"), "/home/user/a~b");
        assert_eq!(code(resolve("~root/x")), ConnectCode::InvalidArgument);
        assert_eq!(code(resolve("/a\0b")), ConnectCode::InvalidArgument);
    }

    #[test]
    fn shell_quote_round_trips_through_both_shells() {
        let samples = [
            "",
            "plain",
            "it's",
            "'",
            "''",
            "a\nb",
            "$HOME `id` $(id)",
            "\\",
            "\"q\"",
            " lead",
            "*?[a]",
            "-n",
            "é日本",
        ];
        for sh in shells() {
            let script: String = samples
                .iter()
                .map(|x| format!("printf '%s\\0' {}\n", shell_quote(x)))
                .collect();
            let (o, e, c) = sh.run(&script);
            assert_eq!(c, 0, "{}: {e}", sh.name);
            let got: Vec<&str> = o.split('\0').collect();
            assert_eq!(&got[..samples.len()], samples, "{}", sh.name);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn shell_quote_carries_any_text(text in "[^\\x00]{0,40}") {
            let (o, _, c) = shells()[0].run(&format!("printf '%s' {}", shell_quote(&text)));
            prop_assert_eq!(c, 0);
            prop_assert_eq!(o, text);
        }

        #[test]
        fn resolve_is_absolute_clean_and_idempotent(path in "[a-z./~]{0,20}") {
            if let Ok(r) = resolve(&path) {
                prop_assert!(r.starts_with('/'));
                prop_assert!(!r.contains("//") && !r.contains("/./") && !r.contains("/../"));
                prop_assert!(r == "/" || !r.ends_with('/'));
                prop_assert_eq!(resolve(&r).ok(), Some(r.clone()));
            }
        }

        #[test]
        fn multipart_never_panics_on_random_bytes(
            body in proptest::collection::vec(any::<u8>(), 0..400),
            boundary in "[a-z0-9-]{0,8}",
        ) {
            let _ = parse_multipart(&format!("multipart/form-data; boundary={boundary}"), &body);
            let _ = parse_multipart("multipart/form-data; boundary=\"", &body);
        }

        #[test]
        fn multipart_never_panics_on_mutated_valid_bodies(
            cut in 0usize..400, flip in 0usize..400, byte in any::<u8>(),
        ) {
            let (ct, body) = httpx_body();
            let mut b = body.to_vec();
            if flip < b.len() { b[flip] = byte; }
            b.truncate(cut.min(b.len()));
            let _ = parse_multipart(ct, &b);
        }

        #[test]
        fn multipart_round_trips_parts(
            datas in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..5),
        ) {
            let boundary = "XyZ0123456789boundaryXyZ";
            let mut body = Vec::new();
            for (i, d) in datas.iter().enumerate() {
                body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f{i}\"\r\n\r\n").as_bytes());
                body.extend_from_slice(d);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
            let parts = parse_multipart(&format!("multipart/form-data; boundary={boundary}"), &body)
                .expect("a valid body");
            prop_assert_eq!(parts.len(), datas.len());
            for (i, (p, d)) in parts.iter().zip(&datas).enumerate() {
                prop_assert_eq!(p.filename.clone(), Some(format!("f{i}")));
                prop_assert_eq!(&p.data, d);
            }
        }
    }

    #[test]
    fn connect_codes_have_connect_names_and_statuses() {
        let expected = [
            (ConnectCode::NotFound, "not_found", 404),
            (ConnectCode::AlreadyExists, "already_exists", 409),
            (ConnectCode::InvalidArgument, "invalid_argument", 400),
            (ConnectCode::PermissionDenied, "permission_denied", 403),
            (ConnectCode::Internal, "internal", 500),
            (ConnectCode::Unimplemented, "unimplemented", 501),
            (ConnectCode::Unauthenticated, "unauthenticated", 401),
            (ConnectCode::DeadlineExceeded, "deadline_exceeded", 504),
            (ConnectCode::Unavailable, "unavailable", 503),
            (ConnectCode::FailedPrecondition, "failed_precondition", 400),
            (ConnectCode::Canceled, "canceled", 499),
            (ConnectCode::ResourceExhausted, "resource_exhausted", 429),
        ];
        for (c, name, status) in expected {
            assert_eq!((c.as_str(), c.http_status()), (name, status));
            assert_eq!(ConnectCode::from_name(name), Some(c));
        }
        for c in ConnectCode::ALL {
            assert_eq!(ConnectCode::from_name(c.as_str()), Some(c));
        }
        let e = FsError::new(ConnectCode::NotFound, "file not found: /x");
        assert_eq!(e.to_string(), "not_found: file not found: /x");
        assert_eq!(
            e.connect_body(),
            serde_json::json!({"code": "not_found", "message": "file not found: /x"})
        );
        assert_eq!(
            e.files_body(),
            serde_json::json!({"code": 404, "message": "file not found: /x"})
        );
    }

    #[test]
    fn go_mode_strings_match_go() {
        assert_eq!(go_mode_string(0o100644), "-rw-r--r--");
        assert_eq!(go_mode_string(0o040755), "drwxr-xr-x");
        assert_eq!(go_mode_string(0o120777), "Lrwxrwxrwx");
        assert_eq!(go_mode_string(0o104755), "urwxr-xr-x");
        assert_eq!(go_mode_string(0o041777), "dtrwxrwxrwx");
        assert_eq!(go_mode_string(0o020666), "Dcrw-rw-rw-");
        assert_eq!(go_mode_string(0o060660), "Drw-rw----");
        assert_eq!(go_mode_string(0o010644), "prw-r--r--");
        assert_eq!(go_mode_string(0o140755), "Srwxr-xr-x");
        assert_eq!(go_mode_string(0o102755), "grwxr-xr-x");
    }

    #[test]
    fn entry_info_serializes_as_protojson() {
        let e = EntryInfo {
            name: "a.txt".into(),
            r#type: FileType::File,
            path: "/home/user/a.txt".into(),
            size: 5,
            mode: 0o644,
            permissions: "-rw-r--r--".into(),
            owner: "user".into(),
            group: "user".into(),
            modified_time: Some("2026-11-27T08:03:32Z".into()),
            symlink_target: None,
            metadata: BTreeMap::new(),
            is_symlink: false,
        };
        let json = serde_json::to_value(&StatResponse {
            entry: Some(e.clone()),
        })
        .expect("json");
        assert_eq!(
            json,
            serde_json::json!({"entry": {
                "name": "a.txt", "type": "FILE_TYPE_FILE", "path": "/home/user/a.txt",
                "size": "5", "mode": 420, "permissions": "-rw-r--r--", "owner": "user",
                "group": "user", "modifiedTime": "2026-11-27T08:03:32Z"
            }})
        );
        let back: StatResponse = serde_json::from_value(json).expect("reads back");
        assert_eq!(back.entry, Some(e.clone()));
        // int64 as a number and the symlink fields read too.
        let link: EntryInfo = serde_json::from_str(
            r#"{"name":"l","type":"FILE_TYPE_DIRECTORY","size":7,"symlinkTarget":"/t","isSymlink":true}"#,
        )
        .expect("reads");
        assert_eq!(
            (link.size, link.r#type, link.is_symlink),
            (7, FileType::Directory, true)
        );
        assert_eq!(link.symlink_target.as_deref(), Some("/t"));
        let dangling = EntryInfo {
            r#type: FileType::Symlink,
            is_symlink: true,
            ..EntryInfo::default()
        };
        assert_eq!(
            serde_json::to_value(&dangling).expect("json"),
            serde_json::json!({"type": "FILE_TYPE_SYMLINK", "isSymlink": true})
        );
        assert_eq!(
            serde_json::to_string(&EntryInfo::default()).expect("json"),
            "{}"
        );
        assert_eq!(
            serde_json::to_string(&RemoveResponse {}).expect("json"),
            "{}"
        );
    }

    #[test]
    fn requests_read_as_the_sdk_sends_them() {
        let l: ListDirRequest = serde_json::from_str(r#"{"path":"dir","depth":2}"#).expect("reads");
        assert_eq!((l.path.as_str(), l.effective_depth()), ("dir", 2));
        let l: ListDirRequest = serde_json::from_str(r#"{"path":"dir"}"#).expect("reads");
        assert_eq!(l.effective_depth(), 1);
        let l: ListDirRequest = serde_json::from_str(r#"{"depth":"3"}"#).expect("reads");
        assert_eq!((l.path.as_str(), l.effective_depth()), ("", 3));
        assert!(serde_json::from_str::<ListDirRequest>(r#"{"depth":-1}"#).is_err());
        let m: MoveRequest =
            serde_json::from_str(r#"{"source":"a","destination":"b"}"#).expect("reads");
        assert_eq!((m.source.as_str(), m.destination.as_str()), ("a", "b"));
        let s: StatRequest = serde_json::from_str("{}").expect("reads");
        assert_eq!(s.path, "");
        let mk: MakeDirRequest =
            serde_json::from_str(r#"{"path":"x","future":1}"#).expect("unknown fields are ignored");
        assert_eq!(mk.path, "x");
        assert_eq!(
            serde_json::to_value(&l).expect("json"),
            serde_json::json!({"path": "", "depth": 3})
        );
    }

    #[test]
    fn write_info_is_what_the_sdk_reads() {
        assert_eq!(
            write_info("/home/user/dir/a.txt"),
            serde_json::json!({"name": "a.txt", "type": "file", "path": "/home/user/dir/a.txt"})
        );
    }

    // ---- multipart ---------------------------------------------------------------------------

    /// A body exactly as httpx 0.28 (the SDK's client) encodes
    /// `files=[("file", ("dir/a.txt", b"hello\r\n--x\r\nworld")), ("file", ('/abs/b "q".bin', b"\x00\xff\r\n"))]`.
    fn httpx_body() -> (&'static str, &'static [u8]) {
        (
            "multipart/form-data; boundary=c6e08a656a283de4a9c13bfc99df4387",
            b"--c6e08a656a283de4a9c13bfc99df4387\r\nContent-Disposition: form-data; name=\"file\"; filename=\"dir/a.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--x\r\nworld\r\n--c6e08a656a283de4a9c13bfc99df4387\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/abs/b %22q%22.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n\x00\xff\r\n\r\n--c6e08a656a283de4a9c13bfc99df4387--\r\n",
        )
    }

    #[test]
    fn multipart_reads_an_httpx_upload() {
        let (ct, body) = httpx_body();
        let parts = parse_multipart(ct, body).expect("valid");
        assert_eq!(
            parts,
            [
                UploadPart {
                    filename: Some("dir/a.txt".into()),
                    data: b"hello\r\n--x\r\nworld".to_vec()
                },
                UploadPart {
                    filename: Some("/abs/b %22q%22.bin".into()),
                    data: b"\x00\xff\r\n".to_vec()
                },
            ]
        );
    }

    #[test]
    fn multipart_handles_preambles_quoting_other_fields_and_lf_bodies() {
        let body = b"preamble\r\n--b\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nskip me\r\n--b  \r\ncontent-disposition: form-data; name=file; filename=\"a \\\"q\\\";b.txt\"\r\n\r\n--b-is-not-a-delimiter\r\n--b--\r\nepilogue";
        let parts = parse_multipart("Multipart/Form-Data; charset=utf-8; boundary=\"b\"", body)
            .expect("valid");
        assert_eq!(
            parts,
            [UploadPart {
                filename: Some("a \"q\";b.txt".into()),
                data: b"--b-is-not-a-delimiter".to_vec()
            }]
        );

        let lf = b"--b\nContent-Disposition: form-data; name=\"file\"; filename*=UTF-8''%C3%A9t%C3%A9.txt; filename=\"x\"\n\nline1\nline2\n--b--\n";
        let parts = parse_multipart("multipart/form-data; boundary=b", lf).expect("valid");
        assert_eq!(
            parts,
            [UploadPart {
                filename: Some("été.txt".into()),
                data: b"line1\nline2".to_vec()
            }]
        );

        let no_name = b"--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\ndata\r\n--b--";
        let parts = parse_multipart("multipart/form-data; boundary=b", no_name).expect("valid");
        assert_eq!(
            parts,
            [UploadPart {
                filename: None,
                data: b"data".to_vec()
            }]
        );

        assert_eq!(
            parse_multipart("multipart/form-data; boundary=b", b"--b--\r\n").expect("valid"),
            []
        );
    }

    #[test]
    fn malformed_multipart_is_invalid_argument() {
        let (ct, body) = httpx_body();
        let bad = |ct: &str, body: &[u8]| code(parse_multipart(ct, body));
        assert_eq!(
            bad("multipart/form-data", body),
            ConnectCode::InvalidArgument,
            "no boundary"
        );
        assert_eq!(
            bad("multipart/form-data; boundary=", body),
            ConnectCode::InvalidArgument
        );
        assert_eq!(
            bad("application/json; boundary=c6e0", body),
            ConnectCode::InvalidArgument
        );
        assert_eq!(bad(ct, b""), ConnectCode::InvalidArgument, "empty body");
        for cut in [10, 60, 120, body.len() - 45, body.len() - 5] {
            assert_eq!(
                bad(ct, &body[..cut]),
                ConnectCode::InvalidArgument,
                "truncated at {cut}"
            );
        }
        let no_blank_line =
            b"--b\r\nContent-Disposition: form-data; name=\"file\"\r\ndata\r\n--b--";
        assert_eq!(
            bad("multipart/form-data; boundary=b", no_blank_line),
            ConnectCode::InvalidArgument
        );
        let junk_after_delimiter = b"--b\r\n\r\ndata\r\n--bXX\r\n--b--";
        assert_eq!(
            bad("multipart/form-data; boundary=b", junk_after_delimiter),
            ConnectCode::InvalidArgument
        );
        let many: Vec<u8> = (0..=MAX_PARTS)
            .flat_map(|_| {
                b"--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n".to_vec()
            })
            .chain(b"--b--".to_vec())
            .collect();
        assert_eq!(
            bad("multipart/form-data; boundary=b", &many),
            ConnectCode::InvalidArgument
        );
    }
}
