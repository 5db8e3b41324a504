//! Where the server URL and the API key come from, first match wins: the flags (`--url`,
//! `--key`), the environment (`CORRAL_URL`, `CORRAL_API_KEY`), the config file.
//!
//! The config file is `--cli-config`, else `$CORRAL_CLI_CONFIG`, else
//! `$XDG_CONFIG_HOME/corral/cli.toml`, else `~/.config/corral/cli.toml`; a missing default
//! file is no error, a missing named one is. Its keys:
//!
//! ```toml
//! url = "http://127.0.0.1:8080"
//! api_key = "crl_…"
//! ```

use std::path::{Path, PathBuf};

use corral_client::Client;
use serde::Deserialize;

use crate::{Connection, Failure};

/// The config file's contents.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The server's base URL.
    pub url: Option<String>,
    /// The project API key.
    pub api_key: Option<String>,
}

/// A non-empty environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The config file to read, and whether it was named (a named file must exist).
fn file_path(conn: &Connection) -> Option<(PathBuf, bool)> {
    if let Some(p) = &conn.cli_config {
        return Some((p.clone(), true));
    }
    if let Some(p) = env("CORRAL_CLI_CONFIG") {
        return Some((PathBuf::from(p), true));
    }
    let base = env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some((base.join("corral").join("cli.toml"), false))
}

fn read_file(conn: &Connection) -> Result<FileConfig, Failure> {
    let Some((path, named)) = file_path(conn) else {
        return Ok(FileConfig::default());
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => {
            return Ok(FileConfig::default());
        }
        Err(e) => {
            return Err(Failure::usage(format!(
                "cannot read the config file {}: {e}",
                path.display()
            )));
        }
    };
    toml::from_str(&text).map_err(|e| {
        Failure::usage(format!(
            "the config file {} is not valid: {e}",
            path.display()
        ))
    })
}

/// The URL and key, resolved flags → environment → file.
pub fn resolve(conn: &Connection) -> Result<(String, String), Failure> {
    let mut url = conn.url.clone().or_else(|| env("CORRAL_URL"));
    let mut key = conn.key.clone().or_else(|| env("CORRAL_API_KEY"));
    if url.is_none() || key.is_none() {
        let file = read_file(conn)?;
        url = url.or(file.url);
        key = key.or(file.api_key);
    }
    let url = url.ok_or_else(|| {
        Failure::usage(
            "no server URL: pass --url, set CORRAL_URL, or put `url = \"…\"` in ~/.config/corral/cli.toml",
        )
    })?;
    let key = key.ok_or_else(|| {
        Failure::usage(
            "no API key: set CORRAL_API_KEY, pass --key, or put `api_key = \"crl_…\"` in ~/.config/corral/cli.toml",
        )
    })?;
    Ok((url, key))
}

/// A client of the resolved server.
pub fn client(conn: &Connection) -> Result<Client, Failure> {
    let (url, key) = resolve(conn)?;
    Ok(Client::new(&url, &key)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn flags_win_and_a_named_file_fills_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("corral-cli-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cli.toml");
        std::fs::write(&path, "url = \"http://file\"\napi_key = \"crl_file\"\n").unwrap();
        let conn = Connection {
            url: Some("http://flag".into()),
            cli_config: Some(path.clone()),
            ..Connection::default()
        };
        // The key comes from the environment when set there (CI may set it), else the file.
        let (url, key) = resolve(&conn).unwrap();
        assert_eq!(url, "http://flag");
        assert_eq!(
            key,
            env("CORRAL_API_KEY").unwrap_or_else(|| "crl_file".into())
        );

        std::fs::write(&path, "url = 3\n").unwrap();
        let conn = Connection {
            cli_config: Some(path),
            ..Connection::default()
        };
        if env("CORRAL_URL").is_none() {
            assert_eq!(resolve(&conn).unwrap_err().code, crate::EXIT_USAGE);
        }
        let missing = Connection {
            url: Some("http://flag".into()),
            cli_config: Some(dir.join("absent.toml")),
            ..Connection::default()
        };
        if env("CORRAL_API_KEY").is_none() {
            assert_eq!(resolve(&missing).unwrap_err().code, crate::EXIT_USAGE);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
