//! Commands as durable jobs over a provider's synchronous exec, for providers with no
//! asynchronous process API (Together, Morph, Fly): a detached wrapper started by one exec
//! call, read back by byte offset by later ones.
//!
//! Layout, per command, in `${TMPDIR:-/tmp}/.corral-commands/<command id>/`:
//!
//! - `run`: the command script (cwd and env prelude, then the command), written from base64;
//! - `out`, `err`: the command's stdout and stderr, appended as it runs;
//! - `pid`: the command's process group (it runs in a session of its own, so a signal reaches
//!   it and its children, never the wrapper);
//! - `rc`: its exit status as the shell reports it (`128 + n` after signal `n`), written by
//!   the wrapper once the command ended and its output files are complete;
//! - with stdin: `in`, a FIFO the command reads; a holder process keeps a writer open (so
//!   the command sees end-of-file only on close), `in.n` counts the bytes accepted, and
//!   `in.closed` marks a closed stdin.
//!
//! The wrapper runs under `setsid`, in a session of its own, so it outlives the exec call that
//! started it and no signal meant for the command reaches it. (It ignores nothing: ignored
//! signals would be inherited by the command, which a shell could not undo.) Every script
//! needs only POSIX `sh`, `setsid`, `base64`, `tail`, `head`, `wc`, `mkfifo`, `kill` and
//! `sleep` (coreutils, util-linux or busybox). Exit codes, not stderr, carry the outcome, so
//! providers that merge the streams work too; output travels as base64 between markers.

use base64::Engine as _;
use corral_domain::{CommandId, OutputStream, Provider, Signal};
use futures::stream::{self, StreamExt as _};

use crate::commands::{CommandEvent, CommandEvents, CommandSpec, OutputOffsets, Started};
use crate::{CallContext, ExecSpec, ProviderError, Result, SandboxProvider};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The per-command directory, relative to the sandbox's temporary directory.
const ROOT: &str = "${TMPDIR:-/tmp}/.corral-commands";

/// Bytes of each stream one poll returns at most (base64 makes it 4/3 on the wire).
const POLL_BYTES: u64 = 256 * 1024;
/// How long one poll waits inside the sandbox for new output or the end, in tenths of a
/// second: a quiet command costs one exec call per this period, a busy one is read at once.
const POLL_WAIT_TENTHS: u32 = 20;

// Exit codes of the scripts: unlikely to be produced by the tools themselves.
const EXIT_UNKNOWN: i32 = 111;
const EXIT_SETUP: i32 = 112;
const EXIT_NO_STDIN: i32 = 113;
const EXIT_STDIN_CLOSED: i32 = 114;
const EXIT_STDIN_GAP: i32 = 115;

fn dir(id: &CommandId) -> String {
    format!("d=\"{ROOT}/{id}\"")
}

fn unknown(provider: &(impl SandboxProvider + ?Sized), id: &str) -> ProviderError {
    ProviderError::NotFound {
        provider: provider.provider(),
        resource: format!("command {id}"),
    }
}

