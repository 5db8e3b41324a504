//! The scripts that answer envd's filesystem calls, and the reading of their output.
//!
//! Each `<op>_script` is one POSIX `sh` script (busybox-compatible: `stat -c`, `readlink -f`,
//! `mkdir`, `rm`, `mv`, shell globs; no GNU-only options), and `parse_<op>` reads its output.
//! Scripts print NUL-separated records ending in an `END` record, so any byte in a file name is
//! carried and a cut-off output is detected; a failure prints a
//! `CORRAL_FS_ERROR:<code>:<message>` line on stderr (and exits with a code per kind), so the
//! parsing never depends on a locale's wording.

use std::collections::BTreeMap;

use super::error::{ConnectCode, FsError};
use super::path::{base_name, resolve, shell_quote};
use super::wire::{
    EntryInfo, FileType, ListDirRequest, ListDirResponse, MakeDirRequest, MakeDirResponse,
    MoveRequest, MoveResponse, RemoveRequest, RemoveResponse, StatRequest, StatResponse,
};

/// The marker a script prints before a failure's code and message.
const ERROR_MARKER: &str = "CORRAL_FS_ERROR:";

/// The most bytes of a command's own output quoted in an error message.
const MAX_QUOTED_OUTPUT: usize = 2000;

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::fmt;
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
}
