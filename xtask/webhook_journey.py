"""Webhooks checked by a verifier from another ecosystem: the Standard Webhooks reference
library for Python (PyPI `standardwebhooks`) verifies what a live Corral server delivers to a
loopback receiver: signatures, a retry after a 500 with the same webhook-id, a tampered body
refused, both secrets during a rotation's overlap, and the deliveries' recorded states.

Run by `cargo xtask schemathesis` as: webhook_journey.py BASE_URL API_KEY
(the server allows 127.0.0.1 as a webhook destination). Exits non-zero on any mismatch.
"""

import http.server
import json
import sys
import threading
import time
import urllib.request

from standardwebhooks import Webhook, WebhookVerificationError

base_url, key = sys.argv[1], sys.argv[2]


def expect(cond, what):
    if not cond:
        print(f"webhook journey: {what}", file=sys.stderr)
        sys.exit(1)


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base_url + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, json.loads(resp.read() or b"null")


received = []
lock = threading.Lock()


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        with lock:
            received.append((dict(self.headers.items()), body))
            first = len(received) == 1
        # The first delivery ever fails: it must come back, with the same webhook-id.
        self.send_response(500 if first else 204)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=server.serve_forever, daemon=True).start()
hook_url = f"http://127.0.0.1:{server.server_address[1]}/hook"


def wait_for(n, what):
    until = time.time() + 60
    while time.time() < until:
        with lock:
            if len(received) >= n:
                return list(received)
        time.sleep(0.2)
    expect(False, f"{what}: {len(received)} of {n} requests within 60 s")


status, hook = call(
    "POST",
    "/v1/webhook-endpoints",
    {"url": hook_url, "types": ["sandbox.created", "sandbox.deleted"]},
)
expect(status == 201 and hook["secret"].startswith("whsec_"), f"create answered {status} {hook}")
secret = hook["secret"]

status, sandbox = call("POST", "/v1/sandboxes", {"provider": "local"})
expect(status == 201, f"sandbox create answered {status}")
status, _ = call("DELETE", f"/v1/sandboxes/{sandbox['id']}")
expect(status == 200, f"sandbox delete answered {status}")

# The create (failed once, then delivered) and the delete: three requests.
got = wait_for(3, "deliveries")
verifier = Webhook(secret)
by_id = {}
for headers, body in got:
    payload = verifier.verify(body, headers)
    expect(payload["data"]["sandboxId"] == sandbox["id"], f"payload {payload}")
    wid = {k.lower(): v for k, v in headers.items()}["webhook-id"]
    by_id.setdefault(wid, []).append(payload["type"])
# The failed first attempt came back with its webhook-id. The two deliveries are due on
# their own and may go out in either order, so the one refused is whichever arrived first.
first_type = json.loads(got[0][1])["type"]
kinds = sorted((len(v), v[0]) for v in by_id.values())
other = "sandbox.deleted" if first_type == "sandbox.created" else "sandbox.created"
expect(kinds == sorted([(2, first_type), (1, other)]), f"deliveries by id {by_id}")
deleted = next(
    (h, b) for h, b in got if json.loads(b)["type"] == "sandbox.deleted"
)

# A changed body does not verify.
headers, body = deleted
try:
    verifier.verify(body.replace(b"sandbox.deleted", b"sandbox.created"), headers)
    expect(False, "a tampered body verified")
except WebhookVerificationError:
    pass

# After a rotation, a delivery verifies with the new secret and with the previous one.
status, rotated = call("POST", f"/v1/webhook-endpoints/{hook['id']}/rotate")
expect(status == 200 and rotated["secret"] != secret, f"rotate answered {status}")
status, second = call("POST", "/v1/sandboxes", {"provider": "local"})
expect(status == 201, f"second create answered {status}")
got = wait_for(4, "the delivery after the rotation")
headers, body = got[3]
Webhook(rotated["secret"]).verify(body, headers)
Webhook(secret).verify(body, headers)
call("DELETE", f"/v1/sandboxes/{second['id']}")

status, deliveries = call("GET", f"/v1/webhook-endpoints/{hook['id']}/deliveries")
states = sorted((d["eventId"], d["state"], d["attempts"]) for d in deliveries["items"])
expect(status == 200 and len(states) >= 3, f"deliveries {deliveries}")
retried = [s for s in states if s[2] == 2]
expect(
    len(retried) == 1 and retried[0][1] == "delivered",
    f"one delivery retried once, then delivered: {states}",
)
status, _ = call("DELETE", f"/v1/webhook-endpoints/{hook['id']}")
expect(status == 200, f"endpoint delete answered {status}")
server.shutdown()
print(f"webhook journey: {len(got)} deliveries verified by standardwebhooks")
