"""The E2B SDK journey against Corral's E2B front door, with the published `e2b` SDK unchanged.

Configured only through the SDK's own environment variables, as a user would:
E2B_API_URL and E2B_SANDBOX_URL = <corral>/e2b, E2B_API_KEY = a Corral project API key,
E2B_VALIDATE_API_KEY=false (Corral keys are not `e2b_…`). E2B_HTTP_VERSION is left at the
SDK's default. The template is argv[1] (default `base`).

create → commands.run (exit code, stderr apart, CommandExitException) → a background command
with streamed output, stdin and kill → files write/read/list/exists/rename/remove (relative
paths under /home/user) → list with a metadata filter → set_timeout → connect → pause (a file
kept; listed paused) → connect resumes it → create_snapshot, Sandbox.create from it (the file as
it was), list_snapshots, delete_snapshot → fork → kill, and is_running()/get_info() after it.
Prints one line per step and exits non-zero on the first failure.
"""

import os
import sys
import time
import uuid

from e2b import (
    CommandExitException,
    NotFoundException,
    Sandbox,
    SandboxException,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)

template = sys.argv[1] if len(sys.argv) > 1 else "base"
run_id = uuid.uuid4().hex[:12]
steps = 0


def step(name):
    global steps
    steps += 1
    print(f"ok {steps} - {name}", flush=True)


sbx = Sandbox.create(template, metadata={"journey": run_id, "kind": "e2b"}, timeout=120,
                     envs={"JOURNEY": run_id})
assert sbx.sandbox_id, "no sandbox id"
step(f"create {sbx.sandbox_id} from template {template}")

r = sbx.commands.run("echo hello; echo oops >&2; echo $JOURNEY; pwd")
assert r.exit_code == 0, r
lines = r.stdout.split("\n")
assert lines[0] == "hello", r.stdout
assert lines[1] == run_id, f"create envs not applied: {r.stdout!r}"
assert lines[2] == "/home/user", f"cwd is not the user's home: {r.stdout!r}"
assert r.stderr == "oops\n", f"stderr not kept apart: {r.stderr!r}"
step("commands.run: stdout, stderr apart, create envs, cwd /home/user")

r = sbx.commands.run("echo $A-$B", envs={"A": "x", "B": "y"}, cwd="/tmp")
assert r.stdout == "x-y\n", r.stdout
step("commands.run with envs and cwd")

try:
    sbx.commands.run("echo before; exit 3")
    raise AssertionError("a failing command did not raise")
except CommandExitException as e:
    assert e.exit_code == 3, e.exit_code
    assert e.stdout == "before\n", e.stdout
step("a non-zero exit raises CommandExitException with the exit code")

seen = []
h = sbx.commands.run("for i in 1 2 3; do echo tick$i; sleep 0.5; done", background=True)
assert h.pid > 0, h.pid
res = h.wait(on_stdout=lambda s: seen.append((time.monotonic(), s)))
ended = time.monotonic()
assert res.exit_code == 0, res
assert "".join(s for _, s in seen) == "tick1\ntick2\ntick3\n", seen
# Streamed, not delivered at the end: the first line came a second before the last.
assert ended - seen[0][0] > 0.8, [(ended - t, s) for t, s in seen]
step(f"background command pid {h.pid}: output streamed to on_stdout while it ran")

cat = sbx.commands.run("cat", background=True, stdin=True)
sbx.commands.send_stdin(cat.pid, "fed through stdin\n")
time.sleep(0.5)
procs = sbx.commands.list()
assert any(p.pid == cat.pid for p in procs), [p.pid for p in procs]
step("send_stdin to a background command; commands.list shows it")
assert sbx.commands.kill(cat.pid) is True
try:
    res = cat.wait()
    raise AssertionError(f"a killed command ended normally: {res}")
except CommandExitException as e:
    assert "fed through stdin" in e.stdout, e.stdout
step("commands.kill ends it; what it read is in its output")

sleeper = sbx.commands.run("sleep 30", background=True)
again = sbx.commands.connect(sleeper.pid)
sbx.commands.kill(sleeper.pid)
try:
    again.wait()
    raise AssertionError("a killed command ended normally")
except CommandExitException:
    pass
step("commands.connect re-attaches to a running command by pid")

name = f"notes-{run_id}.txt"
info = sbx.files.write(name, "first line\nsecond line\n")
assert info.path == f"/home/user/{name}", info.path
assert sbx.files.read(name) == "first line\nsecond line\n"
assert sbx.commands.run(f"cat /home/user/{name}").stdout == "first line\nsecond line\n"
step("files.write/read with a relative path under /home/user")

blob = bytes(range(256)) * 16
sbx.files.write(f"/tmp/{run_id}/deep/blob.bin", blob)
assert bytes(sbx.files.read(f"/tmp/{run_id}/deep/blob.bin", format="bytes")) == blob
step("binary write into new parent directories, read back as bytes")

assert sbx.files.exists(name) is True
assert sbx.files.exists(f"missing-{run_id}") is False
entries = sbx.files.list(f"/tmp/{run_id}")
assert [e.name for e in entries] == ["deep"], entries
assert sbx.files.get_info(f"/tmp/{run_id}/deep/blob.bin").size == len(blob)
step("files.exists, files.list, files.get_info")

