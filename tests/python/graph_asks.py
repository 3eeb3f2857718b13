"""A Graph that asks a linked chat through its relay and waits for the answer.

Run by the relay (tests/tests/desktop_asks.rs gives it a session): its arguments on stdin are
{"asks": [{"link", "key", "objective", "expires_in"?, "no_wait"?}, ...], "pid_file"?,
"answers_file"?, "ignore_term"?}. It asks each in turn with `relay task ask` and prints, as the
run's result, one JSON object: {"answers": [{"exit", "status", "result", "error", "received",
"printed", "stderr"}, ...]}, where `received` is time.time() when the answer came back (the
latency figures) and `printed` and `stderr` are what `relay task ask` wrote. A key's `{run_id}`
is the run's id ($FOUNDRY_RUN_ID). With `answers_file`, each answer is also appended there as
one JSON line as soon as it came back (what a run that is cancelled leaves); with
`ignore_term`, the Graph and what it starts ignore SIGTERM (they outlive a cancel's SIGTERM
until its SIGKILL).
"""

import json
import os
import signal
import subprocess
import sys
import time

args = json.load(sys.stdin)
if args.get("ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if args.get("pid_file"):
    with open(args["pid_file"], "w") as f:
        f.write(str(os.getpid()))
answers = []
for ask in args["asks"]:
    key = ask["key"].replace("{run_id}", os.environ.get("FOUNDRY_RUN_ID", ""))
    command = [os.environ["FOUNDRY_RELAY"], "task", "ask", "--link", ask["link"], "--key", key]
    if ask.get("expires_in"):
        command += ["--expires-in", ask["expires_in"]]
    if ask.get("no_wait"):
        command += ["--no-wait"]
    done = subprocess.run(command + [ask["objective"]], capture_output=True, text=True)
    received = time.time()
    reply = json.loads(done.stdout or "{}")
    task = reply.get("task") or {}
    answer = {"exit": done.returncode, "status": task.get("status"), "result": task.get("result"),
              "error": reply.get("error"), "received": received, "printed": done.stdout.strip(),
              "stderr": done.stderr.strip()}
    answers.append(answer)
    if args.get("answers_file"):
        with open(args["answers_file"], "a") as f:
            f.write(json.dumps(answer) + "\n")
print(json.dumps({"answers": answers}))
