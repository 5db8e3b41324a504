//! The configuration's error and its readers of environment variables: the bottom of
//! `config`, importing nothing else of it.

/// Reading or resolving the configuration failed.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

pub(super) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

pub(super) fn env_u64(name: &str) -> Result<Option<u64>, ConfigError> {
    env(name)
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|_| ConfigError(format!("{name} must be a non-negative integer")))
        })
        .transpose()
}

pub(super) fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}
