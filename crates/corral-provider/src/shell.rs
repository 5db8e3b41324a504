//! Shell plumbing for providers whose exec takes one command line and has no cwd or env of its
//! own (Runloop, Morph, …): the quoting and the prelude that applies cwd and env, written once.

use corral_domain::Provider;

use crate::{ExecSpec, ProviderError, Result};

pub use corral_domain::shell::shell_quote;

/// Whether `name` can be exported by a POSIX shell (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn is_shell_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The lines that apply `spec`'s cwd and env before its command: `cd -- '<cwd>' || exit 1`,
/// then `export NAME='value'` per variable. Every caller-supplied part is quoted; an env name
/// that is not a shell name is `InvalidRequest` for `provider`.
pub fn prelude(provider: Provider, spec: &ExecSpec) -> Result<String> {
    let mut script = String::new();
    if let Some(cwd) = &spec.cwd {
        script.push_str(&format!("cd -- {} || exit 1\n", shell_quote(cwd)));
    }
    for (name, value) in &spec.env {
        if !is_shell_name(name) {
            return Err(ProviderError::InvalidRequest {
                provider,
                message: format!("environment variable name `{name}` is not a shell name"),
            });
        }
        script.push_str(&format!("export {name}={}\n", shell_quote(value)));
    }
    Ok(script)
}

/// [`prelude`] followed by the command: a script for `sh -c`.
pub fn script(provider: Provider, spec: &ExecSpec) -> Result<String> {
    let mut script = prelude(provider, spec)?;
    script.push_str(&spec.command);
    Ok(script)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn quoting_survives_embedded_quotes() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn the_prelude_quotes_cwd_and_values_and_refuses_bad_names() {
        let mut spec = ExecSpec::new("pwd");
        spec.cwd = Some("/tmp/a b".into());
        spec.env = BTreeMap::from([("A".to_owned(), "$(x) 'y'".to_owned())]);
        assert_eq!(
            script(Provider::Morph, &spec).unwrap(),
            "cd -- '/tmp/a b' || exit 1\nexport A='$(x) '\\''y'\\'''\npwd"
        );
        spec.env = BTreeMap::from([("A;rm".to_owned(), "x".to_owned())]);
        assert!(matches!(
            prelude(Provider::Morph, &spec),
            Err(ProviderError::InvalidRequest { .. })
        ));
        assert!(is_shell_name("_A1") && !is_shell_name("1A") && !is_shell_name(""));
    }
}
