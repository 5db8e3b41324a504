// The E2B SDK journey of journey.py, with the published JavaScript `e2b` SDK unchanged.
//
// Configured only through the SDK's own environment variables, as a user would:
// E2B_API_URL and E2B_SANDBOX_URL = <corral>/e2b, E2B_API_KEY = a Corral project API key (the
// JS SDK does not check a key's `e2b_` prefix). The SDK's fetch is left at its default
// (undici, which speaks HTTP/1.1 over plain http://).
//
// Usage: node journey.mjs [template] [dir]: the template defaults to `base`; `dir` is where
// `npm install e2b` put its node_modules (default: resolved from this file, as a plain
// `import 'e2b'` would be). The SDK is loaded as `import 'e2b'` loads it in Node.
//
// The steps of journey.py as far as the JS SDK has the same calls: create → commands.run
// (exit code, stderr apart, CommandExitError) → a background command with streamed output,
// stdin and kill → files write/read/list/exists/getInfo/makeDir/rename/remove (relative paths
// under /home/user) → list with a metadata filter → setTimeout → connect → pause and resume →
// snapshot, create from it, list and delete it → fork → kill, and isRunning()/getInfo() after
// it. Prints one line per step and exits non-zero on the first
// failure.

import { randomUUID } from 'node:crypto'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { isDeepStrictEqual, inspect } from 'node:util'

const template = process.argv[2] ?? 'base'
const from = process.argv[3] ? join(process.argv[3], 'package.json') : import.meta.filename
const { CommandExitError, NotFoundError, Sandbox, SandboxError, SandboxNotFoundError, TimeoutError } =
  await import(pathToFileURL(createRequire(from).resolve('e2b')).href)

const runId = randomUUID().replaceAll('-', '').slice(0, 12)
let steps = 0

function step(name) {
  steps += 1
  console.log(`ok ${steps} - ${name}`)
}

function check(cond, ...what) {
  if (!cond) throw new Error(`check failed: ${what.map((w) => inspect(w)).join(' ')}`)
}

function equal(actual, expected, what) {
  if (!isDeepStrictEqual(actual, expected)) {
    throw new Error(`${what}: got ${inspect(actual)}, expected ${inspect(expected)}`)
  }
}

