#!/bin/sh
# Checks a Mac that runs the relay agent for what only a Mac can show (issue 58; docs/relay.md,
# "Checking a Mac"). An owner or a maintainer runs it in Terminal, as the owner, after installing
# and again after each update:
#
#   sh mac-check.sh                  (RELAY=/path/to/relay if it is not on PATH or in ~/.local/bin)
#
# It reads, and changes nothing but its own note of the last check
# (~/Library/Application Support/foundry-connect/mac-check):
#   1. the signature: ad hoc (every update loses the privacy grants) or an identity; and whether
#      the designated requirement, which the grants are keyed to, changed since the last check;
#   2. launchd: the agent loaded, running, its last exit, switched off under Login Items;
#   3. the system proxy (`scutil --proxy`): a PAC file the relay cannot follow;
#   4. local network privacy (TN3179): the binary's LC_UUID (`otool`, from the Command Line Tools);
#   5. sleep: whether the Mac would sleep with its lid closed (closed-display mode needs power and
#      an external display), and the relay's sleep assertion while a run goes on;
#   6. `relay check`: the rest (sessions' folders as the agent sees them, the server, the doorbell).
# Exit status: 0 with no failure, 1 with one or more, 2 when this is not a Mac.
set -u

label=${FOUNDRY_RELAY_LABEL:-com.foundry-connect.relay}
notes=${FOUNDRY_MAC_CHECK_STATE:-"$HOME/Library/Application Support/foundry-connect/mac-check"}
fails=0
warns=0
ok() { printf 'ok    %s\n' "$*"; }
warn() { printf 'warn  %s\n' "$*"; warns=$((warns + 1)); }
fail() { printf 'FAIL  %s\n' "$*"; fails=$((fails + 1)); }

if [ "$(uname -s)" != Darwin ]; then
  echo "this checks a Mac (uname -s says $(uname -s)); on Linux, relay check covers the agent"
  exit 2
fi
relay=${RELAY:-$(command -v relay 2>/dev/null || echo "$HOME/.local/bin/relay")}
if [ ! -x "$relay" ]; then
  fail "no relay at $relay (set RELAY=/path/to/relay)"
  exit 1
fi
echo "== $relay"

# 1. The signature, and the privacy grants it carries across updates.
sig=$(codesign -dv --verbose=4 "$relay" 2>&1)
case $sig in
  *Signature=adhoc*)
    warn "relay is ad-hoc signed: macOS keys Full Disk Access and Files and Folders grants to this exact build, so each update needs them given again (updates are offered, not installed, for this reason: relay update)" ;;
  *Authority=*)
    ok "relay is signed by $(printf '%s\n' "$sig" | sed -n 's/^Authority=//p' | head -n 1): grants survive updates signed the same way" ;;
  *)
    fail "codesign cannot read relay's signature: $(printf '%s\n' "$sig" | head -n 1)" ;;
esac
designated=$(codesign -d -r- "$relay" 2>/dev/null | sed -n 's/^# designated => //p; s/^designated => //p' | head -n 1)
if [ -n "$designated" ]; then
  mkdir -p "$notes"
  if [ -f "$notes/designated" ] && [ "$(cat "$notes/designated")" != "$designated" ]; then
    fail "relay's designated requirement changed since the last check: grants given before no longer match. In System Settings > Privacy & Security > Full Disk Access, remove relay (-), add it again (+, then Cmd-Shift-G and type $relay), then: launchctl kickstart -k gui/$(id -u)/$label"
  elif [ -f "$notes/designated" ]; then
    ok "the designated requirement is the one of the last check: grants still match"
  else
    ok "designated requirement noted ($designated); run this again after an update"
  fi
  printf '%s\n' "$designated" > "$notes/designated"
fi

# 2. launchd: loaded, running, last exit, switched off.
uid=$(id -u)
if printed=$(launchctl print "gui/$uid/$label" 2>&1); then
  state=$(printf '%s\n' "$printed" | sed -n 's/^	state = //p' | head -n 1)
  last=$(printf '%s\n' "$printed" | sed -n 's/^	last exit code = //p' | head -n 1)
  if [ "$state" = running ]; then
    ok "the agent is loaded and running"
  else
    fail "the agent is loaded but ${state:-in no known state} (last exit code ${last:-none}): see ~/Library/Logs/foundry-connect/relay.log, then launchctl kickstart -k gui/$uid/$label"
  fi
else
  fail "the agent is not loaded ($(printf '%s\n' "$printed" | head -n 1)): relay install"
fi
if launchctl print-disabled "gui/$uid" 2>/dev/null | grep -Eq "\"$label\" => (true|disabled)"; then
  fail "the agent is switched off: System Settings > General > Login Items & Extensions > Allow in the Background, the item \"relay\" (or \"from an unidentified developer\"); switch it on, then relay install"
fi

# 3. The system proxy.
proxy=$(scutil --proxy 2>/dev/null)
case $proxy in
  *"HTTPSEnable : 1"* | *"HTTPEnable : 1"*)
    ok "a system proxy is set: the agent uses it when its service names none (relay check says which is used)" ;;
  *"ProxyAutoConfigEnable : 1"* | *"ProxyAutoDiscoveryEnable : 1"*)
    warn "the system proxy is a PAC file or automatic discovery, which the relay does not run: if this network needs a proxy, export HTTPS_PROXY=http://host:port and run relay install" ;;
  *) ok "no system proxy" ;;
esac

# 4. Local network privacy relies on the binary's LC_UUID (TN3179).
if command -v otool > /dev/null 2>&1; then
  if otool -l "$relay" | grep -q LC_UUID; then
    ok "relay has an LC_UUID (local network privacy can tell it apart)"
  else
    fail "relay has no LC_UUID: macOS's local network privacy cannot track it (TN3179); report this build"
  fi
else
  warn "otool is not installed (xcode-select --install): the LC_UUID check is skipped"
fi

# 5. Sleep: caffeinate -i stops idle sleep only; a closed lid sleeps the Mac unless it is in
#    closed-display mode (power, an external display, keyboard or mouse).
if command -v pmset > /dev/null 2>&1; then
  if pmset -g assertions 2>/dev/null | grep -q caffeinate; then
    ok "a sleep assertion is held (a run is going on)"
  fi
  case $(pmset -g batt 2>/dev/null) in
    *"Battery Power"*) warn "on battery: closing the lid sleeps this Mac and a run then fails as \"the Mac slept during the run\"" ;;
  esac
fi

# 6. Everything else, as the agent sees it.
echo "== relay check"
if ! "$relay" check; then
  fail "relay check found problems (above)"
fi

echo "== $fails failure(s), $warns warning(s)"
[ "$fails" -eq 0 ]