fn failed(
    provider: &(impl SandboxProvider + ?Sized),
    what: &str,
    out: &crate::ExecOutput,
) -> ProviderError {
    let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
    if text.trim().is_empty() {
        text = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    ProviderError::Protocol {
        provider: provider.provider(),
        message: format!(
            "{what} failed with exit code {}: {}",
            out.exit_code,
            crate::error::excerpt(&text, 200)
        ),
    }
}

fn parse_handle(provider: Provider, handle: &str) -> Result<CommandId, ProviderError> {
    handle.parse().map_err(|_| ProviderError::Protocol {
        provider,
        message: format!("`{handle}` is not a command handle of the exec wrapper"),
    })
}

async fn run<P: SandboxProvider + ?Sized>(
    provider: &P,
    ctx: &CallContext,
    native_id: &str,
    script: String,
    max_output: usize,
) -> Result<crate::ExecOutput> {
    let mut spec = ExecSpec::new(script);
    spec.timeout = ctx.bounded(spec.timeout);
    spec.max_output_bytes = max_output;
    provider.exec(ctx, native_id, &spec).await
}

/// Starts `spec` detached. Starting a command id that already started (a retry after a lost
/// answer) starts nothing and answers the same handle.
pub async fn start<'a, P: SandboxProvider + ?Sized>(
    provider: &'a P,
    ctx: &'a CallContext,
    native_id: &'a str,
    spec: &CommandSpec,
) -> Result<Started<'a>> {
    let exec_spec = ExecSpec {
        command: spec.command.clone(),
        cwd: spec.cwd.clone(),
        env: spec.env.clone(),
        ..ExecSpec::new("")
    };
    let script = crate::shell::script(provider.provider(), &exec_spec)?;
    let stdin = if spec.stdin {
        // The holder keeps a writer open on the FIFO (opened read-write, which never blocks),
        // so the command reads end-of-file only when stdin is closed.
        "mkfifo in || exit 112; echo 0 > in.n; sleep 2147483647 <>in >/dev/null 2>&1 & echo $! > holder; \
         setsid sh run <in >out 2>err &"
    } else {
        "setsid sh run </dev/null >out 2>err &"
    };
    let wrapper = format!(
        "{stdin} echo $! > pid.tmp && mv pid.tmp pid; wait $!; \
         echo $? > rc.tmp; mv rc.tmp rc; [ -e holder ] && kill $(cat holder) 2>/dev/null; exit 0"
    );
    let d = dir(&spec.command_id);
    let started = format!(
        "{d}; if [ -e \"$d/pid\" ]; then exit 0; fi; \
         mkdir -p \"$d\" && cd \"$d\" || exit {EXIT_SETUP}; \
         printf '%s' '{run}' | base64 -d > run || exit {EXIT_SETUP}; \
         printf '%s' '{wrapper}' | base64 -d > wrapper || exit {EXIT_SETUP}; \
         : > out; : > err; \
         setsid sh wrapper </dev/null >/dev/null 2>&1 & \
         i=0; while [ ! -e pid ] && [ $i -lt 100 ]; do sleep 0.05 2>/dev/null || sleep 1; i=$((i+1)); done; \
         [ -e pid ] || exit {EXIT_SETUP}",
        run = B64.encode(script),
        wrapper = B64.encode(wrapper),
    );
    let out = run(provider, ctx, native_id, started, 16 * 1024).await?;
    if out.exit_code != 0 {
        return Err(failed(provider, "starting the command", &out));
    }
    Ok(Started {
        handle: spec.command_id.to_string(),
        events: None,
    })
}

/// Whether a command with this id was started: its handle, or `None`.
pub async fn find<P: SandboxProvider + ?Sized>(
    provider: &P,
    ctx: &CallContext,
    native_id: &str,
    command_id: &CommandId,
) -> Result<Option<String>> {
    let d = dir(command_id);
    let out = run(
        provider,
        ctx,
        native_id,
        format!("{d}; [ -e \"$d/pid\" ] || exit {EXIT_UNKNOWN}"),
        1024,
    )
    .await?;
    match out.exit_code {
        0 => Ok(Some(command_id.to_string())),
        EXIT_UNKNOWN => Ok(None),
        _ => Err(failed(provider, "looking the command up", &out)),
    }
}

/// One read of both streams from `from`, and the exit status if the command ended.
struct Poll {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    rc: Option<i32>,
}

