//! Quoting for a POSIX `sh`: the one function every crate that builds a command line uses
//! (the adapters' shell prelude, the E2B door's scripts, the CLI's `exec`), and its inverse.

/// `s` as one single-quoted `sh` word: safe for any text, quotes and newlines included
/// (a `'` becomes `'\''`).
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_escapes_single_quotes_and_unquoting_inverts_it() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        for s in [
            "",
            "plain",
            "it's",
            "'",
            "''",
            "a\nb",
            "$(id) `id`",
            "é日本",
        ] {
            assert_eq!(shell_unquote(&shell_quote(s)).as_deref(), Some(s));
        }
        assert_eq!(shell_unquote("plain"), None);
        assert_eq!(shell_unquote("'a'b'"), None);
    }
}
