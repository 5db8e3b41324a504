//! Paths as envd resolves them, and the quoting that carries them into a script.

use super::error::FsError;

/// The default user's home: where relative paths resolve, as in E2B's sandboxes.
pub const HOME: &str = "/home/user";

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

pub use corral_domain::shell::{shell_quote, shell_unquote};

/// The last component of a cleaned absolute path (`/` for the root, as Go's `FileInfo.Name`).
pub(super) fn base_name(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some((_, "")) | None => "/",
        Some((_, name)) => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn code<T: std::fmt::Debug>(r: Result<T, FsError>) -> crate::connect_code::ConnectCode {
        r.expect_err("expected a failure").code
    }

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
        assert_eq!(
            code(resolve("~root/x")),
            crate::connect_code::ConnectCode::InvalidArgument
        );
        assert_eq!(
            code(resolve("/a\0b")),
            crate::connect_code::ConnectCode::InvalidArgument
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn resolve_is_absolute_clean_and_idempotent(path in "[a-z./~]{0,20}") {
            if let Ok(r) = resolve(&path) {
                prop_assert!(r.starts_with('/'));
                prop_assert!(!r.contains("//") && !r.contains("/./") && !r.contains("/../"));
                prop_assert!(r == "/" || !r.ends_with('/'));
                prop_assert_eq!(resolve(&r).ok(), Some(r.clone()));
            }
        }
    }
}
