"""A Graph that asks a linked chat through its relay and waits for the answer.

Run by the relay (tests/tests/desktop_asks.rs gives it a session): its arguments on stdin are
{"asks": [{"link", "key", "objective", "expires_in"?}, ...], "pid_file"?}. It asks each in turn
with `relay task ask` and prints, as the run's result, one JSON object:
{"answers": [{"exit", "status", "result", "error", "received"}, ...]}, where `received` is
time.time() when the answer came back (the latency figures).
"""

import json
import os
import subprocess
import sys
import time

args = json.load(sys.stdin)
if args.get("pid_file"):
    with open(args["pid_file"], "w") as f:
        f.write(str(os.getpid()))
answers = []
for ask in args["asks"]:
    command = [os.environ["FOUNDRY_RELAY"], "task", "ask", "--link", ask["link"], "--key", ask["key"]]
    if ask.get("expires_in"):
        command += ["--expires-in", ask["expires_in"]]
    done = subprocess.run(command + [ask["objective"]], capture_output=True, text=True)
    received = time.time()
    reply = json.loads(done.stdout or "{}")
    task = reply.get("task") or {}
    answers.append({"exit": done.returncode, "status": task.get("status"), "result": task.get("result"),
                    "error": reply.get("error"), "received": received})
print(json.dumps({"answers": answers}))
