//! envd's `process.Process` service over Corral commands: `Start` and `Connect` as server
//! streams (start, data, end and keep-alive events), `List`, `SendInput`, `CloseStdin` and
//! `SendSignal`. A command is a durable job, so a process outlives the call that started it
//! and any dropped stream.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use futures::stream::{BoxStream, StreamExt as _};
use serde_json::{Value, json};

use corral_domain::{
    Command, CommandState, FileEncoding, OutputEvent, OutputStream, Signal, SignalInput,
    StartCommandInput, StdinInput,
};
use corral_service::InlineAccess;

use crate::wire::{
    ProcessConfig, ProcessInfo, ProcessSelector, SelectRequest, SendInputRequest,
    SendSignalRequest, StartRequest,
};
use crate::{E2bError, FrontDoor, SandboxCaller, connect, fs};

/// envd's keep-alive interval when the caller names none.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(50);

/// How a streaming call was asked for (its headers).
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamOptions {
    /// `Keepalive-Ping-Interval`, seconds.
    pub keepalive_seconds: Option<u64>,
    /// `Connect-Timeout-Ms`: envd ends the process at this deadline.
    pub timeout_ms: Option<u64>,
}

/// A stream of Connect envelopes, ending with the end-of-stream message.
pub type EnvelopeStream = BoxStream<'static, Vec<u8>>;

/// A command's pid: a stable 31-bit hash (FNV-1a) of its id, never 0. Stateless, so it is
/// the same on every replica and after restarts.
pub fn pid_of(command: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in command.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    (h & 0x7fff_ffff).max(1)
}

