//! The conformance scenarios of commands as durable jobs: start, streamed output, exit,
//! resume after a dropped stream, stdin, signals, a command that outlives its start call, a
//! quiet command, output that is not UTF-8, and finding a start again.
//!
//! Events are merged by offset exactly as the service's journal merges them, so a provider
//! that replays from the start (or resumes at an offset) must deliver every byte exactly once
//! after the merge; a provider that only streams what comes next must say so
//! ([`CommandResume::LiveOnly`]), and the resume scenario then checks only that nothing is
//! repeated.

use std::time::{Duration, Instant};

use corral_domain::{CommandId, CommandResume, OutputStream, Signal};
use corral_provider::{
    CommandEvent, CommandEvents, CommandSpec, ExecSpec, OutputOffsets, ProviderError,
};
use futures::StreamExt as _;

use crate::Conformance;

/// How long a scenario waits for a command's end before failing.
const END_WITHIN: Duration = Duration::from_secs(60);

/// What attaching to a command showed, merged by offset.
#[derive(Debug, Default)]
pub struct Transcript {
    /// Standard output, each byte once.
    pub stdout: Vec<u8>,
    /// Standard error, each byte once.
    pub stderr: Vec<u8>,
    /// The exit event's code, once the exit event came.
    pub exit: Option<Option<i32>>,
    /// When each stdout byte count was first reached (for "streamed while running").
    pub stdout_seen: Vec<(usize, Instant)>,
    /// When the exit event came.
    pub exit_at: Option<Instant>,
    /// Bytes delivered again at an offset already seen (must stay 0 after the merge).
    pub repeated: u64,
}

impl Transcript {
    fn offsets(&self) -> OutputOffsets {
        OutputOffsets {
            stdout: self.stdout.len() as u64,
            stderr: self.stderr.len() as u64,
        }
    }

    /// Applies one event as the journal does: skip bytes already held, refuse a hole.
    fn apply(&mut self, provider: &str, event: CommandEvent) {
        match event {
            CommandEvent::Output {
                stream,
                offset,
                data,
            } => {
                let buf = match stream {
                    OutputStream::Stdout => &mut self.stdout,
                    OutputStream::Stderr => &mut self.stderr,
                };
                let have = buf.len() as u64;
                let at = offset.unwrap_or(have);
                assert!(
                    at <= have,
                    "{provider}: {} bytes of {} skipped (chunk at {at}, held {have})",
                    at - have,
                    stream.as_str()
                );
                let overlap = (have - at).min(data.len() as u64);
                self.repeated += overlap;
                buf.extend_from_slice(&data[overlap as usize..]);
                if stream == OutputStream::Stdout {
                    self.stdout_seen.push((self.stdout.len(), Instant::now()));
                }
            }
            CommandEvent::Exit { exit_code } => {
                assert!(self.exit.is_none(), "{provider}: two exit events");
                self.exit = Some(exit_code);
                self.exit_at = Some(Instant::now());
            }
        }
    }

    /// When stdout first held `needle`.
    fn stdout_time_of(&self, needle: &[u8]) -> Option<Instant> {
        let at = self
            .stdout
            .windows(needle.len())
            .position(|w| w == needle)?
            + needle.len();
        self.stdout_seen
            .iter()
            .find(|(len, _)| *len >= at)
            .map(|(_, t)| *t)
    }
}