/** The error `f` throws, which must be an instance of one of `classes`. */
async function rejects(f, classes, what) {
  try {
    const r = await f()
    throw new Error(`${what}: did not throw, returned ${inspect(r)}`)
  } catch (e) {
    if (!classes.some((c) => e instanceof c)) {
      throw new Error(`${what}: threw ${e?.constructor?.name}: ${e?.message}`)
    }
    return e
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function journey() {
  const sbx = await Sandbox.create(template, {
    metadata: { journey: runId, kind: 'e2b' },
    timeoutMs: 120_000,
    envs: { JOURNEY: runId },
  })
  check(sbx.sandboxId, 'no sandbox id')
  step(`create ${sbx.sandboxId} from template ${template}`)

  let r = await sbx.commands.run('echo hello; echo oops >&2; echo $JOURNEY; pwd')
  equal(r.exitCode, 0, 'exit code')
  const lines = r.stdout.split('\n')
  equal(lines[0], 'hello', 'first line')
  equal(lines[1], runId, 'create envs applied')
  equal(lines[2], '/home/user', "cwd is the user's home")
  equal(r.stderr, 'oops\n', 'stderr kept apart')
  step('commands.run: stdout, stderr apart, create envs, cwd /home/user')

  r = await sbx.commands.run('echo $A-$B', { envs: { A: 'x', B: 'y' }, cwd: '/tmp' })
  equal(r.stdout, 'x-y\n', 'envs and cwd')
  step('commands.run with envs and cwd')

  let e = await rejects(
    () => sbx.commands.run('echo before; exit 3'),
    [CommandExitError],
    'a failing command',
  )
  equal(e.exitCode, 3, 'exit code')
  equal(e.stdout, 'before\n', 'stdout of the failing command')
  step('a non-zero exit throws CommandExitError with the exit code')

  const seen = []
  const h = await sbx.commands.run('for i in 1 2 3; do echo tick$i; sleep 0.5; done', {
    background: true,
    onStdout: (s) => seen.push([performance.now(), s]),
  })
  check(h.pid > 0, h.pid)
  const res = await h.wait()
  const ended = performance.now()
  equal(res.exitCode, 0, 'background exit code')
  equal(seen.map(([, s]) => s).join(''), 'tick1\ntick2\ntick3\n', 'streamed output')
  // Streamed, not delivered at the end: the first line came a second before the last.
  check(ended - seen[0][0] > 800, seen.map(([t, s]) => [ended - t, s]))
  step(`background command pid ${h.pid}: output streamed to onStdout while it ran`)

  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(cat.pid, 'fed through stdin\n')
  await sleep(500)
  const procs = await sbx.commands.list()
  check(
    procs.some((p) => p.pid === cat.pid),
    procs.map((p) => p.pid),
  )
  step('sendStdin to a background command; commands.list shows it')
  equal(await sbx.commands.kill(cat.pid), true, 'kill answers true')
  e = await rejects(() => cat.wait(), [CommandExitError], 'a killed command')
  check(e.stdout.includes('fed through stdin'), e.stdout)
  step('commands.kill ends it; what it read is in its output')

  const sleeper = await sbx.commands.run('sleep 30', { background: true })
  const again = await sbx.commands.connect(sleeper.pid)
  await sbx.commands.kill(sleeper.pid)
  await rejects(() => again.wait(), [CommandExitError], 'a killed, re-attached command')
  step('commands.connect re-attaches to a running command by pid')

  const name = `notes-${runId}.txt`
  let info = await sbx.files.write(name, 'first line\nsecond line\n')
  equal(info.path, `/home/user/${name}`, 'written path')
  equal(await sbx.files.read(name), 'first line\nsecond line\n', 'read back')
  equal(
    (await sbx.commands.run(`cat /home/user/${name}`)).stdout,
    'first line\nsecond line\n',
    'cat of the written file',
  )
  step('files.write/read with a relative path under /home/user')

  const blob = new Uint8Array(256 * 16).map((_, i) => i % 256)
  await sbx.files.write(`/tmp/${runId}/deep/blob.bin`, blob.buffer)
  const back = await sbx.files.read(`/tmp/${runId}/deep/blob.bin`, { format: 'bytes' })
  check(Buffer.from(back).equals(Buffer.from(blob)), 'binary read back differs', back.length)
  step('binary write into new parent directories, read back as bytes')

  equal(await sbx.files.exists(name), true, 'exists')
  equal(await sbx.files.exists(`missing-${runId}`), false, 'exists of a missing file')
  const entries = await sbx.files.list(`/tmp/${runId}`)
  equal(
    entries.map((x) => x.name),
    ['deep'],
    'list',
  )
  equal((await sbx.files.getInfo(`/tmp/${runId}/deep/blob.bin`)).size, blob.length, 'size')
  step('files.exists, files.list, files.getInfo')

  equal(await sbx.files.makeDir(`/tmp/${runId}/made`), true, 'makeDir')
  equal(await sbx.files.makeDir(`/tmp/${runId}/made`), false, 'makeDir of an existing dir')
  const moved = await sbx.files.rename(name, `moved-${runId}.txt`)
  equal(moved.path, `/home/user/moved-${runId}.txt`, 'renamed path')
  await sbx.files.remove(`moved-${runId}.txt`)
  equal(await sbx.files.exists(`moved-${runId}.txt`), false, 'exists after remove')
  await rejects(() => sbx.files.read(`missing-${runId}`), [NotFoundError], 'reading a missing file')
  step('files.makeDir, rename, remove; a missing file throws NotFoundError')

  const found = await Sandbox.list({ query: { metadata: { journey: runId } } }).nextItems()
  equal(
    found.map((s) => s.sandboxId),
    [sbx.sandboxId],
    'listed by metadata',
  )
  equal(found[0].metadata.kind, 'e2b', 'listed metadata')
  const none = await Sandbox.list({ query: { metadata: { journey: `nobody-${runId}` } } }).nextItems()
  equal(none, [], 'listed by a metadata nobody has')
  step('Sandbox.list with a metadata filter')

  await sbx.setTimeout(600_000)
  info = await sbx.getInfo()
  equal(info.sandboxId, sbx.sandboxId, 'getInfo id')
  check(info.endAt.getTime() - Date.now() > 500_000, info.endAt)
  step("setTimeout extends the sandbox's end; getInfo shows it")

  const other = await Sandbox.connect(sbx.sandboxId)
  equal((await other.commands.run('echo again')).stdout, 'again\n', 'connected handle')
  step('Sandbox.connect from a new handle runs commands')

  const marker = `paused-${runId}.txt`
  await sbx.files.write(marker, 'kept across the pause')
  equal(await sbx.pause(), true, 'pause')
  equal(await sbx.pause(), false, "a second pause says 'already paused' (409)")
  equal(await sbx.isRunning(), false, 'isRunning while paused')
  const mine = { journey: runId }
  const paused = await Sandbox.list({ query: { metadata: mine, state: ['paused'] } }).nextItems()
  equal(
    paused.map((s) => s.sandboxId),
    [sbx.sandboxId],
    'listed as paused',
  )
  equal(paused[0].state, 'paused', 'listed state')
  equal(
    await Sandbox.list({ query: { metadata: mine, state: ['running'] } }).nextItems(),
    [],
    'listed as running while paused',
  )
  equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused', 'getInfo while paused')
  const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
  equal(await resumed.files.read(marker), 'kept across the pause', 'a file kept across the pause')
  equal(await sbx.isRunning(), true, 'isRunning after connect')
  equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running', 'getInfo after connect')
  step('pause (a second one: already paused), listed as paused; Sandbox.connect resumes it with its files')

  // In $HOME, not /home/user: the E2B adapter's fake keeps only a sandbox's own directory (its
  // $HOME) in a snapshot; its /home/user is this machine's, shared by its sandboxes.
  const note = `"$HOME/snap-${runId}.txt"`
  const writeNote = (s, text) => s.commands.run(`printf '${text}' > ${note}`)
  const readNote = async (s) => (await s.commands.run(`cat ${note}`)).stdout
  await writeNote(sbx, 'before the snapshot')
  const snap = await sbx.createSnapshot({ name: `journey-${runId}` })
  check(snap.snapshotId, snap)
  equal(snap.names, [`journey-${runId}`], 'snapshot names')
  await writeNote(sbx, 'after the snapshot')
  const restored = await Sandbox.create(snap.snapshotId, { timeoutMs: 120_000 })
  check(restored.sandboxId !== sbx.sandboxId, restored.sandboxId)
  equal(await readNote(restored), 'before the snapshot', 'the restored file')
  equal(await readNote(sbx), 'after the snapshot', "the source's file")
  const ids = (items) => items.map((s) => s.snapshotId)
  equal(ids(await sbx.listSnapshots().nextItems()), [snap.snapshotId], "the sandbox's snapshots")
  equal(
    ids(await Sandbox.listSnapshots({ name: `journey-${runId}` }).nextItems()),
    [snap.snapshotId],
    'snapshots by name',
  )
  await restored.kill()
  equal(await Sandbox.deleteSnapshot(snap.snapshotId), true, 'deleteSnapshot')
  equal(await Sandbox.deleteSnapshot(snap.snapshotId), false, 'a second deleteSnapshot')
  equal(await sbx.listSnapshots().nextItems(), [], 'snapshots after the delete')
  await rejects(() => Sandbox.create(snap.snapshotId), [NotFoundError, SandboxError], 'a create from a deleted snapshot')
  step('createSnapshot; Sandbox.create from it has the old file; listSnapshots; deleteSnapshot')

  const forks = await sbx.fork({ count: 2, timeoutMs: 120_000 })
  equal(forks.length, 2, 'forks')
  for (const f of forks) {
    check(f instanceof Sandbox, f)
    check(f.sandboxId !== sbx.sandboxId, f.sandboxId)
    equal(await readNote(f), 'after the snapshot', "a fork's file")
    equal((await f.commands.run('echo $JOURNEY')).stdout, `${runId}\n`, "a fork's envs")
    await f.kill()
  }
  step("fork({ count: 2 }): two running copies with the file and the create's envs")

  equal(await sbx.isRunning(), true, 'isRunning before kill')
  const running = await sbx.commands.run('sleep 60', { background: true })
  await sbx.kill()
  equal(await sbx.isRunning(), false, 'isRunning after kill')
  e = await rejects(() => running.wait(), [TimeoutError], 'a command of a killed sandbox')
  // The door ends the stream with `unavailable`, which the SDK reads as the sandbox's end.
  check(e.message.includes('sandbox timeout'), e.message)
  await rejects(() => Sandbox.getInfo(sbx.sandboxId), [SandboxNotFoundError], 'a killed sandbox')
  step("kill: a running command's stream breaks, isRunning() turns false, the sandbox is not found")

  console.log(`e2b js journey: ${steps} steps passed on template ${template}`)
}

try {
  await journey()
} catch (e) {
  console.error(`e2b js journey failed after ${steps} steps: ${e?.stack ?? e}`)
  process.exit(1)
}
