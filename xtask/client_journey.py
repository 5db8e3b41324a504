"""Drives a live Corral server through a client generated from its published OpenAPI document
by openapi-python-client: create -> exec -> write -> read -> list -> delete.

Run by `cargo xtask schemathesis` as: client_journey.py GENERATED_DIR BASE_URL API_KEY
(GENERATED_DIR holds the generated package `corral_client`). Exits non-zero on any mismatch.
"""

import sys

sys.path.insert(0, sys.argv[1])
base_url, key = sys.argv[2], sys.argv[3]

from corral_client import AuthenticatedClient  # noqa: E402
from corral_client.api.sandboxes import (  # noqa: E402
    create_sandbox,
    delete_sandbox,
    list_sandboxes,
    read_sandbox_file,
    run_sandbox_command,
    write_sandbox_file,
)
from corral_client.models import (  # noqa: E402
    CreateSandboxRequestLocal,
    CreateSandboxRequestLocalProvider,
    ReadFileInput,
    RunCommandInput,
    Sandbox,
    SandboxPage,
    Utf8,
)


def expect(cond, what):
    if not cond:
        print(f"client journey: {what}", file=sys.stderr)
        sys.exit(1)


client = AuthenticatedClient(base_url=base_url, token=key, raise_on_unexpected_status=True)

created = create_sandbox.sync_detailed(
    client=client,
    body=CreateSandboxRequestLocal(provider=CreateSandboxRequestLocalProvider.LOCAL),
    idempotency_key="client-journey-1",
)
expect(created.status_code == 201, f"create answered {created.status_code}: {created.content!r}")
sandbox = created.parsed
expect(isinstance(sandbox, Sandbox), f"create parsed as {type(sandbox)}")
expect(sandbox.status.value == "creating", f"create status {sandbox.status}")
sid = sandbox.id

ran = run_sandbox_command.sync(
    sid, client=client, body=RunCommandInput(command="echo journey > /workspace/j.txt && cat /workspace/j.txt")
)
expect(ran.stdout == "journey\n" and ran.exit_code == 0, f"exec gave {ran!r}")

wrote = write_sandbox_file.sync(
    sid, client=client, body=Utf8(path="/workspace/hello.txt", content="hello from a generated client\n")
)
expect(wrote.bytes_written == 30, f"write gave {wrote!r}")

read = read_sandbox_file.sync(sid, client=client, body=ReadFileInput(path="/workspace/hello.txt"))
expect(read.content == "hello from a generated client\n", f"read gave {read!r}")

page = list_sandboxes.sync(client=client, limit=10)
expect(isinstance(page, SandboxPage), f"list parsed as {type(page)}")
listed = [item for item in page.items if item.id == sid]
expect(len(listed) == 1 and listed[0].status.value == "running", f"list gave {page!r}")

gone = delete_sandbox.sync(sid, client=client)
expect(gone.status.value == "deleted", f"delete gave {gone!r}")

print(f"client journey: create, exec, write, read, list and delete of {sid} passed")
