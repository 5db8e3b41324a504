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
//!
//! The pieces, each in its module: [`path`] (resolution and quoting), [`wire`] (the
//! messages), [`scripts`] (the scripts and the reading of their output), [`multipart`] (the
//! upload parser) and [`error`] (a failure in Connect's terms, [`crate::connect_code`]'s table).

pub mod error;
pub mod multipart;
pub mod path;
pub mod scripts;
pub mod wire;

pub use self::error::{ConnectCode, FsError};
pub use self::multipart::{UploadPart, parse_multipart};
pub use self::path::{HOME, resolve, shell_quote, shell_unquote};
pub use self::scripts::{
    go_mode_string, list_dir_script, make_dir_script, move_script, parse_list_dir, parse_make_dir,
    parse_move, parse_remove, parse_stat, remove_script, stat_script,
};
pub use self::wire::{
    EntryInfo, FileType, ListDirRequest, ListDirResponse, MakeDirRequest, MakeDirResponse,
    MoveRequest, MoveResponse, RemoveRequest, RemoveResponse, StatRequest, StatResponse,
    write_info,
};
