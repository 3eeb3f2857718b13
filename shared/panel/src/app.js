// The owner's panel: plain ES module, no build step. Talks only to the owner API on the same
// origin. Tokens live in sessionStorage (gone when the tab closes), never in a cookie or URL.
const $ = (id) => document.getElementById(id);
const store = window.sessionStorage;
let cfg = null;
let selected = null; // chat_link_id shown in the detail
let openTask = null; // task_id shown in the task detail
let timer = null;
let keyFor = { text: null, key: null }; // the assign idempotency key, kept while the text is unchanged

function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "onclick") el.addEventListener("click", v);
    else if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) el.append(kid instanceof Node ? kid : document.createTextNode(kid ?? ""));
  return el;
}

const when = (iso) => (iso ? new Date(iso).toLocaleString() : "—");

// "2 min ago" (or "in 5 min"), the exact time on hover and for assistive technology.
function ago(iso) {
  if (!iso) return "—";
  const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  const a = Math.abs(s);
  const text = a < 45 ? "just now" : a < 5400 ? `${Math.round(a / 60)} min` : a < 129600 ? `${Math.round(a / 3600)} h`
    : `${Math.round(a / 86400)} days`;
  const rel = a < 45 ? text : s >= 0 ? `${text} ago` : `in ${text}`;
  return h("time", { datetime: iso, title: when(iso) }, rel);
}

// A state as a badge (its words, coloured by kind; the words carry the meaning).
const badge = (kind, words) => h("span", { class: `badge badge-${kind}` }, words);

// A table body, or the one row that says what it is for; the focused control keeps its place.
function rowsOr(tbodyId, rows, empty) {
  const body = $(tbodyId), was = document.activeElement;
  const cols = body.closest("table").querySelectorAll("thead th").length;
  const ctl = (r) => [...r.querySelectorAll("button,a[href],input,select,[tabindex]")];
  const row = body.contains(was) && was.closest("tr");
  const at = row && [[...body.children].indexOf(row), ctl(row).indexOf(was)];
  body.replaceChildren(...(rows.length ? rows : [h("tr", { class: "empty" }, h("td", { colspan: String(cols) }, empty))]));
  labelCells(tbodyId);
  const again = at && body.children[at[0]] && ctl(body.children[at[0]])[at[1]];
  if (again) again.focus({ preventScroll: true });
}

// Each cell carries its column's name: on a phone the rows stack and show it (app.css).
function labelCells(tbodyId) {
  const heads = [...$(tbodyId).closest("table").querySelectorAll("thead th")].map((th) => th.textContent.trim());
  for (const tr of $(tbodyId).children) {
    [...tr.children].forEach((td, i) => { if (heads[i]) td.dataset.label = heads[i]; });
  }
}
const secs = (s) => (s === null || s === undefined ? "—" : s < 90 ? `${s.toFixed(1)} s` : `${(s / 60).toFixed(1)} min`);

// ---- sign-in ------------------------------------------------------------------------------

function tokenPayload(token) {
  try {
    return JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
  } catch {
    return {};
  }
}

function b64url(bytes) {
  return btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function redirectUri() {
  // The cloud names the owner client's one callback (the panel on the API's own URL).
  return cfg.redirect_uri || `${location.origin}/panel`;
}

async function startCognito() {
  // Opened on another origin (a custom domain): sign in from the registered one instead.
  if (new URL(redirectUri()).origin !== location.origin) {
    location.assign(redirectUri());
    return;
  }
  const verifier = b64url(crypto.getRandomValues(new Uint8Array(32)));
  const state = b64url(crypto.getRandomValues(new Uint8Array(16)));
  const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  store.setItem("fc.pkce", JSON.stringify({ verifier, state }));
  const q = new URLSearchParams({
    response_type: "code", client_id: cfg.client_id, redirect_uri: redirectUri(), scope: cfg.scope,
    state, code_challenge: challenge, code_challenge_method: "S256",
  });
  location.assign(`${cfg.authorize_url}?${q}`);
}

async function tokenRequest(params) {
  const res = await fetch(cfg.token_url, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ client_id: cfg.client_id, ...params }),
  });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error_description || body.error || `sign-in failed (${res.status})`);
  const expiresAt = Date.now() + (body.expires_in || 3600) * 1000;
  store.setItem("fc.token", body.access_token);
  store.setItem("fc.expires", String(expiresAt));
  if (body.refresh_token) store.setItem("fc.refresh", body.refresh_token);
  scheduleTokenRefresh();
}

function scheduleTokenRefresh() {
  if (cfg.mode !== "cognito" || !store.getItem("fc.refresh")) return;
  const due = Number(store.getItem("fc.expires") || 0) - Date.now() - 120000;
  setTimeout(() => tokenRequest({ grant_type: "refresh_token", refresh_token: store.getItem("fc.refresh") })
    .catch((e) => showSignIn(`Your session ended (${e.message}); sign in again.`)), Math.max(due, 1000));
}