async fn poll<P: SandboxProvider + ?Sized>(
    provider: &P,
    ctx: &CallContext,
    native_id: &str,
    id: &CommandId,
    from: OutputOffsets,
) -> Result<Poll> {
    let d = dir(id);
    let (so, se) = (from.stdout, from.stderr);
    // Waits inside the sandbox until a stream grows or the command ends, then reads the exit
    // status *before* the output: once `rc` exists the output files are complete.
    let script = format!(
        "{d}; cd \"$d\" 2>/dev/null || exit {EXIT_UNKNOWN}; i=0; \
         while [ ! -e rc ] && [ $(wc -c < out) -le {so} ] && [ $(wc -c < err) -le {se} ] \
         && [ $i -lt {POLL_WAIT_TENTHS} ]; do sleep 0.1 2>/dev/null || sleep 1; i=$((i+1)); done; \
         rc=$(cat rc 2>/dev/null); \
         printf 'rc:%s\\n' \"$rc\"; \
         printf 'out:'; tail -c +{o1} out | head -c {POLL_BYTES} | base64 | tr -d '\\n'; printf '\\n'; \
         printf 'err:'; tail -c +{e1} err | head -c {POLL_BYTES} | base64 | tr -d '\\n'; printf '\\n'",
        o1 = so + 1,
        e1 = se + 1,
    );
    let cap = (POLL_BYTES as usize) / 3 * 8 + 4096;
    let out = run(provider, ctx, native_id, script, cap).await?;
    match out.exit_code {
        0 => {}
        EXIT_UNKNOWN => return Err(unknown(provider, &id.to_string())),
        _ => return Err(failed(provider, "reading the command's output", &out)),
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("")
            .to_owned()
    };
    let decode = |name: &str| {
        B64.decode(field(name))
            .map_err(|e| ProviderError::Protocol {
                provider: provider.provider(),
                message: format!("the command's {name} came back as malformed base64: {e}"),
            })
    };
    let rc = field("rc:");
    Ok(Poll {
        stdout: decode("out:")?,
        stderr: decode("err:")?,
        rc: if rc.is_empty() {
            None
        } else {
            Some(rc.parse().map_err(|_| ProviderError::Protocol {
                provider: provider.provider(),
                message: format!("the command's exit status `{rc}` is not a number"),
            })?)
        },
    })
}

/// Follows the command's output from `from`, by polling; ends after the exit event.
pub fn attach<'a, P: SandboxProvider + ?Sized>(
    provider: &'a P,
    ctx: &'a CallContext,
    native_id: &'a str,
    handle: &str,
    from: OutputOffsets,
) -> Result<CommandEvents<'a>> {
    let id = parse_handle(provider.provider(), handle)?;
    struct State {
        at: OutputOffsets,
        done: bool,
    }
    let events = stream::unfold(
        State {
            at: from,
            done: false,
        },
        move |mut st| async move {
            if st.done {
                return None;
            }
            let polled = match poll(provider, ctx, native_id, &id, st.at).await {
                Ok(p) => p,
                Err(e) => {
                    st.done = true;
                    return Some((vec![Err(e)], st));
                }
            };
            let mut out = Vec::new();
            for (stream, data) in [
                (OutputStream::Stdout, polled.stdout),
                (OutputStream::Stderr, polled.stderr),
            ] {
                if data.is_empty() {
                    continue;
                }
                let offset = st.at.of(stream);
                let len = data.len() as u64;
                match stream {
                    OutputStream::Stdout => st.at.stdout += len,
                    OutputStream::Stderr => st.at.stderr += len,
                }
                out.push(Ok(CommandEvent::Output {
                    stream,
                    offset: Some(offset),
                    data,
                }));
            }
            // Ended, and this read reached the end of both files (a full read may have more).
            let drained = out.iter().all(|e| match e {
                Ok(CommandEvent::Output { data, .. }) => (data.len() as u64) < POLL_BYTES,
                _ => true,
            });
            if let (Some(rc), true) = (polled.rc, drained) {
                out.push(Ok(CommandEvent::Exit {
                    exit_code: Some(rc),
                }));
                st.done = true;
            }
            Some((out, st))
        },
    )
    .flat_map(stream::iter);
    Ok(events.boxed())
}

