//! Files through the command boundary, for providers with no file API (Morph, …).
//!
//! Binary-safe (content travels as base64), size-checked (the size is read before the content
//! is sent back), atomic (written to a temporary file beside the target, then renamed), and
//! chunked so that no single command exceeds `max_command_bytes`. Needs `sh`, `base64`, `wc`,
//! `dirname` and `mv` in the sandbox (coreutils or busybox). Exit codes, not stderr, carry the
//! outcome, so providers that merge stderr into stdout work too.

use base64::Engine as _;
use corral_domain::OperationId;

use crate::{CallContext, ExecSpec, ProviderError, Result, SandboxProvider};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

// Exit codes of the helper scripts: unlikely to be produced by the tools themselves.
const EXIT_MISSING: i32 = 101;
const EXIT_NOT_FILE: i32 = 102;
const EXIT_IO: i32 = 103;
const EXIT_TOO_LARGE: i32 = 104;

use crate::shell::shell_quote;

fn output_excerpt(out: &crate::ExecOutput) -> String {
    let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
    if text.trim().is_empty() {
        text = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    crate::error::excerpt(&text, 300)
}

/// Reads a file of at most `max_bytes` by running commands through `provider.exec`.
pub async fn read_file<P: SandboxProvider + ?Sized>(
    provider: &P,
    ctx: &CallContext,
    native_id: &str,
    path: &str,
    max_bytes: usize,
) -> Result<Vec<u8>> {
    let f = shell_quote(path);
    let script = format!(
        "f={f}; [ -e \"$f\" ] || exit {EXIT_MISSING}; [ -f \"$f\" ] || exit {EXIT_NOT_FILE}; \
         n=$(wc -c < \"$f\") || exit {EXIT_IO}; [ \"$n\" -le {max_bytes} ] || exit {EXIT_TOO_LARGE}; \
         base64 < \"$f\" || exit {EXIT_IO}"
    );
    let mut spec = ExecSpec::new(script);
    // Base64 is 4/3 of the content plus line breaks.
    spec.max_output_bytes = max_bytes / 3 * 4 + max_bytes / 57 + 1024;
    let out = provider.exec(ctx, native_id, &spec).await?;
    match out.exit_code {
        0 if out.truncated => Err(ProviderError::FileTooLarge {
            path: path.to_owned(),
            limit: max_bytes,
        }),
        0 => {
            let text: Vec<u8> = out
                .stdout
                .into_iter()
                .filter(|b| !b.is_ascii_whitespace())
                .collect();
            B64.decode(text).map_err(|e| ProviderError::FileOperation {
                path: path.to_owned(),
                message: format!("the sandbox returned malformed base64: {e}"),
            })
        }
        EXIT_MISSING => Err(ProviderError::FileNotFound {
            path: path.to_owned(),
        }),
        EXIT_NOT_FILE => Err(ProviderError::FileRefused {
            path: path.to_owned(),
            reason: "not a regular file".into(),
        }),
        EXIT_TOO_LARGE => Err(ProviderError::FileTooLarge {
            path: path.to_owned(),
            limit: max_bytes,
        }),
        _ => Err(ProviderError::FileOperation {
            path: path.to_owned(),
            message: output_excerpt(&out),
        }),
    }
}

/// Writes a file by running commands through `provider.exec`, each at most
/// `max_command_bytes` long (at least 4 KiB is used).
pub async fn write_file<P: SandboxProvider + ?Sized>(
    provider: &P,
    ctx: &CallContext,
    native_id: &str,
    path: &str,
    content: &[u8],
    max_command_bytes: usize,
) -> Result<()> {
    let f = shell_quote(path);
    let tmp = shell_quote(&format!("{path}.corral-{}", OperationId::new()));
    let fail = |out: &crate::ExecOutput| match out.exit_code {
        EXIT_MISSING => ProviderError::ParentMissing {
            path: path.to_owned(),
        },
        EXIT_NOT_FILE => ProviderError::FileRefused {
            path: path.to_owned(),
            reason: "a directory is in the way".into(),
        },
        _ => ProviderError::FileOperation {
            path: path.to_owned(),
            message: output_excerpt(out),
        },
    };
    let run = |script: String| async move {
        let out = provider
            .exec(ctx, native_id, &ExecSpec::new(script))
            .await?;
        Ok::<_, ProviderError>(out)
    };

    let start = format!(
        "f={f}; d=$(dirname -- \"$f\") || exit {EXIT_IO}; [ -d \"$d\" ] || exit {EXIT_MISSING}; \
         [ -d \"$f\" ] && exit {EXIT_NOT_FILE}; : > {tmp} || exit {EXIT_IO}"
    );
    let out = run(start).await?;
    if out.exit_code != 0 {
        return Err(fail(&out));
    }
    // Chunks of whole 3-byte groups decode independently.
    // The chunk script names the temporary file twice, around ~55 bytes of shell.
    let overhead = 2 * tmp.len() + 64;
    let chunk_bytes = (max_command_bytes.max(4096).saturating_sub(overhead) / 4 * 3).max(3);
    for chunk in content.chunks(chunk_bytes) {
        let script = format!(
            "printf '%s' '{}' | base64 -d >> {tmp} || {{ rm -f {tmp}; exit {EXIT_IO}; }}",
            B64.encode(chunk)
        );
        let out = run(script).await?;
        if out.exit_code != 0 {
            return Err(fail(&out));
        }
    }
    let finish = format!(
        "n=$(wc -c < {tmp}) && [ \"$n\" -eq {len} ] && mv -f -- {tmp} {f} || {{ rm -f {tmp}; exit {EXIT_IO}; }}",
        len = content.len()
    );
    let out = run(finish).await?;
    if out.exit_code != 0 {
        return Err(fail(&out));
    }
    Ok(())
}

/// Checks, through `provider.exec`, that `path` can be written by a file API that would
/// otherwise create missing parents or fail obscurely: `ParentMissing` when its parent
/// directory does not exist, `FileRefused` when a directory is in the way. For providers whose
/// file-write endpoint does not report these cases itself (Vercel, Runloop).
pub async fn check_write_target<P: SandboxProvider + ?Sized>(
    provider: &P,
    ctx: &CallContext,
    native_id: &str,
    path: &str,
) -> Result<()> {
    let f = shell_quote(path);
    let script = format!(
        "f={f}; d=$(dirname -- \"$f\") || exit {EXIT_IO}; [ -d \"$d\" ] || exit {EXIT_MISSING}; \
         [ -d \"$f\" ] && exit {EXIT_NOT_FILE}; exit 0"
    );
    let out = provider
        .exec(ctx, native_id, &ExecSpec::new(script))
        .await?;
    match out.exit_code {
        0 => Ok(()),
        EXIT_MISSING => Err(ProviderError::ParentMissing {
            path: path.to_owned(),
        }),
        EXIT_NOT_FILE => Err(ProviderError::FileRefused {
            path: path.to_owned(),
            reason: "a directory is in the way".into(),
        }),
        _ => Err(ProviderError::FileOperation {
            path: path.to_owned(),
            message: output_excerpt(&out),
        }),
    }
}

/// Explains a failed file read through `provider.exec`: `FileNotFound` when `path` does not
/// exist, `FileRefused` when it is not a regular file, else `original` (the provider's own
/// error). For providers whose file-read endpoint does not say which case it hit.
pub async fn explain_read_failure<P: SandboxProvider + ?Sized>(
    provider: &P,
    ctx: &CallContext,
    native_id: &str,
    path: &str,
    original: ProviderError,
) -> ProviderError {
    let f = shell_quote(path);
    let script = format!(
        "f={f}; [ -e \"$f\" ] || exit {EXIT_MISSING}; [ -f \"$f\" ] || exit {EXIT_NOT_FILE}; exit 0"
    );
    match provider.exec(ctx, native_id, &ExecSpec::new(script)).await {
        Ok(out) if out.exit_code == EXIT_MISSING => ProviderError::FileNotFound {
            path: path.to_owned(),
        },
        Ok(out) if out.exit_code == EXIT_NOT_FILE => ProviderError::FileRefused {
            path: path.to_owned(),
            reason: "not a regular file".into(),
        },
        // The sandbox itself is gone: say so rather than blame the file.
        Err(e @ ProviderError::NotFound { .. }) => e,
        _ => original,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_single_quotes_and_spaces() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