async function signIn() {
  if (cfg.mode === "local") {
    const fragment = new URLSearchParams(location.hash.slice(1));
    if (fragment.get("token")) {
      store.setItem("fc.token", fragment.get("token"));
      const exp = tokenPayload(fragment.get("token")).exp;
      if (exp) store.setItem("fc.expires", String(exp * 1000));
      history.replaceState(null, "", "/panel");
    }
    // The owner's session for consent pages: only a browser holding it can approve an
    // application that asks to connect (the cookie is HttpOnly, for /oauth only).
    if (store.getItem("fc.token")) {
      await fetch("/oauth/session", { method: "POST", headers: { Authorization: `Bearer ${store.getItem("fc.token")}` } }).catch(() => {});
    }
  } else {
    const q = new URLSearchParams(location.search);
    if (q.get("code")) {
      const saved = JSON.parse(store.getItem("fc.pkce") || "{}");
      history.replaceState(null, "", "/panel");
      if (q.get("state") !== saved.state) throw new Error("the sign-in answer did not match this tab; sign in again");
      store.removeItem("fc.pkce");
      await tokenRequest({ grant_type: "authorization_code", code: q.get("code"), redirect_uri: redirectUri(), code_verifier: saved.verifier });
    } else if (q.get("error")) {
      history.replaceState(null, "", "/panel");
      throw new Error(q.get("error_description") || q.get("error"));
    }
  }
  const token = store.getItem("fc.token");
  const expires = Number(store.getItem("fc.expires") || 0);
  if (!token || (expires && expires < Date.now() && !store.getItem("fc.refresh"))) return false;
  scheduleTokenRefresh();
  return true;
}

function showSignIn(text) {
  store.removeItem("fc.token");
  $("content").hidden = true;
  $("signout").hidden = true;
  $("signin").hidden = false;
  $("signin-text").textContent = text || (cfg.mode === "local"
    ? "Open the panel through the sign-in URL the local server printed when it started."
    : "Sign in with the owner account of this deployment.");
  $("signin-button").hidden = cfg.mode !== "cognito";
}

function signOut() {
  store.clear();
  if (cfg.mode === "cognito") {
    location.assign(`${cfg.logout_url}?${new URLSearchParams({ client_id: cfg.client_id, logout_uri: redirectUri() })}`);
  } else {
    showSignIn("Signed out. Open the sign-in URL again to come back.");
  }
}

// ---- API ----------------------------------------------------------------------------------

class ApiError extends Error {}

