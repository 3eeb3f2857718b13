"""The doorbell under one device token's flood, measured from outside (issue 42).

    python3 infra/doorbell-flood.py target/debug/local      (or target/server/local)

Starts the local server in a fresh data folder, reads its banner for the port and the device
token, then: 2,000 WebSocket upgrades with that one token, held open (the server keeps at most
four per device, closing the older ones), and 8 sockets each sending a 60 MiB binary message in
15 MiB fragments (refused at the first frame header, over the 4 KiB a relay may send). Prints
the server's resident memory (VmRSS, Linux) at each step. Not part of the test command: the
bounds themselves are asserted by tests/tests/attacks.rs; this measures what they cost, asserts
its goals (every upgrade answered; under 16 MB more after the 2,000; a peak under 32 MB over the
start while the 480 MiB arrive) and writes docs/flood-figures.json, which docs/results.md quotes
(`attacks::the_flood_figures_in_the_docs_are_the_script` holds it).
"""
import os, re, socket, subprocess, sys, time, base64
exe = sys.argv[1]
import tempfile
data = tempfile.mkdtemp(prefix="doorbell-flood-")
os.makedirs(data, exist_ok=True)
env = dict(os.environ, FOUNDRY_DATA_DIR=data, FOUNDRY_PORT="0", RUST_LOG="warn")
p = subprocess.Popen([exe], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
banner = ""
while "Owner token" not in banner:
    banner += p.stdout.readline()
port = int(re.search(r"Relay server:\s+http://127.0.0.1:(\d+)", banner).group(1))
token = re.search(r"Device token:\s+(\S+)", banner).group(1)
def rss():
    for l in open(f"/proc/{p.pid}/status"):
        if l.startswith("VmRSS"):
            return int(l.split()[1]) // 1024
def upgrade():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall((f"GET /external-assistants/graph-relays/doorbell HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer {token}\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(1)
        if not c: break
        head += c
    return s, head.split(b" ")[1] if head else b"0"
time.sleep(1)
start = rss()
print("start", start, "MB")
keep = []
ok = 0
for i in range(2000):
    s, st = upgrade()
    ok += st == b"101"
    keep.append(s)
time.sleep(3)
after_upgrades = rss()
print("after 2000 upgrades with one token:", ok, "answered 101;", after_upgrades, "MB")
for s in keep: s.close()
keep = []
time.sleep(2)
# 8 sockets sending a 60 MiB message in 15 MiB fragments
import threading
def flood():
    s, st = upgrade()
    try:
        for frag in range(4):
            op = 0x2 if frag == 0 else 0x0
            # FIN only on the last fragment
            fin = 0x80 if frag == 3 else 0
            n = 15 * 1024 * 1024
            s.sendall(bytes([fin | op, 0x80 | 127]) + n.to_bytes(8, "big") + b"\0\0\0\0")
            chunk = b"\0" * (1 << 20)
            for _ in range(15):
                s.sendall(chunk)
    except OSError as e:
        return
ts = [threading.Thread(target=flood) for _ in range(8)]
for t in ts: t.start()
peak = 0
for _ in range(40):
    peak = max(peak, rss()); time.sleep(0.1)
for t in ts: t.join(timeout=10)
after = rss()
print("peak during 8 x 60 MiB messages:", peak, "MB; after:", after, "MB")
p.terminate()
import json
figures = {"start_mb": start, "upgrades": 2000, "upgrades_answered": ok, "after_upgrades_mb": after_upgrades,
           "fragment_peak_mb": peak, "after_fragments_mb": after}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "flood-figures.json")
with open(out, "w") as f:
    f.write(json.dumps(figures, indent=2, sort_keys=True) + "\n")
assert ok == 2000, f"{ok} of 2000 upgrades answered"
assert after_upgrades - start < 16, f"2,000 upgrades cost {after_upgrades - start} MB"
assert peak - start < 32, f"a peak of {peak} MB from {start} MB while 480 MiB arrived"
