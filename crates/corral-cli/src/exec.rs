//! `corral exec SBX -- CMD…`: starts the command through the commands resource (a durable
//! job, started once however often the start is retried), streams its output events to this
//! process's stdout and stderr as they arrive, and exits with the command's exit code.
//! Ctrl-C is forwarded as SIGINT through the signal endpoint, a second one as SIGKILL; the
//! output is followed to the exit event either way, so nothing the command printed is lost.

use std::collections::BTreeMap;
use std::io::Write as _;

use base64::Engine as _;
use clap::Args;
use corral_client::Client;
use corral_domain::{
    CommandState, FileEncoding, OutputEvent, OutputStream, SandboxId, Signal, SignalInput,
    StartCommandInput,
};
use futures::StreamExt as _;

use crate::{Connection, EXIT_EXEC_FAILED, EXIT_TIMED_OUT, Failure};

/// `corral exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The sandbox id (`sbx_…`).
    pub sandbox: SandboxId,
    /// Working directory inside the sandbox.
    #[arg(long)]
    pub cwd: Option<String>,
    /// An environment variable for the command, `NAME=VALUE` (repeatable).
    #[arg(long = "env", short = 'e', value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Kill the command after this many seconds (default: the server's maximum).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// The command and its arguments (after `--`). One argument is run as a shell command
    /// line (`sh -c`); several are quoted so each reaches the program as it was given.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
    /// The server, the key, the output format.
    #[command(flatten)]
    pub conn: Connection,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("`{s}` is not NAME=VALUE"))
}

/// The command line the server runs with `sh -c`: one argument as written, several each
/// single-quoted where needed.
pub fn command_line(args: &[String]) -> String {
    if let [one] = args {
        return one.clone();
    }
    args.iter()
        .map(|a| quote_if_needed(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `arg` as written when it is a plain word, else [`corral_domain::shell::shell_quote`]d.
fn quote_if_needed(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        arg.to_owned()
    } else {
        corral_domain::shell::shell_quote(arg)
    }
}

/// Runs `corral exec`; answers the exit code.
pub async fn exec(args: ExecArgs) -> Result<u8, Failure> {
    let client = crate::config::client(&args.conn)?;
    let input = StartCommandInput {
        command: command_line(&args.command),
        cwd: args.cwd,
        env: (!args.env.is_empty()).then(|| args.env.into_iter().collect::<BTreeMap<_, _>>()),
        timeout_seconds: args.timeout,
        ..StartCommandInput::default()
    };
    let command = client.start_command(&args.sandbox, &input).await?;
    follow(&client, &args.sandbox, &command.id, args.conn.json).await
}

async fn follow(
    client: &Client,
    sandbox: &SandboxId,
    cmd: &corral_domain::CommandId,
    json: bool,
) -> Result<u8, Failure> {
    let mut output = client.follow_output(sandbox, cmd, 0);
    let mut interrupts = 0u32;
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    loop {
        let event = tokio::select! {
            event = output.next() => event,
            // Ctrl-C: the command decides what an interrupt means; keep following its output.
            _ = tokio::signal::ctrl_c() => {
                interrupts += 1;
                let signal = if interrupts == 1 { Signal::Int } else { Signal::Kill };
                if let Err(e) = client.signal_command(sandbox, cmd, &SignalInput { signal }).await {
                    eprintln!("corral: could not send SIG{}: {e}", signal.as_str());
                }
                continue;
            }
        };
        let Some(event) = event else {
            return Err(Failure {
                message: "the output stream ended without the command's exit".into(),
                code: EXIT_EXEC_FAILED,
            });
        };
        let event = event?;
        if json {
            // One event per line, as the API sends them (for scripts that want the seams).
            let line = serde_json::to_string(&event).map_err(|e| Failure {
                message: format!("cannot print JSON: {e}"),
                code: EXIT_EXEC_FAILED,
            })?;
            let _ = writeln!(stdout, "{line}");
            let _ = stdout.flush();
        }
        match event {
            OutputEvent::Output {
                stream,
                data,
                encoding,
                ..
            } if !json => {
                let bytes = match encoding {
                    FileEncoding::Utf8 => data.into_bytes(),
                    FileEncoding::Base64 => base64::engine::general_purpose::STANDARD
                        .decode(data.as_bytes())
                        .map_err(|e| Failure {
                            message: format!("an output event's base64 is not valid: {e}"),
                            code: EXIT_EXEC_FAILED,
                        })?,
                };
                // Written and flushed per event: the terminal sees output as it is made.
                let out: &mut dyn std::io::Write = match stream {
                    OutputStream::Stdout => &mut stdout,
                    OutputStream::Stderr => &mut stderr,
                };
                let _ = out.write_all(&bytes);
                let _ = out.flush();
            }
            OutputEvent::Gap { stream, length, .. } if !json => {
                let n = length.map_or_else(|| "some".to_owned(), |n| n.to_string());
                eprintln!("corral: [{n} bytes of {} lost]", stream.as_str());
            }
            OutputEvent::Exit {
                state, exit_code, ..
            } => return Ok(exit_status(state, exit_code)),
            _ => {}
        }
    }
}

/// The CLI's exit code for a command's end: its own code (`128 + n` for a signal), 124 when it
/// timed out, 125 when it was lost.
pub fn exit_status(state: CommandState, exit_code: Option<i32>) -> u8 {
    match (state, exit_code) {
        (CommandState::TimedOut, _) => EXIT_TIMED_OUT,
        (_, Some(code)) => u8::try_from(code.rem_euclid(256)).unwrap_or(EXIT_EXEC_FAILED),
        _ => EXIT_EXEC_FAILED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_argument_is_a_shell_line_and_several_are_quoted() {
        assert_eq!(command_line(&["echo $HOME | wc".into()]), "echo $HOME | wc");
        assert_eq!(
            command_line(&["printf".into(), "%s\n".into(), "it's".into(), "a b".into()]),
            r"printf '%s
' 'it'\''s' 'a b'"
        );
        assert_eq!(
            command_line(&["ls".into(), "-la".into(), "/tmp".into()]),
            "ls -la /tmp"
        );
        assert_eq!(command_line(&["true".into(), String::new()]), "true ''");
    }

    #[test]
    fn exit_codes_follow_the_command() {
        assert_eq!(exit_status(CommandState::Exited, Some(0)), 0);
        assert_eq!(exit_status(CommandState::Exited, Some(7)), 7);
        assert_eq!(exit_status(CommandState::Killed, Some(130)), 130);
        assert_eq!(exit_status(CommandState::TimedOut, Some(137)), 124);
        assert_eq!(exit_status(CommandState::Lost, None), 125);
    }
}