async function api(method, path, body) {
  const res = await fetch(`/owner${path}`, {
    method,
    headers: { Authorization: `Bearer ${store.getItem("fc.token")}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const data = await res.json().catch(() => ({}));
  if (res.status === 401) {
    showSignIn("Your sign-in expired; sign in again.");
    throw new ApiError("not signed in");
  }
  if (!res.ok) throw new ApiError(data.error || `request failed (${res.status})`);
  return data;
}

/// Runs `fn`, showing its error in the element `errorId` (cleared on success). Never swallows.
async function act(errorId, fn) {
  const out = $(errorId);
  out.textContent = "";
  try {
    return await fn();
  } catch (e) {
    out.textContent = e.message;
    return undefined;
  }
}

// Copies `text`; the button's word (its first child) says whether it did, for a moment.
async function copyText(text, word) {
  const done = await navigator.clipboard.writeText(text).then(() => true, () => false);
  word.textContent = done ? "Copied" : "Not copied";
  setTimeout(() => (word.textContent = "Copy"), 1500);
}

// A static page's Copy button for the text of the element `sourceId`.
function copyButton(buttonId, sourceId) {
  $(buttonId).addEventListener("click", () => copyText($(sourceId).textContent, $(buttonId).firstElementChild));
}

// A Copy button for `text`, its accessible name saying what it copies ("Copy project id of X").
function copyBtn(text, what) {
  const word = h("span", {}, "Copy");
  return h("button", { type: "button", class: "copy", onclick: () => copyText(text, word) }, word, h("span", { class: "sr-only" }, ` ${what}`));
}

// An id as the owner types it elsewhere (a relay flag, a tool argument), with its Copy button.
const idCopy = (id, what) => h("div", { class: "id" }, h("code", {}, id), " ", copyBtn(id, what));

// A command or snippet to paste, with its Copy button.
const cmd = (text, what) => h("p", {}, h("code", {}, text), " ", copyBtn(text, what));

// ---- rendering ----------------------------------------------------------------------------

// The server's own URL (the MCP URL without /mcp): what the relay pairs with.
const serverBase = () => cfg.mcp_url.replace(/\/mcp$/, "");

// "Connect a chat", by where the server runs (config.json's `server`). The local server's
// 127.0.0.1 URL reaches only clients on this machine: claude.ai and ChatGPT connect from their
// own servers, so they need a tunnel and FOUNDRY_PUBLIC_URL. A cloud stack's URL is public.
function renderHosts() {
  const url = cfg.mcp_url;
  const loopback = /^http:\/\/(127\.0\.0\.1|localhost|\[::1\])[:/]/.test(url);
  const host = (name, ...body) => h("details", {}, h("summary", {}, name), ...body);
  const p = (text) => h("p", {}, text);
  const here = [
    host("Claude Code", p("In a terminal:"), cmd(`claude mcp add --transport http foundry ${url}`, "Claude Code command")),
    host("Codex", p("In a terminal:"), cmd(`codex mcp add foundry --url ${url}`, "Codex command")),
    host("VS Code (GitHub Copilot)", p("In .vscode/mcp.json, or MCP: Open User Configuration:"),
      cmd(JSON.stringify({ servers: { foundry: { type: "http", url } } }), "VS Code configuration")),
    host("Cursor", p("In ~/.cursor/mcp.json:"), cmd(JSON.stringify({ mcpServers: { foundry: { url } } }), "Cursor configuration")),
    host("MCP Inspector", cmd("npx @modelcontextprotocol/inspector", "MCP Inspector command"),
      p("then Transport Type: Streamable HTTP, this URL, Connect.")),
  ];
  const claude = "Claude (claude.ai, the apps): Settings → Connectors → Add custom connector: a name and the URL; Connect, then sign in.";
  const chatgpt = "ChatGPT: Settings → Apps & Connectors → Advanced settings → Developer mode on; Create: a name, the URL, authentication OAuth (no client id); sign in when it asks.";
  const web = [host("claude.ai", p(claude)), host("ChatGPT", p(chatgpt))];
  if (cfg.server === "local" && loopback) {
    $("connect-intro").textContent = "This server runs on this machine: its MCP URL reaches only clients on this machine. Each opens a consent page: allow it in this browser.";
    $("hosts").replaceChildren(...here, host("claude.ai or ChatGPT: through a tunnel",
      p("They connect from their own servers, which cannot reach 127.0.0.1. Give this server a public https address with a tunnel, for example:"),
      cmd(`cloudflared tunnel --url ${serverBase()}`, "tunnel command"),
      p("then restart the server with the https URL it prints (sign-in answers only that host; what protects the server then: the README's FOUNDRY_PUBLIC_URL):"),
      cmd("FOUNDRY_PUBLIC_URL=https://<tunnel host> cargo run -p local", "restart command"),
      p("and use https://<tunnel host>/mcp as the URL in the chat."), p(claude), p(chatgpt)));
  } else {
    $("connect-intro").textContent = "Paste this URL into your chat; it opens a sign-in page for the owner account.";
    $("hosts").replaceChildren(...web, ...here);
  }
}

// "Connect a chat": whether any chat has been issued a token yet, and which (a metadata
// document's host names the chat; an app client id is shown shortened).
function chatName(id) {
  if (/^https:\/\//.test(id)) {
    try { return new URL(id).hostname; } catch (_) { /* shown as it is */ }
  }
  return id.length > 14 ? `app ${id.slice(0, 12)}…` : `app ${id}`;
}

function renderChats(chats) {
  const status = $("chat-status");
  if (!chats.length) {
    status.replaceChildren(badge("none", "No chat yet"), " No chat has connected yet: connect one as above and sign in there; it shows here once it has.");
    return;
  }
  const shown = chats.slice(0, 3).map((c, i) => [i ? ", " : "", h("strong", {}, chatName(c.client_id)), " (last ", ago(c.last_connected_at), ")"]).flat();
  const more = chats.length > 3 ? [` and ${chats.length - 3} more`] : [];
  status.replaceChildren(badge("connected", "Connected"), ` ${chats.length === 1 ? "A chat has" : `${chats.length} chats have`} connected: `, ...shown, ...more, ".");
}

// The hosts that connected, and how each got its token.
const SIGN_IN = {
  token: "Bearer token",
  registration: "Signed in (registered client)",
  document: "Signed in (client metadata document)",
};

function renderHostsSeen(hosts) {
  rowsOr("hosts-seen", hosts.map((x) => h("tr", {},
    h("td", {}, x.name || "(no name)"),
    h("td", {}, x.version),
    h("td", {}, ago(x.last_seen_at)),
    h("td", {}, SIGN_IN[x.sign_in] || x.sign_in))),
  "No host has connected yet.");
}

function renderProjects(projects) {
  // A switch: its state in aria-checked and in its words, the project in its name.
  rowsOr("projects", projects.map((p) => h("tr", {},
    h("td", {}, p.name, idCopy(p.project_id, `project id of ${p.name}`)),
    h("td", {}, h("button", {
      type: "button", role: "switch", class: "switch", "aria-checked": String(p.enabled),
      onclick: () => act("project-error", async () => { await api("PUT", `/projects/${p.project_id}`, { enabled: !p.enabled }); await refresh(); }),
    }, p.enabled ? "Enabled" : "Disabled", h("span", { class: "sr-only" }, ` for connected agents in ${p.name}`))),
    h("td", {}, String(p.shared_sessions)),
    h("td", {}, ago(p.last_sync_at)))),
  "No project yet. Create one above, then enable it: chats see only enabled projects.");
  const select = $("link-project");
  const keep = select.value;
  select.replaceChildren(...projects.map((p) => h("option", { value: p.project_id }, p.name)));
  if (keep) select.value = keep;
  renderAddDesktop(projects);
}

// "Add a desktop": this server's commands in order, filled in (a project chooser when there
// are several).
function renderAddDesktop(projects) {
  const base = serverBase();
  $("install-line").textContent = `curl -fsSL ${base}/relay/install.sh | sh`;
  $("pair-line").textContent = `relay pair ${base}`;
  const select = $("hello-project");
  const keep = select.value;
  select.replaceChildren(...projects.map((p) => h("option", { value: p.project_id }, p.name)));
  if (projects.some((p) => p.project_id === keep)) select.value = keep;
  $("hello-choose").hidden = projects.length < 2;
  helloLine();
}

const helloLine = () => ($("hello-line").textContent = `relay session add --hello --project ${$("hello-project").value || "<project id>"}`);

// What a desktop's state means for a run queued now (the owner API's `state`).
function deviceState(d) {
  switch (d.state) {
    case "online_doorbell": return "Online: runs start at once";
    case "online_polling": return "Online: polling, runs start within a poll";
    case "busy": return `Busy: running ${runName(d.busy)} since ${when(d.busy.started_at)}`
      + (d.busy.running > 1 ? ` and ${d.busy.running - 1} more` : "");
    case "revoked": return `Revoked ${when(d.revoked_at)}`;
    case "stale": return `Stale: ${d.last_seen_at ? `offline since ${when(d.last_seen_at)}` : "never connected"}; remove it if it is gone`;
    case "paused": {
      const p = d.paused || {};
      const finishing = d.busy ? `, finishing ${runName(d.busy)}` : "";
      return `Paused${p.until ? ` until ${when(p.until)}` : ""}${finishing}: runs wait${p.note ? ` (${p.note})` : ""}`;
    }
    default: return d.last_seen_at ? `Offline since ${when(d.last_seen_at)}` : "Never connected";
  }
}

// Why a desktop may have stopped reporting, and where to look, by what its relay last said it
// runs on (docs/relay.md, "relay check asks launchd").
function stoppedHint(d) {
  if (d.revoked_at || !["offline", "stale"].includes(d.state)) return "";
  const mac = d.relay && d.relay.platform.startsWith("macos");
  return h("div", { class: "note" }, mac
    ? "If the Mac is on: run relay check there. The agent may have stopped, or be switched off in System Settings > General > Login Items & Extensions > Allow in the Background (the item “relay”)."
    : "If the computer is on: run relay check there (systemctl --user status foundry-relay).");
}

// A busy desktop's run, by the name of the session it shares (its id if it no longer does).
function runName(busy) {
  const s = sessionNames.get(busy.graph_session_id);
  return s ? `“${s}”` : busy.graph_session_id;
}

let sessionNames = new Map();

function renderDevices(devices) {
  sessionNames = new Map(devices.flatMap((d) => d.sessions.map((s) => [s.graph_session_id, s.name])));
  const remove = (d) => h("button", {
    type: "button", class: "danger", "aria-label": `Remove ${d.name}`,
    onclick: () => act("device-error", async () => {
      if (!confirm(`Remove ${d.name}? Its token stops working and its shared sessions are withdrawn.`)) return;
      await api("POST", `/devices/${d.device_id}/remove`); await refresh();
    }),
  }, "Remove");
  rowsOr("devices", devices.map((d) => h("tr", { "data-state": d.state },
    h("td", {}, d.name, idCopy(d.device_id, `device id of ${d.name}`)),
    h("td", {}, d.relay ? `${d.relay.version} · ${d.relay.platform} · ${d.relay.host}`
        + (d.relay.slots > 1 ? ` · ${d.relay.slots} runs at once` : "") : "—",
      d.relay && d.relay.update ? h("div", { class: "note" }, `${d.relay.update} available: relay update`) : "",
      d.relay && d.relay.unavailable ? h("div", { class: "note", "data-unavailable": d.relay.unavailable },
        `${d.relay.unavailable === 1 ? "1 shared session is" : `${d.relay.unavailable} shared sessions are`} unavailable here (a folder missing, or refused by macOS privacy controls): run relay check on this desktop`) : ""),
    h("td", {}, ago(d.created_at)), h("td", {}, ago(d.last_seen_at)),
    h("td", {}, d.sessions.length ? [...new Map(d.sessions.map((s) => [s.graph_session_id, s])).values()]
      .map((s) => h("div", {}, s.name, idCopy(s.graph_session_id, `session id of ${s.name}`))) : "—"),
    h("td", {}, badge(d.state, deviceState(d)), stoppedHint(d)),
    h("td", {}, ...(d.revoked_at ? [remove(d)] : [
      d.paused
        ? h("button", {
          type: "button", "aria-label": `Resume ${d.name}`,
          onclick: () => act("device-error", async () => {
            await api("POST", `/devices/${d.device_id}/resume`); await refresh();
          }),
        }, "Resume")
        : h("button", {
          type: "button", "aria-label": `Pause ${d.name}`,
          onclick: () => act("device-error", async () => {
            // Until resumed; the API also takes for_seconds and a note (docs/panel.md).
            await api("POST", `/devices/${d.device_id}/pause`, {}); await refresh();
          }),
        }, "Pause"),
      " ",
      h("button", {
        type: "button", class: "danger", "aria-label": `Revoke ${d.name}`,
        onclick: () => act("device-error", async () => {
          if (!confirm(`Revoke the token of ${d.name}? Its relay stops working.`)) return;
          await api("DELETE", `/devices/${d.device_id}`); await refresh();
        }),
      }, "Revoke"),
      ...(d.stale ? [" ", remove(d)] : []),
    ])))),
  "No desktop yet. Run the install line above in the desktop's terminal, then look up the code it prints.");
}

function renderLinks(links) {
  if (selected && !links.some((l) => l.chat_link_id === selected)) selectLink(null);
  $("links").replaceChildren(...(links.length ? links.map((l) => h("li", {}, h("button", {
    type: "button", "aria-current": String(l.chat_link_id === selected),
    onclick: () => selectLink(l.chat_link_id),
  }, l.name), idCopy(l.chat_link_id, `chat link id of ${l.name}`))) : [h("li", { class: "empty" },
    "No chat linked yet. Link one to a project to assign it tasks; the chat connects with the URL at the top.")]));
  const link = links.find((l) => l.chat_link_id === selected);
  $("link-detail").hidden = !link;
  if (!link) return;
  $("h-link").textContent = link.name;
  $("link-id").textContent = link.chat_link_id;
  $("subscription-line").textContent = link.subscription
    ? `An event subscription is active for this chat (${link.subscription.url}).`
    : "Open the host conversation to start each task.";
  const last = link.subscription && link.subscription.last_delivery;
  $("delivery-line").textContent = last
    ? `Last delivery: ${last.event_type} at ${when(last.at)} — ${last.ok ? "delivered" : "failed"} (${last.detail}).`
    : "";
  $("unsubscribe").hidden = !link.subscription;
  const d = link.desktop_tasks;
  $("desktop-tasks-line").textContent = !d
    ? "Graphs on your desktops cannot hand this chat tasks."
    : d.sessions.length
      ? `Graphs of ${d.sessions.length} session${d.sessions.length === 1 ? "" : "s"} on your desktops may hand this chat tasks.`
      : "Graphs on your desktops may hand this chat tasks (any session).";
  $("desktop-tasks-toggle").textContent = d ? "Stop desktop tasks" : "Let desktop Graphs hand this chat tasks";
  $("desktop-tasks-toggle").dataset.on = d ? "1" : "";
}

// Where a task came from: the owner, or a Graph run on a desktop (which waits for the result).
const origin = (t) => (t.origin ? `A Graph on a desktop (run ${t.origin.command_id.slice(0, 8)}…), waiting for the result` : "You");

function renderTasks(tasks, next) {
  rowsOr("tasks", tasks.map((t) => h("tr", {},
    h("td", {}, h("button", { type: "button", class: "linklike", onclick: () => showTask(t.task_id) },
      (t.origin ? "From a desktop Graph: " : "") + t.objective + (t.objective_truncated ? "…" : ""))),
    h("td", { class: "label" }, badge(t.status, t.label)),
    h("td", {}, ago(t.created_at)))),
  "No task for this chat yet. Assign one above; the chat claims it the next time its conversation asks for work.");
  $("more-tasks").hidden = !next;
  $("more-tasks").dataset.cursor = next || "";
}

// A run's status cell; a running Graph's progress under it: its words, a bar when it gives a
// fraction, and its last log lines on hover (all as text: the Graph's output is never markup).
const statusWords = (r) => r.status + (r.cancel_requested && r.status === "running" ? " (cancelling)" : "");

function runStatus(r) {
  const status = statusWords(r);
  const p = r.progress;
  if (!p) return h("td", {}, badge(r.status, status));
  const pct = p.fraction == null ? "" : ` ${Math.round(p.fraction * 100)}%`;
  const cell = h("td", { class: "run-progress", title: (p.tail || []).join("\n") },
    badge(r.status, status), h("span", { class: "progress-message" }, (p.message || "") + pct));
  if (p.fraction != null) {
    cell.append(h("progress", { max: "1", value: String(p.fraction), "aria-label": `${r.slug} progress` }));
  }
  return cell;
}

let openRun = null;
let lastRuns = [];

// A run's detail under the runs table: its timeline (queued, started, ended, with the waits),
// who queued it, its progress and last log lines while it runs, its error. All as text.
function renderRunDetail(runs) {
  const r = runs.find((x) => x.command_id === openRun);
  $("run-detail").hidden = !r;
  if (!r) return;
  $("h-run").textContent = `Run of ${r.slug}`;
  $("run-status").replaceChildren(badge(r.status, statusWords(r)));
  $("run-session").replaceChildren(sessionNames.get(r.graph_session_id) || r.slug, idCopy(r.graph_session_id, `session id of ${r.slug}`));
  $("run-agent").textContent = r.agent.split(":")[0];
  $("run-timeline").replaceChildren(
    ...step("Queued", r.queued_at),
    ...step("Started", r.started_at, r.wait_s == null ? "" : `after ${secs(r.wait_s)} waiting`),
    ...step("Ended", r.finished_at, r.run_s == null ? "" : `after ${secs(r.run_s)} running`));
  const p = r.progress;
  $("run-progress").textContent = p
    ? `${p.message || "—"}${p.fraction == null ? "" : ` (${Math.round(p.fraction * 100)}%)`}, ${new Date(p.updated_at).toLocaleTimeString()}`
    : "—";
  $("run-tail").textContent = p && p.tail && p.tail.length ? p.tail.join("\n") : "—";
  $("run-error").textContent = r.error || "—";
}

function renderRuns(runs) {
  rowsOr("runs", runs.map((r) => h("tr", { "data-run": r.command_id },
    h("td", {}, h("button", {
      type: "button", class: "linklike", "aria-label": `Details of the ${r.slug} run queued ${when(r.queued_at)}`,
      onclick: () => { openRun = r.command_id; renderRunDetail(runs); $("run-detail").scrollIntoView(); },
    }, r.slug)), runStatus(r),
    h("td", {}, r.agent.split(":")[0]), h("td", {}, ago(r.queued_at)), h("td", {}, secs(r.wait_s)),
    h("td", {}, secs(r.run_s)), h("td", {}, r.error || ""),
    h("td", {}, r.status === "queued" || (r.status === "running" && !r.cancel_requested) ? cancelRun(r) : ""))),
  "No Graph run yet. A connected chat starts one with run_graph_session on a session a desktop shares; it shows here as it is queued, runs and ends.");
  lastRuns = runs;
  renderRunDetail(runs);
}

// Cancel a queued or running run, as the chat's cancel_graph_run would; shows its new state.
function cancelRun(r) {
  return h("button", {
    type: "button", class: "danger", "aria-label": `Cancel the ${r.slug} run queued ${when(r.queued_at)}`,
    onclick: () => act("runs-error", async () => {
      if (!confirm(`Cancel the ${r.slug} run? ${r.status === "queued" ? "It never starts." : "Its desktop stops it."}`)) return;
      const now = await api("POST", `/runs/${r.command_id}/cancel`);
      renderRuns(lastRuns.map((x) => (x.command_id === now.command_id ? now : x)));
    }),
  }, "Cancel");
}

// One step of a timeline: what, when (relative, exact on hover), and how long it took.
const step = (what, iso, extra) => (iso ? [h("li", {}, `${what} `, ago(iso), extra ? ` (${extra})` : "")] : []);
const between = (from, to) => (from && to ? secs((new Date(to) - new Date(from)) / 1000) : "");

async function showTask(taskId) {
  openTask = taskId;
  await act("task-error", async () => {
    const t = await api("GET", `/links/${selected}/tasks/${taskId}`);
    if (openTask !== taskId) return;
    $("task-detail").hidden = false;
    $("task-status").textContent = t.label;
    $("task-origin").textContent = origin(t);
    $("task-objective").textContent = t.objective;
    const claimed = t.claim && t.claim.claimed_at;
    $("task-timeline").replaceChildren(
      ...step("Assigned", t.created_at),
      ...step("Claimed", claimed, claimed ? `after ${between(t.created_at, claimed)} waiting` : ""),
      ...step(t.label, t.finished_at, claimed ? `after ${between(claimed, t.finished_at)} working` : ""));
    $("task-claim").textContent = t.claim
      ? `${t.claim.live ? "Held" : "Last held"} until ${when(t.claim.lease_until)}`
      : "Not claimed yet";
    $("task-result").textContent = t.result ?? "—";
    $("task-artifacts").replaceChildren(...(t.artifacts.length ? t.artifacts.map((a) => h("li", {},
      a.download_url ? h("a", { href: a.download_url, download: a.name, rel: "noopener" }, a.name) : a.name,
      ` (${a.content_type}, ${a.size} bytes)`)) : [h("li", {}, "None")]));
    $("cancel-task").hidden = !(t.status === "queued" || t.status === "claimed");
  });
}

// ---- refresh: every cfg.refresh_seconds while visible, paused while hidden, at once on focus --

async function refresh() {
  if (!store.getItem("fc.token")) return;
  await act("global-error", async () => {
    const o = await api("GET", "/overview");
    renderProjects(o.projects);
    renderDevices(o.devices);
    renderLinks(o.links);
    renderRuns(o.runs);
    renderChats(o.chats || []);
    renderHostsSeen(o.hosts || []);
    if (o.version) document.getElementById("server-version").textContent = `foundry-connect ${o.version}`;
    if (selected) {
      const page = await api("GET", `/links/${selected}/tasks?limit=50`);
      renderTasks(page.tasks, page.next_cursor);
      if (openTask) await showTask(openTask);
    }
  });
}

function schedule() {
  clearTimeout(timer);
  if (document.visibilityState === "visible") {
    timer = setTimeout(async () => { await refresh(); schedule(); }, cfg.refresh_seconds * 1000);
  }
}

function selectLink(id) {
  selected = id;
  openTask = null;
  $("task-detail").hidden = true;
  $("subscription-secret").hidden = true;
  keyFor = { text: null, key: null };
  refresh();
}

// ---- pairing a desktop --------------------------------------------------------------------

let pairingCode = null;

async function lookUpPairing(code) {
  const p = await api("GET", `/pairings/${encodeURIComponent(code)}`);
  pairingCode = p.user_code;
  $("pairing-name").textContent = p.name;
  $("pairing-platform").textContent = `${p.os}, ${p.arch}`;
  $("pairing-code").textContent = p.user_code;
  $("pairing-expires").textContent = when(p.expires_at);
  const age = Math.max(0, Math.round((Date.now() - new Date(p.created_at).getTime()) / 1000));
  $("pairing-age").textContent = age < 90 ? `${age} s ago` : `${Math.round(age / 60)} min ago`;
  $("pairing-source").textContent = p.requested_from || "an address the server did not see";
  $("pairing").hidden = p.status !== "pending";
  $("pair-done").textContent = p.status === "pending" ? "" : `This desktop is ${p.status}.`;
}

async function decidePairing(verb) {
  const p = await api("POST", `/pairings/${encodeURIComponent(pairingCode)}/${verb}`, verb === "approve" ? {} : undefined);
  $("pairing").hidden = true;
  $("pair-done").textContent = verb === "approve"
    ? `Approved: "${p.device_name}" finishes pairing within seconds and appears below.`
    : "Refused: that desktop was not paired.";
  store.removeItem("fc.pair");
  await refresh();
}

// ---- actions ------------------------------------------------------------------------------

function wire() {
  $("signin-button").addEventListener("click", startCognito);
  $("signout").addEventListener("click", signOut);
  copyButton("copy-connector", "connector-url");
  copyButton("copy-device-token", "device-token-value");
  copyButton("copy-install", "install-line");
  copyButton("copy-pair", "pair-line");
  copyButton("copy-hello", "hello-line");
  copyButton("copy-run", "run-line");
  $("hello-project").addEventListener("change", helloLine);
  $("pair-form").addEventListener("submit", (ev) => { ev.preventDefault(); act("pair-error", () => lookUpPairing($("pair-code").value)); });
  $("pair-approve").addEventListener("click", () => act("pair-error", () => decidePairing("approve")));
  $("pair-refuse").addEventListener("click", () => act("pair-error", () => decidePairing("refuse")));
  copyButton("copy-secret", "subscription-secret-value");
  copyButton("copy-link-id", "link-id");
  $("project-form").addEventListener("submit", (ev) => { ev.preventDefault(); act("project-error", async () => {
    await api("POST", "/projects", { name: $("project-name").value });
    $("project-name").value = ""; await refresh();
  }); });
  $("device-form").addEventListener("submit", (ev) => { ev.preventDefault(); act("device-error", async () => {
    const d = await api("POST", "/devices", { name: $("device-name").value });
    $("device-name").value = "";
    $("device-token-value").textContent = d.token; // in this page's memory only: gone after a reload
    $("device-token").hidden = false;
    await refresh();
  }); });
  $("link-form").addEventListener("submit", (ev) => { ev.preventDefault(); act("link-error", async () => {
    const l = await api("POST", "/links", { project_id: $("link-project").value, name: $("link-name").value });
    $("link-name").value = "";
    selectLink(l.chat_link_id);
  }); });
  $("subscription-form").addEventListener("submit", (ev) => { ev.preventDefault(); act("subscription-error", async () => {
    const l = await api("PUT", `/links/${selected}/subscription`, { url: $("subscription-url").value });
    $("subscription-url").value = "";
    $("subscription-secret-value").textContent = l.subscription.secret;
    $("subscription-secret").hidden = false;
    await refresh();
  }); });
  $("desktop-tasks-toggle").addEventListener("click", () => act("desktop-tasks-error", async () => {
    const on = $("desktop-tasks-toggle").dataset.on === "1";
    await api(on ? "DELETE" : "PUT", `/links/${selected}/desktop-tasks`, on ? undefined : {}); await refresh();
  }));
  $("unsubscribe").addEventListener("click", () => act("subscription-error", async () => {
    await api("DELETE", `/links/${selected}/subscription`); await refresh();
  }));
  $("assign-form").addEventListener("submit", (ev) => { ev.preventDefault(); act("assign-error", async () => {
    const text = $("objective").value;
    // One key per objective text: a double click or a retry after a timeout sends the same
    // key, so the server answers with the same task instead of making a second one.
    if (keyFor.text !== text) keyFor = { text, key: crypto.randomUUID() };
    await api("POST", `/links/${selected}/tasks`, { objective: text, idempotency_key: keyFor.key });
    await refresh();
  }); });
  $("more-tasks").addEventListener("click", () => act("assign-error", async () => {
    const page = await api("GET", `/links/${selected}/tasks?limit=50&cursor=${encodeURIComponent($("more-tasks").dataset.cursor)}`);
    const rows = [...$("tasks").children];
    renderTasks(page.tasks, page.next_cursor);
    $("tasks").prepend(...rows);
  }));
  $("cancel-task").addEventListener("click", () => act("task-error", async () => {
    if (!confirm("Cancel this task? The chat can no longer complete it.")) return;
    await api("POST", `/links/${selected}/tasks/${openTask}/cancel`);
    await refresh();
  }));
  $("delete-link").addEventListener("click", () => act("delete-link-error", async () => {
    if (!confirm(`Delete the chat link "${$("h-link").textContent}"? Its open tasks are cancelled.`)) return;
    await api("DELETE", `/links/${selected}`);
    selectLink(null);
  }));
  document.addEventListener("visibilitychange", () => { if (document.visibilityState === "visible") refresh(); schedule(); });
  window.addEventListener("focus", () => { refresh(); schedule(); });
}

// Opens what a tool result linked to: the task's detail under its chat link, or the run's row.
async function openLinked() {
  const open = JSON.parse(store.getItem("fc.open") || "null");
  store.removeItem("fc.open");
  if (!open) return;
  if (open.link && open.task) {
    selected = open.link;
    await refresh();
    await showTask(open.task);
    $("task-detail").scrollIntoView();
  } else if (open.run) {
    const row = document.querySelector(`tr[data-run="${CSS.escape(open.run)}"]`);
    if (row) {
      row.setAttribute("aria-current", "true");
      row.classList.add("linked");
      openRun = open.run;
      renderRunDetail(lastRuns);
      row.scrollIntoView();
    } else {
      $("global-error").textContent = "That run is not among the recent runs.";
    }
  }
}

async function main() {
  cfg = await (await fetch("/panel/config.json")).json();
  // `relay pair` prints /panel?pair=CODE: keep the code across a sign-in redirect.
  const query = new URLSearchParams(location.search);
  const pair = query.get("pair");
  if (pair) store.setItem("fc.pair", pair);
  // A tool result's page (`url`): /panel?run=ID or /panel?link=ID&task=ID, kept the same way.
  if (query.get("run") || query.get("task")) {
    store.setItem("fc.open", JSON.stringify({ run: query.get("run"), link: query.get("link"), task: query.get("task") }));
  }
  wire();
  let signedIn = false;
  try {
    signedIn = await signIn();
  } catch (e) {
    showSignIn(e.message);
    return;
  }
  if (!signedIn) return showSignIn();
  $("signin").hidden = true;
  $("content").hidden = false;
  $("signout").hidden = false;
  $("connector-url").textContent = cfg.mcp_url;
  renderHosts();
  renderAddDesktop([]);
  await refresh();
  schedule();
  await openLinked();
  const pending = store.getItem("fc.pair");
  if (pending) {
    $("pair-code").value = pending;
    await act("pair-error", () => lookUpPairing(pending));
    $("pairing").scrollIntoView();
  }
}

main();
