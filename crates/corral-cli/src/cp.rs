//! `corral cp`: one file between the local disk and a sandbox, binary-safe (the content
//! travels base64-encoded both ways). `SBX:/path` names a file in a sandbox, `-` is stdin or
//! stdout, anything else is a local path.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;

use base64::Engine as _;
use clap::Args;
use corral_domain::limits::MAX_WRITE_BYTES;
use corral_domain::{FileEncoding, ReadFileInput, SandboxId, WriteFileInput};

use crate::{Connection, Failure};

/// `corral cp`.
#[derive(Debug, Args)]
pub struct CpArgs {
    /// The source: `SBX:/path`, a local path, or `-` (stdin).
    pub source: String,
    /// The destination: `SBX:/path`, a local path, or `-` (stdout).
    pub destination: String,
    /// The server, the key, the output format.
    #[command(flatten)]
    pub conn: Connection,
}

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A file in a sandbox.
    Remote {
        /// The sandbox.
        sandbox: SandboxId,
        /// The path inside it.
        path: String,
    },
    /// A local file.
    Local(PathBuf),
    /// Standard input or output.
    Std,
}

/// Parses one side: `sbx_…:/path` is remote (a local path with a colon is written `./a:b`).
pub fn place(s: &str) -> Result<Place, Failure> {
    if s == "-" {
        return Ok(Place::Std);
    }
    if s.starts_with("sbx_")
        && let Some((id, path)) = s.split_once(':')
    {
        let sandbox = id
            .parse::<SandboxId>()
            .map_err(|e| Failure::usage(format!("`{id}` is not a sandbox id: {e}")))?;
        if path.is_empty() {
            return Err(Failure::usage(format!(
                "`{s}` names no path in the sandbox"
            )));
        }
        return Ok(Place::Remote {
            sandbox,
            path: path.to_owned(),
        });
    }
    Ok(Place::Local(PathBuf::from(s)))
}

/// Runs `corral cp`.
pub async fn cp(args: CpArgs) -> Result<(), Failure> {
    let (from, to) = (place(&args.source)?, place(&args.destination)?);
    match (from, to) {
        (Place::Remote { sandbox, path }, to @ (Place::Local(_) | Place::Std)) => {
            let client = crate::config::client(&args.conn)?;
            let read = client
                .read_file(
                    &sandbox,
                    &ReadFileInput {
                        path,
                        encoding: Some(FileEncoding::Base64),
                    },
                )
                .await?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(read.content.as_bytes())
                .map_err(|e| Failure {
                    message: format!("the server's base64 is not valid: {e}"),
                    code: crate::EXIT_API,
                })?;
            match to {
                Place::Local(p) => std::fs::write(&p, &bytes)
                    .map_err(|e| Failure::usage(format!("cannot write {}: {e}", p.display())))?,
                _ => {
                    let mut out = std::io::stdout();
                    out.write_all(&bytes)
                        .and_then(|()| out.flush())
                        .map_err(|e| Failure::usage(format!("cannot write stdout: {e}")))?;
                }
            }
            Ok(())
        }
        (from @ (Place::Local(_) | Place::Std), Place::Remote { sandbox, path }) => {
            let bytes = match from {
                Place::Local(p) => std::fs::read(&p)
                    .map_err(|e| Failure::usage(format!("cannot read {}: {e}", p.display())))?,
                _ => {
                    let mut buf = Vec::new();
                    std::io::stdin()
                        .read_to_end(&mut buf)
                        .map_err(|e| Failure::usage(format!("cannot read stdin: {e}")))?;
                    buf
                }
            };
            // The API's limit, said before the upload rather than after it.
            if bytes.len() > MAX_WRITE_BYTES {
                return Err(Failure::usage(format!(
                    "the file is {} bytes; a write carries at most {MAX_WRITE_BYTES}",
                    bytes.len()
                )));
            }
            let client = crate::config::client(&args.conn)?;
            let written = client
                .write_file(
                    &sandbox,
                    &WriteFileInput {
                        path,
                        content: base64::engine::general_purpose::STANDARD.encode(&bytes),
                        encoding: Some(FileEncoding::Base64),
                    },
                )
                .await?;
            if args.conn.json {
                crate::render::json(&written)?;
            }
            Ok(())
        }
        (Place::Remote { .. }, Place::Remote { .. }) => Err(Failure::usage(
            "copy between two sandboxes through the local disk: `cp SBX:/a ./f && cp ./f SBX2:/b`",
        )),
        _ => Err(Failure::usage(
            "one side of `corral cp` must be in a sandbox (`sbx_…:/path`)",
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn places_are_remote_only_with_a_sandbox_id_and_a_path() {
        let id = "sbx_local_01j9zzzzzzzzzzzzzzzzzzzzzz";
        match place(&format!("{id}:/tmp/f")).unwrap() {
            Place::Remote { sandbox, path } => {
                assert_eq!(sandbox.to_string(), id);
                assert_eq!(path, "/tmp/f");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(place("./a:b").unwrap(), Place::Local("./a:b".into()));
        assert_eq!(place("-").unwrap(), Place::Std);
        assert!(place(&format!("{id}:")).is_err());
        assert!(place("sbx_nope_x:/tmp").is_err());
    }
}
