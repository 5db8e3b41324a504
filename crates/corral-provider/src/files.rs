//! File-path rules shared by adapters whose provider's upload would create missing parent
//! directories (E2B envd, the Daytona toolbox, …), which Corral's contract forbids.

use std::future::Future;

use crate::{ProviderError, Result};

/// The parent directory of an absolute `path` (`/` for a top-level entry), or `None` for a
/// path with no `/`. Trailing slashes are ignored.
pub fn parent_dir(path: &str) -> Option<&str> {
    let trimmed = path.trim_end_matches('/');
    let cut = trimmed.rfind('/')?;
    Some(if cut == 0 { "/" } else { &trimmed[..cut] })
}

/// Checks that `path`'s parent is an existing directory before a write: `is_dir(parent)`
/// answers `Ok(false)` for a missing parent or one that is not a directory, which becomes
/// `ParentMissing`; its errors pass through.
pub async fn check_parent_dir<F, Fut>(path: &str, is_dir: F) -> Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let Some(parent) = parent_dir(path) else {
        return Err(ProviderError::FileRefused {
            path: path.to_owned(),
            reason: "the path has no parent directory".into(),
        });
    };
    if is_dir(parent.to_owned()).await? {
        Ok(())
    } else {
        Err(ProviderError::ParentMissing {
            path: path.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_of_paths() {
        assert_eq!(parent_dir("/tmp/a/b.txt"), Some("/tmp/a"));
        assert_eq!(parent_dir("/b.txt"), Some("/"));
        assert_eq!(parent_dir("/tmp/a/"), Some("/tmp"));
        assert_eq!(parent_dir("b.txt"), None);
    }

    #[tokio::test]
    async fn a_missing_parent_is_parent_missing_and_errors_pass_through() {
        let seen = std::sync::Mutex::new(String::new());
        check_parent_dir("/w/x", |p| {
            *seen.lock().unwrap() = p;
            async { Ok(true) }
        })
        .await
        .unwrap();
        assert_eq!(*seen.lock().unwrap(), "/w");
        let err = check_parent_dir("/w/x", |_| async { Ok(false) }).await;
        assert!(matches!(err, Err(ProviderError::ParentMissing { .. })));
        let err = check_parent_dir("/w/x", |_| async {
            Err(ProviderError::FileNotFound { path: "/w".into() })
        })
        .await;
        assert!(matches!(err, Err(ProviderError::FileNotFound { .. })));
        let err = check_parent_dir("x", |_| async { Ok(true) }).await;
        assert!(matches!(err, Err(ProviderError::FileRefused { .. })));
    }
}
