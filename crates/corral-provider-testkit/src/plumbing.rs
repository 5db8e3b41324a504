//! The plumbing every provider fake needs and would otherwise write again: a JSON error
//! answer, the bearer credential of a request, a lock that survives a panicked test thread,
//! field checks of a JSON body, sandbox paths, and a copy of a sandbox's directory (for
//! snapshots and forks).
//!
//! What stays in each fake is what its provider does differently: the shape of its error body,
//! its status codes and messages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use serde_json::{Map, Value};

/// An answer of `status` with `body` as JSON: the shape of a provider's error body is the
/// fake's to say.
pub fn json(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// The token of an `Authorization: Bearer …` header, if the request carries one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Locks `m`, taking the state over when a test thread panicked while holding it (the fake
/// serves the tests that remain).
pub fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A JSON body that is an object, or `None`.
pub fn object(body: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// The first field of `map` that is not in `allowed` (a provider that rejects unknown fields
/// answers it with its own message).
pub fn unknown_field<'a>(map: &'a Map<String, Value>, allowed: &[&str]) -> Option<&'a str> {
    map.keys()
        .map(String::as_str)
        .find(|k| !allowed.contains(k))
}

/// `v` as a map of strings to strings, or `None` when it is not an object of strings.
pub fn string_map(v: &Value) -> Option<BTreeMap<String, String>> {
    v.as_object()?
        .iter()
        .map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

/// `path` as the sandbox sees it: absolute as given, relative to `home` otherwise.
pub fn resolve(home: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_owned()
    } else {
        home.join(p)
    }
}

/// Copies the tree under `from` into `to` (made if missing): directories with their
/// permissions, files, and symbolic links as links. Sockets and FIFOs (a command wrapper's
/// stdin) are not files to keep and are left out. Answers the bytes of file content copied.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<u64> {
    std::fs::create_dir_all(to)?;
    let mut bytes = 0;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if kind.is_dir() {
            bytes += copy_tree(&src, &dst)?;
            std::fs::set_permissions(&dst, std::fs::metadata(&src)?.permissions())?;
        } else if kind.is_file() {
            bytes += std::fs::copy(&src, &dst)?;
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_copy_keeps_files_links_and_directories_and_leaves_fifos_out() {
        let from = tempfile::tempdir().unwrap();
        std::fs::create_dir(from.path().join("sub")).unwrap();
        std::fs::write(from.path().join("sub/a.txt"), b"hello").unwrap();
        std::os::unix::fs::symlink("sub/a.txt", from.path().join("link")).unwrap();
        let fifo = from.path().join("in");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let to = tempfile::tempdir().unwrap();
        let copied = copy_tree(from.path(), &to.path().join("copy")).unwrap();
        assert_eq!(copied, 5);
        let copy = to.path().join("copy");
        assert_eq!(std::fs::read(copy.join("sub/a.txt")).unwrap(), b"hello");
        assert_eq!(
            std::fs::read_link(copy.join("link")).unwrap(),
            Path::new("sub/a.txt")
        );
        assert!(!copy.join("in").exists());
    }

    #[test]
    fn field_checks_name_the_first_unknown_field_and_refuse_non_strings() {
        let m = object(br#"{"name":"a","extra":1}"#).unwrap();
        assert_eq!(unknown_field(&m, &["name"]), Some("extra"));
        assert_eq!(unknown_field(&m, &["name", "extra"]), None);
        assert!(object(b"[1]").is_none());
        assert_eq!(
            string_map(&json!({"k": "v"})),
            Some(BTreeMap::from([("k".to_owned(), "v".to_owned())]))
        );
        assert_eq!(string_map(&json!({"k": 1})), None);
        assert_eq!(resolve(Path::new("/home"), "a/b"), Path::new("/home/a/b"));
        assert_eq!(resolve(Path::new("/home"), "/etc"), Path::new("/etc"));
    }

    #[test]
    fn the_bearer_token_is_read_only_from_a_bearer_header() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer tok".parse().unwrap());
        assert_eq!(bearer(&h), Some("tok"));
    }
}