assert sbx.files.make_dir(f"/tmp/{run_id}/made") is True
assert sbx.files.make_dir(f"/tmp/{run_id}/made") is False
moved = sbx.files.rename(name, f"moved-{run_id}.txt")
assert moved.path == f"/home/user/moved-{run_id}.txt", moved.path
sbx.files.remove(f"moved-{run_id}.txt")
assert sbx.files.exists(f"moved-{run_id}.txt") is False
try:
    sbx.files.read(f"missing-{run_id}")
    raise AssertionError("reading a missing file did not raise")
except NotFoundException:
    pass
step("files.make_dir, rename, remove; a missing file raises NotFoundException")

found = list(Sandbox.list(query=SandboxQuery(metadata={"journey": run_id})).next_items())
assert [s.sandbox_id for s in found] == [sbx.sandbox_id], found
assert found[0].metadata["kind"] == "e2b", found[0].metadata
none = list(Sandbox.list(query=SandboxQuery(metadata={"journey": "nobody-" + run_id})).next_items())
assert none == [], none
step("Sandbox.list with a metadata filter")

sbx.set_timeout(600)
info = sbx.get_info()
assert info.sandbox_id == sbx.sandbox_id
assert info.end_at.timestamp() - time.time() > 500, info.end_at
step("set_timeout extends the sandbox's end; get_info shows it")

other = Sandbox.connect(sbx.sandbox_id)
assert other.commands.run("echo again").stdout == "again\n"
step("Sandbox.connect from a new handle runs commands")

marker = f"paused-{run_id}.txt"
sbx.files.write(marker, "kept across the pause")
assert sbx.pause() is True
assert sbx.pause() is False, "a second pause did not say 'already paused' (409)"
assert sbx.is_running() is False
mine = {"journey": run_id}
paused = list(Sandbox.list(query=SandboxQuery(metadata=mine, state=[SandboxState.PAUSED])).next_items())
assert [s.sandbox_id for s in paused] == [sbx.sandbox_id], paused
assert paused[0].state == SandboxState.PAUSED, paused[0].state
running_now = list(Sandbox.list(query=SandboxQuery(metadata=mine, state=[SandboxState.RUNNING])).next_items())
assert running_now == [], running_now
assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
resumed = Sandbox.connect(sbx.sandbox_id, timeout=120)
assert resumed.files.read(marker) == "kept across the pause"
assert sbx.is_running() is True
assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.RUNNING
step("pause (a second one: already paused), listed as paused; Sandbox.connect resumes it with its files")

# In $HOME, not /home/user: the E2B adapter's fake keeps only a sandbox's own directory (its
# $HOME) in a snapshot; its /home/user is this machine's, shared by its sandboxes.
note = f'"$HOME/snap-{run_id}.txt"'


def write_note(s, text):
    s.commands.run(f"printf '{text}' > {note}")


def read_note(s):
    return s.commands.run(f"cat {note}").stdout


write_note(sbx, "before the snapshot")
snap = sbx.create_snapshot(name=f"journey-{run_id}")
assert snap.snapshot_id, snap
assert snap.names == [f"journey-{run_id}"], snap.names
write_note(sbx, "after the snapshot")
restored = Sandbox.create(snap.snapshot_id, timeout=120)
assert restored.sandbox_id != sbx.sandbox_id
assert read_note(restored) == "before the snapshot"
assert read_note(sbx) == "after the snapshot"
assert [s.snapshot_id for s in sbx.list_snapshots().next_items()] == [snap.snapshot_id]
named = Sandbox.list_snapshots(name=f"journey-{run_id}").next_items()
assert [s.snapshot_id for s in named] == [snap.snapshot_id], named
restored.kill()
assert Sandbox.delete_snapshot(snap.snapshot_id) is True
assert Sandbox.delete_snapshot(snap.snapshot_id) is False, "a second delete found it"
assert list(sbx.list_snapshots().next_items()) == []
try:
    Sandbox.create(snap.snapshot_id)
    raise AssertionError("a deleted snapshot was created from")
except (NotFoundException, SandboxException):
    pass
step("create_snapshot; Sandbox.create from it has the old file; list_snapshots; delete_snapshot")

forks = sbx.fork(count=2, timeout=120)
assert len(forks) == 2, forks
for f in forks:
    assert isinstance(f, Sandbox), f
    assert f.sandbox_id != sbx.sandbox_id
    assert read_note(f) == "after the snapshot"
    assert f.commands.run("echo $JOURNEY").stdout == f"{run_id}\n"
    f.kill()
step("fork(count=2): two running copies with the file and the create's envs")

assert sbx.is_running() is True
running = sbx.commands.run("sleep 60", background=True)
sbx.kill()
assert sbx.is_running() is False
try:
    running.wait()
    raise AssertionError("a command outlived its killed sandbox")
except TimeoutException as e:
    assert "killed" in str(e), e
try:
    Sandbox.get_info(sbx.sandbox_id)
    raise AssertionError("a killed sandbox is still found")
except (NotFoundException, SandboxException):
    pass
step("kill: a running command's stream breaks, is_running() turns false, the sandbox is not found")

print(f"e2b journey: {steps} steps passed on template {template}", flush=True)