/// E2B's SDKs run `/bin/bash -l -c <command>`. Corral runs commands with `sh -c`, so the
/// script runs under bash as a login shell where the sandbox has bash (E2B's semantics:
/// `[[`, arrays, `printf '\x..'`), and under `sh` where it has none (busybox images). Another
/// shell's `-c` script runs as is; any other program runs as its quoted argv.
fn command_line(p: &ProcessConfig) -> String {
    let program = p.cmd.rsplit('/').next();
    let shell = matches!(program, Some("bash" | "sh" | "ash" | "dash" | "zsh"));
    match p.args.as_slice() {
        [c, script] | [_, c, script] if shell && c == "-c" => {
            if program == Some("bash") {
                let s = fs::shell_quote(script);
                format!(
                    "s={s}; if [ -x /bin/bash ]; then exec /bin/bash -l -c \"$s\"; fi; exec /bin/sh -c \"$s\""
                )
            } else {
                script.clone()
            }
        }
        args => std::iter::once(&p.cmd)
            .chain(args)
            .map(|a| fs::shell_quote(a))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// The script of a command [`command_line`] wrapped, for `List` to show as E2B would.
fn script_of(command: &str) -> String {
    command
        .strip_prefix("s=")
        .and_then(|rest| rest.split_once("; if [ -x /bin/bash ]; then exec /bin/bash -l -c"))
        .and_then(|(quoted, _)| fs::shell_unquote(quoted))
        .unwrap_or_else(|| command.to_owned())
}

fn event(v: Value) -> Vec<u8> {
    connect::message(&json!({ "event": v }))
}

/// The `end` event of a finished command, as envd words it (Go's `ProcessState`).
fn end_event(state: CommandState, exit_code: Option<i32>) -> Result<Value, E2bError> {
    match state {
        CommandState::Exited => {
            let code = exit_code.unwrap_or(0);
            let mut end = json!({"exited": true, "status": format!("exit status {code}")});
            if code != 0 {
                end["exitCode"] = json!(code);
            }
            Ok(end)
        }
        CommandState::Killed => Ok(json!({
            "exitCode": -1, "status": "signal: killed", "error": "signal: killed"
        })),
        CommandState::TimedOut => Err(E2bError::Service {
            source: corral_service::error::ServiceError::RequestTimeout {
                message:
                    "context deadline exceeded: the command ran past its timeout and was killed"
                        .into(),
            },
        }),
        CommandState::Lost | CommandState::Starting | CommandState::Running => {
            Err(E2bError::Service {
                source: corral_service::error::ServiceError::ProviderUnavailable {
                    message: "the command's outcome was lost with its sandbox or provider".into(),
                    retry_after: None,
                },
            })
        }
    }
}

/// The data event of journaled output.
fn data_event(stream: OutputStream, data: &str, encoding: FileEncoding) -> Option<Vec<u8>> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let encoded = match encoding {
        FileEncoding::Utf8 => b64.encode(data.as_bytes()),
        FileEncoding::Base64 => data.to_owned(),
    };
    let name = match stream {
        OutputStream::Stdout => "stdout",
        OutputStream::Stderr => "stderr",
    };
    Some(event(json!({"data": { name: encoded }})))
}

impl FrontDoor {
    /// The running command a selector names (by pid or tag); ended ones are forgotten, as
    /// envd forgets them.
    async fn select(&self, sc: &SandboxCaller, sel: &ProcessSelector) -> Result<Command, E2bError> {
        let running = self.running(sc).await?;
        let found = match (sel.pid, sel.tag.as_deref()) {
            (Some(pid), _) => running
                .into_iter()
                .find(|c| pid_of(&c.id.to_string()) == pid),
            (None, Some(tag)) => running.into_iter().find(|c| c.tag.as_deref() == Some(tag)),
            (None, None) => return Err(E2bError::invalid("name the process by pid or tag")),
        };
        found.ok_or_else(|| {
            E2bError::not_found(match (sel.pid, &sel.tag) {
                (Some(pid), _) => format!("process with pid {pid} not found"),
                (_, tag) => format!(
                    "process with tag {} not found",
                    tag.as_deref().unwrap_or("")
                ),
            })
        })
    }

    /// The sandbox's running commands (the first 1000: envd's own table is far smaller).
    async fn running(&self, sc: &SandboxCaller) -> Result<Vec<Command>, E2bError> {
        let mut out = Vec::new();
        let mut cursor = None;
        for _ in 0..10 {
            let page = self
                .service()
                .list_commands(
                    &sc.caller,
                    &sc.id(),
                    Some("running"),
                    cursor.as_deref(),
                    Some(100),
                )
                .await?;
            out.extend(page.items);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        Ok(out)
    }

    /// `process.Process/Start`: starts the command and streams its events until it ends.
    pub async fn start(
        &self,
        sc: &SandboxCaller,
        body: &[u8],
        opts: StreamOptions,
    ) -> Result<EnvelopeStream, E2bError> {
        let req: StartRequest = connect::request(body)?;
        if req.pty.as_ref().is_some_and(|p| !p.is_null()) {
            return Err(E2bError::Unsupported {
                message: "pseudo-terminals (pty) are not supported by Corral's E2B front door"
                    .into(),
            });
        }
        let p = &req.process;
        let cwd = fs::resolve(p.cwd.as_deref().unwrap_or(fs::HOME))
            .map_err(|e| E2bError::invalid(e.to_string()))?;
        // The create's variables, then the call's. HOME stays the provider's: adapters keep
        // their command bookkeeping under it (E2B's is /home/user anyway).
        let mut env = sc.record.env.clone();
        env.extend(p.envs.clone());
        let input = StartCommandInput {
            command: command_line(p),
            cwd: Some(cwd),
            env: Some(env),
            // envd opens stdin unless told not to.
            stdin: req.stdin != Some(false),
            timeout_seconds: opts
                .timeout_ms
                .filter(|ms| *ms > 0)
                .map(|ms| ms.div_ceil(1000).min(self.service_max_timeout())),
            tag: req.tag.clone(),
        };
        let created = self
            .service()
            .start_command(&sc.caller, InlineAccess::default(), &sc.id(), None, input)
            .await?;
        let command: Command = serde_json::from_str(&created.body)
            .map_err(|_| E2bError::invalid("the start's answer could not be read"))?;
        self.follow(sc, &command, 0, opts).await
    }

    /// The longest command timeout the service takes.
    fn service_max_timeout(&self) -> u64 {
        self.service().commands_max_timeout().as_secs().max(1)
    }

    /// `process.Process/Connect`: the process's events from now on (envd does not replay).
    pub async fn connect_process(
        &self,
        sc: &SandboxCaller,
        body: &[u8],
        opts: StreamOptions,
    ) -> Result<EnvelopeStream, E2bError> {
        let req: SelectRequest = connect::request(body)?;
        let command = self.select(sc, &req.process).await?;
        let id = command.id.to_string();
        // Skip what was journaled before now.
        let mut after = 0;
        for _ in 0..10_000 {
            let page = self
                .service()
                .command_output(&sc.caller, &sc.id(), &id, after)
                .await?;
            if page.events.is_empty() || page.done {
                break;
            }
            after = page.next_after;
        }
        self.follow(sc, &command, after, opts).await
    }

    async fn follow(
        &self,
        sc: &SandboxCaller,
        command: &Command,
        after: u64,
        opts: StreamOptions,
    ) -> Result<EnvelopeStream, E2bError> {
        let id = command.id.to_string();
        let pid = pid_of(&id);
        let events = self
            .service()
            .follow_output(&sc.caller, &sc.id(), &id, after)
            .await?;
        let keepalive = opts
            .keepalive_seconds
            .filter(|s| *s > 0)
            .map_or(DEFAULT_KEEPALIVE, |s| Duration::from_secs(s.min(600)));
        let first = event(json!({"start": {"pid": pid}}));
        struct Follow<S> {
            events: std::pin::Pin<Box<S>>,
            keepalive: Duration,
            done: bool,
            front: FrontDoor,
            sc: SandboxCaller,
        }
        let state = Follow {
            events: Box::pin(events),
            keepalive,
            done: false,
            front: self.clone(),
            sc: sc.clone(),
        };
        let rest = futures::stream::unfold(state, |mut st| async move {
            if st.done {
                return None;
            }
            loop {
                let next = match tokio::time::timeout(st.keepalive, st.events.next()).await {
                    Err(_) => return Some((event(json!({"keepalive": {}})), st)),
                    Ok(next) => next,
                };
                let out =
                    match next {
                        Some(Ok(OutputEvent::Output {
                            stream,
                            data,
                            encoding,
                            ..
                        })) => data_event(stream, &data, encoding),
                        // Bytes provably lost (retention): envd has no such event; skip it.
                        Some(Ok(OutputEvent::Gap { .. })) => None,
                        Some(Ok(OutputEvent::Exit {
                            state, exit_code, ..
                        })) => {
                            st.done = true;
                            // A command ended with its sandbox: envd's stream just breaks, and the
                            // SDK then finds the sandbox gone ("killed or reached its end of life").
                            if matches!(state, CommandState::Killed | CommandState::Lost)
                                && (st.front.is_ending(st.sc.sandbox)
                                    || !st.front.running_now(&st.sc).await.unwrap_or(true))
                            {
                                return Some((connect::end(Some(&E2bError::Service {
                                source: corral_service::error::ServiceError::ProviderUnavailable {
                                    message: "the sandbox ended while the command ran".into(),
                                    retry_after: None,
                                },
                            })), st));
                            }
                            let mut out = Vec::new();
                            match end_event(state, exit_code) {
                                Ok(end) => {
                                    out.extend(event(json!({ "end": end })));
                                    out.extend(connect::end(None));
                                }
                                Err(e) => out.extend(connect::end(Some(&e))),
                            }
                            Some(out)
                        }
                        Some(Err(e)) => {
                            st.done = true;
                            Some(connect::end(Some(&E2bError::from(e))))
                        }
                        None => {
                            st.done = true;
                            Some(connect::end(Some(&E2bError::Service {
                                source: corral_service::error::ServiceError::ProviderUnavailable {
                                    message: "the command's output ended without its exit".into(),
                                    retry_after: None,
                                },
                            })))
                        }
                    };
                if let Some(bytes) = out {
                    return Some((bytes, st));
                }
            }
        });
        Ok(futures::stream::iter([first]).chain(rest).boxed())
    }

    /// `process.Process/List`: the running processes.
    pub async fn list_processes(&self, sc: &SandboxCaller) -> Result<Value, E2bError> {
        let processes: Vec<ProcessInfo> = self
            .running(sc)
            .await?
            .into_iter()
            .map(|c| ProcessInfo {
                pid: pid_of(&c.id.to_string()),
                config: ProcessConfig {
                    cmd: "/bin/bash".into(),
                    args: vec!["-l".into(), "-c".into(), script_of(&c.command)],
                    envs: BTreeMap::new(),
                    cwd: None,
                },
                tag: c.tag,
            })
            .collect();
        Ok(json!({ "processes": processes }))
    }

    /// `process.Process/SendInput`: bytes to the process's stdin.
    pub async fn send_input(&self, sc: &SandboxCaller, body: &[u8]) -> Result<Value, E2bError> {
        let req: SendInputRequest = unary(body)?;
        if req.input.pty.is_some() {
            return Err(E2bError::Unsupported {
                message: "pseudo-terminals (pty) are not supported by Corral's E2B front door"
                    .into(),
            });
        }
        let Some(data) = req.input.stdin else {
            return Err(E2bError::invalid("input.stdin is missing"));
        };
        let command = self.select(sc, &req.process).await?;
        if !command.stdin_open {
            return Err(E2bError::FailedPrecondition {
                message: "stdin not enabled or closed".into(),
            });
        }
        self.stdin(sc, &command, data, false).await
    }

    /// `process.Process/CloseStdin`.
    pub async fn close_stdin(&self, sc: &SandboxCaller, body: &[u8]) -> Result<Value, E2bError> {
        let req: SelectRequest = unary(body)?;
        let command = self.select(sc, &req.process).await?;
        self.stdin(sc, &command, String::new(), true).await
    }

    async fn stdin(
        &self,
        sc: &SandboxCaller,
        command: &Command,
        data: String,
        close: bool,
    ) -> Result<Value, E2bError> {
        let input = StdinInput {
            data,
            encoding: Some(FileEncoding::Base64),
            offset: None,
            close,
        };
        self.service()
            .write_stdin(
                &sc.caller,
                InlineAccess::default(),
                &sc.id(),
                &command.id.to_string(),
                input,
            )
            .await?;
        Ok(json!({}))
    }

    /// `process.Process/SendSignal`: `SIGNAL_SIGTERM` or `SIGNAL_SIGKILL`.
    pub async fn send_signal(&self, sc: &SandboxCaller, body: &[u8]) -> Result<Value, E2bError> {
        let req: SendSignalRequest = unary(body)?;
        let signal = match &req.signal {
            Value::String(s) if s == "SIGNAL_SIGTERM" => Signal::Term,
            Value::String(s) if s == "SIGNAL_SIGKILL" => Signal::Kill,
            Value::Number(n) if n.as_u64() == Some(15) => Signal::Term,
            Value::Number(n) if n.as_u64() == Some(9) => Signal::Kill,
            other => {
                return Err(E2bError::Unsupported {
                    message: format!("invalid signal: {other}"),
                });
            }
        };
        let command = self.select(sc, &req.process).await?;
        self.service()
            .signal_command(
                &sc.caller,
                InlineAccess::default(),
                &sc.id(),
                &command.id.to_string(),
                SignalInput { signal },
            )
            .await?;
        Ok(json!({}))
    }
}

/// The body of a unary Connect call (`application/json`).
pub fn unary<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, E2bError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| E2bError::invalid(format!("malformed request: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdks_bash_wrapper_runs_the_script_itself() {
        let p = |cmd: &str, args: &[&str]| ProcessConfig {
            cmd: cmd.into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..ProcessConfig::default()
        };
        let wrapped = command_line(&p("/bin/bash", &["-l", "-c", "echo 'hi' | tr h H"]));
        assert_eq!(script_of(&wrapped), "echo 'hi' | tr h H");
        // Under a real sh: bash runs it where there is one.
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&wrapped)
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"Hi\n");
        let bashism = command_line(&p(
            "/bin/bash",
            &["-l", "-c", "[[ a == a ]] && printf '\\x41'"],
        ));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&bashism)
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"A", "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(command_line(&p("sh", &["-c", "ls"])), "ls");
        assert_eq!(script_of("ls -l"), "ls -l");
        assert_eq!(
            command_line(&p("/usr/bin/env", &["a b", "c'd"])),
            "'/usr/bin/env' 'a b' 'c'\\''d'"
        );
        // `-c` to a program that is not a shell is an argument like any other.
        assert_eq!(
            command_line(&p("python3", &["-c", "print(1)"])),
            "'python3' '-c' 'print(1)'"
        );
    }

    #[test]
    fn pids_are_stable_small_and_never_zero() {
        let a = pid_of("cmd_01HZX5Z8Q0T7W3M1N2P3Q4R5S6");
        assert_eq!(a, pid_of("cmd_01HZX5Z8Q0T7W3M1N2P3Q4R5S6"));
        assert_ne!(a, pid_of("cmd_01HZX5Z8Q0T7W3M1N2P3Q4R5S7"));
        assert!(a > 0 && a <= 0x7fff_ffff);
        assert!(pid_of("") > 0);
    }

    #[test]
    fn an_exit_reads_as_envd_words_it() {
        let ok = end_event(CommandState::Exited, Some(0)).unwrap();
        assert_eq!(ok, json!({"exited": true, "status": "exit status 0"}));
        let failed = end_event(CommandState::Exited, Some(3)).unwrap();
        assert_eq!(failed["exitCode"], 3);
        assert_eq!(
            end_event(CommandState::Killed, None).unwrap()["exitCode"],
            -1
        );
        let timed_out = end_event(CommandState::TimedOut, None).unwrap_err();
        assert_eq!(timed_out.connect_code(), "deadline_exceeded");
        assert_eq!(
            end_event(CommandState::Lost, None)
                .unwrap_err()
                .connect_code(),
            "unavailable"
        );
    }
}