/// Writes `data` to the command's stdin at `offset` (bytes already accepted are skipped, so a
/// resend is harmless); answers the total accepted.
pub async fn write_stdin<P: SandboxProvider + ?Sized>(
    provider: &P,
    ctx: &CallContext,
    native_id: &str,
    handle: &str,
    offset: u64,
    data: &[u8],
) -> Result<u64> {
    let id = parse_handle(provider.provider(), handle)?;
    let d = dir(&id);
    let len = data.len() as u64;
    let script = format!(
        "{d}; cd \"$d\" 2>/dev/null || exit {EXIT_UNKNOWN}; [ -p in ] || exit {EXIT_NO_STDIN}; \
         [ -e in.closed ] && exit {EXIT_STDIN_CLOSED}; n=$(cat in.n); [ {offset} -le \"$n\" ] || exit {EXIT_STDIN_GAP}; \
         skip=$((n - {offset})); if [ \"$skip\" -lt {len} ]; then \
         printf '%s' '{b64}' | base64 -d | tail -c +$((skip + 1)) > in || exit 1; \
         echo $(({offset} + {len})) > in.n; fi; cat in.n",
        b64 = B64.encode(data),
    );
    let out = run(provider, ctx, native_id, script, 1024).await?;
    match out.exit_code {
        0 => String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| failed(provider, "writing stdin", &out)),
        EXIT_UNKNOWN => Err(unknown(provider, handle)),
        EXIT_NO_STDIN | EXIT_STDIN_CLOSED => Err(ProviderError::InvalidRequest {
            provider: provider.provider(),
            message: "the command's stdin is not open".into(),
        }),
        EXIT_STDIN_GAP => Err(ProviderError::InvalidRequest {
            provider: provider.provider(),
            message: format!("stdin offset {offset} is past the bytes accepted so far"),
        }),
        _ => Err(failed(provider, "writing stdin", &out)),
    }
}

/// Closes the command's stdin: it reads end-of-file once it has read what was written.
pub async fn close_stdin<P: SandboxProvider + ?Sized>(
    provider: &P,
    ctx: &CallContext,
    native_id: &str,
    handle: &str,
) -> Result<()> {
    let id = parse_handle(provider.provider(), handle)?;
    let d = dir(&id);
    let script = format!(
        "{d}; cd \"$d\" 2>/dev/null || exit {EXIT_UNKNOWN}; [ -p in ] || exit 0; \
         touch in.closed; kill $(cat holder) 2>/dev/null; exit 0"
    );
    let out = run(provider, ctx, native_id, script, 1024).await?;
    match out.exit_code {
        0 => Ok(()),
        EXIT_UNKNOWN => Err(unknown(provider, handle)),
        _ => Err(failed(provider, "closing stdin", &out)),
    }
}

/// Sends `signal` to the command's process group. A command that already ended is `Ok`.
pub async fn signal<P: SandboxProvider + ?Sized>(
    provider: &P,
    ctx: &CallContext,
    native_id: &str,
    handle: &str,
    signal: Signal,
) -> Result<()> {
    let id = parse_handle(provider.provider(), handle)?;
    let d = dir(&id);
    let script = format!(
        "{d}; cd \"$d\" 2>/dev/null || exit {EXIT_UNKNOWN}; [ -e rc ] && exit 0; \
         kill -{sig} -$(cat pid) 2>/dev/null; exit 0",
        sig = signal.as_str()
    );
    let out = run(provider, ctx, native_id, script, 1024).await?;
    match out.exit_code {
        0 => Ok(()),
        EXIT_UNKNOWN => Err(unknown(provider, handle)),
        _ => Err(failed(provider, "signalling the command", &out)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_directory_is_named_after_the_command_id_only() {
        let id = CommandId::new();
        let d = dir(&id);
        assert!(d.ends_with(&format!("/{id}\"")));
        // No caller-supplied text reaches the unquoted parts of a script.
        assert!(!d.contains('\''));
    }

    #[test]
    fn handles_are_command_ids() {
        let id = CommandId::new();
        assert_eq!(parse_handle(Provider::Morph, &id.to_string()).unwrap(), id);
        assert!(parse_handle(Provider::Morph, "1234; rm -rf /").is_err());
    }
}