impl Conformance<'_> {
    fn spec(&self, command: &str) -> CommandSpec {
        CommandSpec {
            command_id: CommandId::new(),
            command: command.to_owned(),
            cwd: None,
            env: Default::default(),
            stdin: false,
            timeout: Duration::from_secs(120),
        }
    }

    async fn start<'s>(
        &'s self,
        id: &'s str,
        spec: &CommandSpec,
    ) -> (String, Option<CommandEvents<'s>>) {
        let started = self
            .provider
            .start_command(&self.ctx, id, spec)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{}: start_command `{}` failed: {e}",
                    self.name(),
                    spec.command
                )
            });
        (started.handle, started.events)
    }

    async fn attach<'s>(
        &'s self,
        id: &'s str,
        handle: &str,
        from: OutputOffsets,
    ) -> CommandEvents<'s> {
        self.provider
            .attach_command(&self.ctx, id, handle, from)
            .await
            .unwrap_or_else(|e| panic!("{}: attach_command failed: {e}", self.name()))
    }

    /// Reads `events` into `t` until the exit event, the stream's end, `stop` returning true,
    /// or `within`.
    async fn read_into(
        &self,
        t: &mut Transcript,
        mut events: CommandEvents<'_>,
        within: Duration,
        stop: impl Fn(&Transcript) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + within;
        while t.exit.is_none() && !stop(t) {
            match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(Some(Ok(event))) => t.apply(self.name(), event),
                Ok(Some(Err(e))) => panic!("{}: the command's stream failed: {e}", self.name()),
                Ok(None) => return,
                Err(_) => panic!("{}: no exit within {within:?}; so far {t:?}", self.name()),
            }
        }
    }

    /// Reads the whole command from `from` (re-attaching when the provider's stream ends
    /// early), starting with `first` if the start streamed.
    async fn run_to_end(
        &self,
        id: &str,
        handle: &str,
        first: Option<CommandEvents<'_>>,
        mut t: Transcript,
    ) -> Transcript {
        let deadline = Instant::now() + END_WITHIN;
        if let Some(events) = first {
            self.read_into(&mut t, events, END_WITHIN, |_| false).await;
        }
        while t.exit.is_none() {
            assert!(
                Instant::now() < deadline,
                "{}: the command did not end within {END_WITHIN:?}",
                self.name()
            );
            let events = self.attach(id, handle, t.offsets()).await;
            self.read_into(&mut t, events, END_WITHIN, |_| false).await;
        }
        t
    }

    fn signal_for_ending(&self) -> Signal {
        let signals = &self.provider.capabilities().commands.signals;
        [Signal::Term, Signal::Kill, Signal::Int]
            .into_iter()
            .find(|s| signals.contains(s))
            .unwrap_or_else(|| panic!("{}: no signal can end a command", self.name()))
    }

    /// Output arrives while the command runs (not only at its end), each stream apart where
    /// the provider keeps them apart, then the exit code.
    pub async fn command_streams_output_then_exits(&self) {
        let (id, _) = self.create_running().await;
        let spec = self.spec("echo first; echo oops >&2; sleep 2; echo second; exit 3");
        let (handle, first) = self.start(&id, &spec).await;
        let t = self
            .run_to_end(&id, &handle, first, Transcript::default())
            .await;
        assert_eq!(t.exit, Some(Some(3)), "{}: exit code", self.name());
        let stdout = String::from_utf8_lossy(&t.stdout);
        assert!(
            stdout.contains("first\n") && stdout.contains("second\n"),
            "{}: stdout {stdout:?}",
            self.name()
        );
        if self.provider.capabilities().output_streams == corral_domain::OutputStreams::Separate {
            assert_eq!(t.stderr, b"oops\n", "{}: stderr", self.name());
            assert!(
                !stdout.contains("oops"),
                "{}: stderr in stdout",
                self.name()
            );
        }
        let first_at = t.stdout_time_of(b"first\n").expect("first seen");
        let exit_at = t.exit_at.expect("exit seen");
        assert!(
            exit_at.duration_since(first_at) >= Duration::from_millis(1000),
            "{}: `first` arrived only {:?} before the exit: output is not streamed while the command runs",
            self.name(),
            exit_at.duration_since(first_at)
        );
        assert_eq!(t.repeated, 0, "{}: bytes repeated", self.name());
    }

    /// A command that prints nothing for a while neither ends the provider's stream with an
    /// error nor is reported ended early.
    pub async fn quiet_command_is_followed_to_its_end(&self) {
        let (id, _) = self.create_running().await;
        let spec = self.spec("sleep 4; echo done");
        let (handle, first) = self.start(&id, &spec).await;
        let t = self
            .run_to_end(&id, &handle, first, Transcript::default())
            .await;
        assert_eq!(t.exit, Some(Some(0)), "{}: exit", self.name());
        assert_eq!(t.stdout, b"done\n", "{}: stdout", self.name());
    }

    /// Dropping the stream mid-output and attaching again from the bytes held loses and
    /// repeats nothing (after the merge by offset), as the provider's resume mode promises.
    pub async fn resume_after_a_dropped_stream_loses_and_repeats_nothing(&self) {
        let (id, _) = self.create_running().await;
        let spec =
            self.spec("i=0; while [ $i -lt 30 ]; do echo line-$i; i=$((i+1)); sleep 0.1; done");
        let expected: String = (0..30).map(|i| format!("line-{i}\n")).collect();
        let (handle, first) = self.start(&id, &spec).await;
        let mut t = Transcript::default();
        let events = match first {
            Some(events) => events,
            None => self.attach(&id, &handle, t.offsets()).await,
        };
        self.read_into(&mut t, events, END_WITHIN, |t| t.stdout.len() >= 7 * 3)
            .await;
        // The first stream is dropped here, mid-output.
        let held = t.stdout.len();
        let t = self.run_to_end(&id, &handle, None, t).await;
        assert_eq!(t.exit, Some(Some(0)), "{}: exit", self.name());
        assert_eq!(
            t.repeated,
            0,
            "{}: bytes repeated after the merge",
            self.name()
        );
        match self.provider.capabilities().commands.resume {
            CommandResume::ProviderOffset | CommandResume::ProviderReplay => assert_eq!(
                String::from_utf8_lossy(&t.stdout),
                expected,
                "{}: output after a resume at {held} bytes",
                self.name()
            ),
            CommandResume::LiveOnly => assert!(
                expected.ends_with(&*String::from_utf8_lossy(&t.stdout[held..])),
                "{}: live output after a resume is not the tail of the output",
                self.name()
            ),
        }
    }

    /// Bytes written to stdin reach the command; a resend at an offset already accepted is
    /// not written twice; closing stdin gives the command end-of-file.
    pub async fn stdin_round_trip(&self) {
        if !self.provider.capabilities().commands.stdin {
            return;
        }
        let (id, _) = self.create_running().await;
        let mut spec = self.spec("cat; echo eof");
        spec.stdin = true;
        let (handle, first) = self.start(&id, &spec).await;
        let write = |offset: u64, data: &'static [u8]| {
            let handle = handle.clone();
            let id = id.clone();
            async move {
                self.provider
                    .write_stdin(&self.ctx, &id, &handle, offset, data)
                    .await
                    .unwrap_or_else(|e| panic!("{}: write_stdin failed: {e}", self.name()))
            }
        };
        assert_eq!(write(0, b"hello\n").await, 6, "{}: accepted", self.name());
        assert_eq!(write(6, b"world\n").await, 12, "{}: accepted", self.name());
        self.provider
            .close_stdin(&self.ctx, &id, &handle)
            .await
            .unwrap_or_else(|e| panic!("{}: close_stdin failed: {e}", self.name()));
        let t = self
            .run_to_end(&id, &handle, first, Transcript::default())
            .await;
        assert_eq!(
            String::from_utf8_lossy(&t.stdout),
            "hello\nworld\neof\n",
            "{}: what the command read",
            self.name()
        );
        assert_eq!(t.exit, Some(Some(0)), "{}: exit", self.name());
    }

    /// A signal ends a running command and everything it started (reported as `128 + n` where
    /// the provider gives a code); signalling an ended command is not an error.
    ///
    /// The command leaves two children, as real ones do (a server in the background, a job in
    /// the foreground), and the scenario proves both gone afterwards: a signal sent to the
    /// command's shell alone ends the shell just the same, and would pass on the exit code.
    /// The background child is checked only for TERM and KILL, since a non-interactive shell
    /// starts it with SIGINT ignored (POSIX), whoever sends it.
    pub async fn signal_ends_a_running_command(&self) {
        let (id, _) = self.create_running().await;
        let dir = self.scratch_dir(&id).await;
        let spec = self.spec(&format!(
            "sleep 300 & echo $! > '{dir}/bg'; \
             sh -c 'echo $$ > \"$0\"; echo ready; exec sleep 300' '{dir}/fg'; echo not-reached"
        ));
        let (handle, first) = self.start(&id, &spec).await;
        let mut t = Transcript::default();
        let events = match first {
            Some(events) => events,
            None => self.attach(&id, &handle, t.offsets()).await,
        };
        self.read_into(&mut t, events, END_WITHIN, |t| {
            t.stdout.starts_with(b"ready\n")
        })
        .await;
        let sig = self.signal_for_ending();
        let sent = Instant::now();
        self.provider
            .signal_command(&self.ctx, &id, &handle, sig)
            .await
            .unwrap_or_else(|e| panic!("{}: signal_command {sig} failed: {e}", self.name()));
        let t = self.run_to_end(&id, &handle, None, t).await;
        assert!(
            sent.elapsed() < Duration::from_secs(20),
            "{}: the command outlived {sig}",
            self.name()
        );
        match t.exit {
            Some(None) => {}
            Some(Some(code)) => assert_eq!(
                code,
                128 + sig.number(),
                "{}: exit code after {sig}",
                self.name()
            ),
            None => unreachable!("run_to_end returns after the exit"),
        }
        assert!(
            !String::from_utf8_lossy(&t.stdout).contains("not-reached"),
            "{}: the command went on after {sig}",
            self.name()
        );
        let children = if sig == Signal::Int { "fg" } else { "fg bg" };
        let survivors = self.survivors(&id, &dir, children).await;
        assert!(
            survivors.is_empty(),
            "{}: the command's children outlived {sig}: {survivors} (the signal reached the \
             command's shell but not its process group)",
            self.name()
        );
        self.provider
            .signal_command(&self.ctx, &id, &handle, sig)
            .await
            .unwrap_or_else(|e| panic!("{}: signalling an ended command failed: {e}", self.name()));
        self.delete(&id).await;
    }

    /// Which of the processes whose ids are in `dir`'s files `names` still live after a few
    /// seconds' grace (a zombie counts as ended: the sandbox's init may reap late); the
    /// survivors are killed, so a failing run leaves nothing behind.
    async fn survivors(&self, id: &str, dir: &str, names: &str) -> String {
        let script = format!(
            "cd '{dir}' || exit 1; \
             gone() {{ ! kill -0 \"$1\" 2>/dev/null || grep -q '^State:[[:space:]]*Z' \"/proc/$1/status\" 2>/dev/null; }}; \
             for n in {names}; do p=$(cat $n) || exit 1; i=0; \
             while ! gone $p && [ $i -lt 50 ]; do sleep 0.1 2>/dev/null || sleep 1; i=$((i+1)); done; \
             if ! gone $p; then printf '%s ' \"$n=$p\"; kill -9 $p 2>/dev/null; fi; done; exit 0"
        );
        let out = self.exec(id, ExecSpec::new(script)).await;
        assert_eq!(
            out.exit_code,
            0,
            "{}: the children's ids could not be read back: {}",
            self.name(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The command keeps running after the call that started it returned, with nobody
    /// attached; its output is there when someone attaches later.
    pub async fn command_outlives_its_start_call(&self) {
        let (id, _) = self.create_running().await;
        let spec = self.spec("sleep 1; echo later");
        let (handle, first) = self.start(&id, &spec).await;
        drop(first);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let t = self
            .run_to_end(&id, &handle, None, Transcript::default())
            .await;
        let caps = &self.provider.capabilities().commands;
        if caps.resume != CommandResume::LiveOnly {
            assert_eq!(
                t.stdout,
                b"later\n",
                "{}: output made while detached",
                self.name()
            );
        }
        assert_eq!(t.exit, Some(Some(0)), "{}: exit", self.name());
    }

    /// Output that is not UTF-8 comes back byte for byte, or, where the provider carries
    /// output as text (`binaryOutput: false`), with the invalid byte replaced by U+FFFD and the
    /// rest intact.
    pub async fn command_output_that_is_not_utf8_survives(&self) {
        let (id, _) = self.create_running().await;
        let spec = self.spec("printf '\\377\\000A\\n'");
        let (handle, first) = self.start(&id, &spec).await;
        let t = self
            .run_to_end(&id, &handle, first, Transcript::default())
            .await;
        if self.provider.capabilities().commands.binary_output {
            assert_eq!(
                t.stdout,
                [0xff, 0x00, b'A', b'\n'],
                "{}: bytes",
                self.name()
            );
        } else {
            assert_eq!(
                String::from_utf8_lossy(&t.stdout),
                "\u{fffd}\u{0}A\n",
                "{}: text with the invalid byte replaced",
                self.name()
            );
        }
    }

    /// A started command is found again by its command id (how a lost start is settled);
    /// another id finds nothing. Providers that cannot look commands up say `Unsupported`.
    pub async fn a_started_command_is_found_by_its_id(&self) {
        let (id, _) = self.create_running().await;
        let spec = self.spec("sleep 2");
        let (handle, _first) = self.start(&id, &spec).await;
        match self
            .provider
            .find_command(&self.ctx, &id, &spec.command_id)
            .await
        {
            Ok(found) => {
                assert_eq!(
                    found.as_deref(),
                    Some(handle.as_str()),
                    "{}: found",
                    self.name()
                );
                let other = self
                    .provider
                    .find_command(&self.ctx, &id, &CommandId::new())
                    .await
                    .unwrap_or_else(|e| panic!("{}: find_command failed: {e}", self.name()));
                assert_eq!(other, None, "{}: another id found something", self.name());
            }
            Err(ProviderError::Unsupported { .. }) => {}
            Err(e) => panic!("{}: find_command failed: {e}", self.name()),
        }
        let _ = self
            .provider
            .signal_command(&self.ctx, &id, &handle, self.signal_for_ending())
            .await;
    }

    /// Every command scenario.
    pub async fn run_commands(&self) {
        self.command_streams_output_then_exits().await;
        self.quiet_command_is_followed_to_its_end().await;
        self.resume_after_a_dropped_stream_loses_and_repeats_nothing()
            .await;
        self.stdin_round_trip().await;
        self.signal_ends_a_running_command().await;
        self.command_outlives_its_start_call().await;
        self.command_output_that_is_not_utf8_survives().await;
        self.a_started_command_is_found_by_its_id().await;
    }
}
