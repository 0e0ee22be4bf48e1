// The Chat surface: start a session, follow its NDJSON stream, render turns
// as they happen (text and reasoning as Markdown, tool calls inline, parked
// approvals with Approve / Deny), send follow-ups with the rotating
// continuation token, stop a running turn, and reconnect after a dropped
// connection from the last index received, so nothing repeats.

import * as api from "./api.js";
import { renderBlocks } from "./blocks.js";
import { renderMarkdown } from "./markdown.js";
import { h, clear, toast, errorText, pretty, fmtMs, copy } from "./ui.js";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class Chat {
  constructor(root, app) {
    this.app = app;
    this.root = root;
    this.commands = [];
    this.suggestIndex = 0;
    this.build();
    this.reset(null);
  }

  build() {
    this.titleEl = h("h1", { class: "chat-title" }, "New conversation");
    this.idEl = h("button", { class: "chip mono", type: "button", title: "Copy the session id", hidden: true, onclick: () => copy(this.sessionId) });
    this.connEl = h("span", { class: "conn", hidden: true });
    this.traceBtn = h("a", { class: "btn ghost", hidden: true }, "Trace");
    this.rawBtn = h("a", { class: "btn ghost", hidden: true }, "Raw");
    const newBtn = h("button", { class: "btn ghost", type: "button", onclick: () => this.app.navigate("#/chat") }, "New chat");
    this.transcript = h("div", { class: "transcript", id: "transcript", role: "log", "aria-live": "polite" });
    this.input = h("textarea", {
      id: "composer-input",
      rows: 1,
      placeholder: "Message the agent…",
      "aria-label": "Message",
    });
    this.suggest = h("ul", { class: "suggest", role: "listbox", hidden: true });
    this.sendBtn = h("button", { class: "btn primary", type: "submit", id: "send" }, "Send");
    this.stopBtn = h("button", { class: "btn danger", type: "button", id: "stop", hidden: true, onclick: () => this.stop() }, "Stop");
    const form = h("form", { class: "composer", onsubmit: (e) => (e.preventDefault(), this.submit()) },
      h("div", { class: "composer-box" }, this.suggest, this.input, h("div", { class: "composer-actions" }, this.stopBtn, this.sendBtn)),
      h("p", { class: "hint" }, "Enter sends, Shift+Enter starts a new line, Esc stops a running turn, / lists the channel commands."),
    );
    this.input.addEventListener("keydown", (e) => this.onKey(e));
    this.input.addEventListener("input", () => {
      this.autosize();
      this.updateSuggest();
    });
    clear(this.root,
      h("div", { class: "chat" },
        h("div", { class: "chat-head" },
          h("div", { class: "chat-heading" }, this.titleEl, this.idEl, this.connEl),
          h("div", { class: "chat-tools" }, this.traceBtn, this.rawBtn, newBtn)),
        this.transcript,
        form));
  }

  /** Forgets the current conversation; `id` opens another one. */
  reset(id) {
    // Every conversation has its own generation; loops of an older one stop.
    this.gen = (this.gen || 0) + 1;
    this.controller?.abort();
    this.sessionId = id;
    this.token = undefined;
    this.lastIndex = -1;
    this.turns = new Map();
    this.calls = new Map();
    this.current = null;
    this.setBusy(false);
    clear(this.transcript);
    this.titleEl.textContent = id ? "Conversation" : "New conversation";
    this.idEl.hidden = !id;
    this.idEl.textContent = id || "";
    this.traceBtn.hidden = this.rawBtn.hidden = !id;
    if (id) {
      this.traceBtn.href = `#/trace/${encodeURIComponent(id)}`;
      this.rawBtn.href = `#/raw/${encodeURIComponent(id)}`;
    }
    this.setConn(null);
    if (!id) {
      this.transcript.append(
        h("div", { class: "welcome" },
          h("h2", {}, `Talk to ${this.app.meta?.agent || "the agent"}`),
          h("p", {}, this.app.meta?.description || "Send a message to start a session."),
        ),
      );
    }
  }

  /** Opens a session; `token` is its continuation token when known. */
  async open(id, token) {
    if (id === this.sessionId) return;
    this.reset(id);
    const gen = this.gen;
    this.token = token;
    this.follow();
    try {
      const list = await api.get("/v1/sessions");
      const found = (list.sessions || []).find((s) => s.sessionId === id);
      if (found && gen === this.gen) {
        this.token ??= found.continuationToken;
        if (found.title) this.titleEl.textContent = found.title;
      }
    } catch {
      /* the stream reports access problems */
    }
  }

  setConn(state) {
    this.connEl.hidden = !state;
    this.connEl.className = `conn ${state || ""}`;
    this.connEl.textContent = { live: "live", reconnecting: "reconnecting…", ended: "ended", error: "offline" }[state] || "";
  }

  /** Follows the stream until the conversation changes, reconnecting as needed. */
  async follow() {
    const id = this.sessionId;
    const gen = this.gen;
    let delay = 300;
    while (this.gen === gen) {
      const controller = new AbortController();
      this.controller = controller;
      try {
        this.setConn("live");
        await api.stream(id, this.lastIndex + 1, (ev) => this.gen === gen && this.apply(ev), controller.signal);
        // The server ended the stream (deleted session or shutdown).
        if (this.gen === gen) this.setConn("reconnecting");
      } catch (e) {
        if (this.gen !== gen) return;
        if (e instanceof api.ApiError && e.status >= 400 && e.status < 500) {
          this.setConn("error");
          this.note(errorText(e), "error");
          if (e.status === 401) this.app.banner("This server needs a bearer token: paste it in the navbar.");
          return;
        }
        this.setConn("reconnecting");
      }
      if (this.gen !== gen) return;
      await sleep(delay);
      delay = Math.min(delay * 2, 5000);
    }
  }

  /** Drops the live connection as a network failure would (the app reconnects). */
  dropConnection() {
    this.controller?.abort();
  }

  note(text, kind = "info") {
    this.transcript.append(h("div", { class: `note ${kind}` }, text));
    this.scroll();
  }

  scroll() {
    const t = this.transcript;
    if (t.scrollHeight - t.scrollTop - t.clientHeight < 160) t.scrollTop = t.scrollHeight;
  }

  setBusy(busy) {
    this.busy = busy;
    this.stopBtn.hidden = !busy;
    this.root.classList.toggle("busy", busy);
  }

  turn(ev) {
    let t = this.turns.get(ev.turnId);
    if (!t) {
      const body = h("div", { class: "parts" });
      const meta = h("div", { class: "turn-meta" });
      const el = h("div", { class: "msg assistant", dataset: { turn: ev.turnId || "" } },
        h("div", { class: "avatar", "aria-hidden": "true" }, "AI"),
        h("div", { class: "bubble" }, body, meta));
      this.transcript.append(el);
      t = { el, body, meta, text: null, reasoning: null };
      this.turns.set(ev.turnId, t);
    }
    return t;
  }

  apply(ev) {
    if (typeof ev.index !== "number" || ev.index <= this.lastIndex) return; // already shown
    this.lastIndex = ev.index;
    const d = ev.data || {};
    switch (ev.type) {
      case "session.started":
        if (d.title) this.titleEl.textContent = d.title;
        if (d.channel && d.channel !== "http") this.note(`Started by the ${d.channel} channel (${d.mode || "chat"})`);
        break;
      case "message.received":
      case "nudge.delivered":
        this.transcript.append(
          h("div", { class: "msg user" },
            h("div", { class: "bubble" }, h("div", { class: "md", text: d.message || "" }),
              ev.type === "nudge.delivered" ? h("div", { class: "turn-meta" }, "picked up by the running turn") : null)),
        );
        break;
      case "turn.queued":
        this.note(`Queued behind the running turn (position ${d.position}).`);
        break;
      case "turn.started":
        this.turn(ev);
        this.setBusy(true);
        break;
      case "reasoning.appended": {
        const t = this.turn(ev);
        if (!t.reasoning) {
          const body = h("div", { class: "md" });
          const el = h("details", { class: "part reasoning", open: true }, h("summary", {}, "Reasoning"), body);
          t.body.append(el);
          t.reasoning = { el, body, raw: "" };
          t.text = null;
        }
        t.reasoning.raw += d.delta || "";
        t.reasoning.body.innerHTML = renderMarkdown(t.reasoning.raw);
        break;
      }
      case "reasoning.completed": {
        const t = this.turn(ev);
        if (t.reasoning) {
          t.reasoning.raw = d.text ?? t.reasoning.raw;
          t.reasoning.body.innerHTML = renderMarkdown(t.reasoning.raw);
          t.reasoning.el.open = false;
          t.reasoning = null;
        }
        break;
      }
      case "message.appended": {
        const t = this.turn(ev);
        if (!t.text) {
          const el = h("div", { class: "part text md" });
          t.body.append(el);
          t.text = { el, raw: "" };
        }
        t.text.raw += d.delta || "";
        t.text.el.innerHTML = renderMarkdown(t.text.raw);
        break;
      }
      case "message.completed": {
        const t = this.turn(ev);
        if (t.text) {
          t.text.raw = d.text ?? t.text.raw;
          t.text.el.innerHTML = renderMarkdown(t.text.raw);
          t.text = null;
        } else if (d.text) {
          t.body.append(h("div", { class: "part text md" }));
          t.body.lastChild.innerHTML = renderMarkdown(d.text);
        }
        break;
      }
      case "actions.requested": {
        const t = this.turn(ev);
        t.text = null;
        for (const a of d.actions || []) t.body.append(this.toolCard(a.callId, a.name, a.input));
        break;
      }
      case "action.tool_retry": {
        const c = this.calls.get(d.callId);
        if (c) c.status.textContent = `retry ${d.attempt}: ${d.error}`;
        break;
      }
      case "action.approval_requested":
        this.awaitApproval(ev, d);
        break;
      case "action.approval_resolved": {
        const c = this.calls.get(d.callId);
        if (c) {
          c.actions.replaceChildren();
          c.el.classList.remove("awaiting");
          c.el.classList.add(d.approved ? "running" : "error");
          c.status.textContent = d.approved
            ? `approved${d.by ? ` by ${d.by}` : ""}`
            : `denied${d.by ? ` by ${d.by}` : ""}${d.reason ? `: ${d.reason}` : ""}`;
        }
        break;
      }
      case "action.result": {
        let c = this.calls.get(d.callId);
        if (!c) {
          this.turn(ev).body.append(this.toolCard(d.callId, d.name, undefined));
          c = this.calls.get(d.callId);
        }
        c.el.classList.remove("running", "awaiting");
        c.el.classList.add(d.isError ? "error" : "ok");
        c.status.textContent = `${d.isError ? "error" : "done"} · ${fmtMs(d.durationMs)}${d.stubbed ? " · stubbed" : ""}`;
        c.output.hidden = false;
        c.output.open = !!d.isError;
        const blocks = renderBlocks(d.content);
        c.output.querySelector(".blocks")?.remove();
        c.output.querySelector("pre").hidden = !!blocks;
        c.output.querySelector("pre").textContent = pretty(d.output);
        if (blocks) {
          c.output.append(blocks);
          c.output.open = true;
        }
        break;
      }
      case "subagent.called": {
        const t = this.turn(ev);
        const c = this.calls.get(d.callId);
        if (!c) t.body.append(this.toolCard(d.callId, `subagent ${d.name}`, { prompt: d.prompt }));
        break;
      }
      case "subagent.completed": {
        const c = this.calls.get(d.callId);
        if (c) c.status.textContent = `${c.status.textContent} · subagent ${d.isError ? "failed" : "replied"}`;
        break;
      }
      case "gate.verdict": {
        const what = d.feedback || d.message || (d.action === undefined ? "" : typeof d.action === "string" ? d.action : JSON.stringify(d.action));
        this.turn(ev).body.append(h("div", { class: `part gate ${d.verdict}${d.error ? " broken" : ""}` },
          h("strong", {}, `Gate ${d.gate}: ${d.verdict}`),
          ` (attempt ${d.attempt} of ${d.maxAttempts})`,
          what ? ` · ${what}` : "",
          d.error ? h("span", { class: "muted" }, ` · gate error: ${d.error}`) : null));
        this.turn(ev).text = null;
        break;
      }
      case "artifact.tagged":
        this.turn(ev).body.append(h("div", { class: "part artifact" }, `Artifact ${d.kind}: `, h("code", {}, d.path || d.artifactId)));
        break;
      case "turn.completed": {
        const t = this.turn(ev);
        const u = d.usage;
        // A null usage is unknown (the server reported none), not zero.
        const tokens = u ? `${u.inputTokens ?? 0} in / ${u.outputTokens ?? 0} out tokens` : "tokens unknown";
        t.meta.textContent = [fmtMs(d.durationMs), d.model, tokens, `${d.steps} step${d.steps === 1 ? "" : "s"}`]
          .filter(Boolean)
          .join(" · ");
        this.setBusy(false);
        break;
      }
      case "turn.failed": {
        const t = this.turn(ev);
        t.el.classList.add(d.status === "cancelled" ? "cancelled" : "failed");
        t.body.append(h("div", { class: `part failure ${d.status}` }, d.status === "cancelled" ? "Stopped." : `Turn ${d.status}: ${d.message}`));
        for (const c of this.calls.values()) {
          if (c.el.classList.contains("running") || c.el.classList.contains("awaiting")) {
            c.el.classList.remove("running", "awaiting");
            c.actions.replaceChildren();
            c.status.textContent = "not finished";
          }
        }
        this.setBusy(false);
        break;
      }
      case "session.completed":
        this.note("The session is complete.");
        break;
      case "session.failed":
        this.note(`The session failed: ${d.message}`, "error");
        break;
      default:
        break;
    }
    this.scroll();
  }

  toolCard(callId, name, input) {
    const status = h("span", { class: "tool-status" }, "running…");
    const output = h("details", { class: "tool-output", hidden: true }, h("summary", {}, "Output"), h("pre", {}));
    const actions = h("div", { class: "tool-actions" });
    const el = h("div", { class: "part tool running", dataset: { callId } },
      h("div", { class: "tool-head" }, h("span", { class: "tool-icon", "aria-hidden": "true" }, "⚙"), h("span", { class: "tool-name" }, name), status),
      input === undefined ? null : h("pre", { class: "tool-args" }, compact(input)),
      actions,
      output);
    this.calls.set(callId, { el, status, output, actions });
    return el;
  }

  awaitApproval(ev, d) {
    let c = this.calls.get(d.callId);
    if (!c) {
      this.turn(ev).body.append(this.toolCard(d.callId, d.name, d.input));
      c = this.calls.get(d.callId);
    }
    c.el.classList.remove("running");
    c.el.classList.add("awaiting");
    c.status.textContent = "waiting for approval";
    const decide = async (decision) => {
      for (const b of c.actions.querySelectorAll("button")) b.disabled = true;
      try {
        await api.post(`/v1/session/${encodeURIComponent(this.sessionId)}/approvals/${encodeURIComponent(d.callId)}`, { decision });
      } catch (e) {
        toast(errorText(e), "error");
        for (const b of c.actions.querySelectorAll("button")) b.disabled = false;
      }
    };
    c.actions.replaceChildren(
      h("button", { class: "btn primary small", type: "button", onclick: () => decide("approve") }, "Approve"),
      h("button", { class: "btn ghost small", type: "button", onclick: () => decide("deny") }, "Deny"),
    );
  }

  autosize() {
    this.input.style.height = "auto";
    this.input.style.height = `${Math.min(this.input.scrollHeight, 240)}px`;
  }

  // --- slash commands -----------------------------------------------------

  setCommands(commands) {
    this.commands = commands;
  }

  matches() {
    const v = this.input.value;
    if (!v.startsWith("/") || /\s/.test(v)) return [];
    const all = [{ name: "help", description: "List the commands" }, ...this.commands];
    return all.filter((c) => `/${c.name}`.startsWith(v));
  }

  updateSuggest() {
    const list = this.matches();
    this.suggest.hidden = list.length === 0;
    this.suggestIndex = Math.min(this.suggestIndex, Math.max(list.length - 1, 0));
    this.suggest.replaceChildren(
      ...list.map((c, i) =>
        h("li", {
          role: "option",
          class: i === this.suggestIndex ? "active" : "",
          "aria-selected": i === this.suggestIndex ? "true" : "false",
          onmousedown: (e) => (e.preventDefault(), this.complete(c)),
        }, h("span", { class: "mono" }, `/${c.name}`), c.hint ? h("span", { class: "muted" }, ` ${c.hint}`) : null, h("span", { class: "muted desc" }, c.description || "")),
      ),
    );
  }

  complete(c) {
    this.input.value = `/${c.name} `;
    this.suggest.hidden = true;
    this.input.focus();
  }

  onKey(e) {
    const list = this.suggest.hidden ? [] : this.matches();
    if (list.length) {
      if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        e.preventDefault();
        this.suggestIndex = (this.suggestIndex + (e.key === "ArrowDown" ? 1 : list.length - 1)) % list.length;
        this.updateSuggest();
        return;
      }
      if (e.key === "Tab" || (e.key === "Enter" && !e.shiftKey && list[this.suggestIndex] && this.input.value !== `/${list[this.suggestIndex].name}`)) {
        e.preventDefault();
        this.complete(list[this.suggestIndex]);
        return;
      }
    }
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      this.submit();
    } else if (e.key === "Escape") {
      // Handled here; the page-wide Esc handler skips prevented events.
      e.preventDefault();
      if (!this.suggest.hidden) this.suggest.hidden = true;
      else if (this.busy) this.stop();
    }
  }

  async submit() {
    const message = this.input.value.trim();
    if (!message) return;
    if (message.startsWith("/")) {
      const handled = await this.slash(message);
      if (handled) return;
    }
    this.sendBtn.disabled = true;
    try {
      if (!this.sessionId) {
        const r = await api.post("/v1/session", { message });
        this.input.value = "";
        this.autosize();
        history.replaceState(null, "", `#/chat/${encodeURIComponent(r.sessionId)}`);
        this.open(r.sessionId, r.continuationToken);
      } else {
        const body = { message };
        if (this.token) body.continuationToken = this.token;
        const r = await api.post(`/v1/session/${encodeURIComponent(this.sessionId)}`, body);
        this.token = r.continuationToken;
        this.input.value = "";
        this.autosize();
      }
    } catch (e) {
      if (e.code === "stale_continuation_token") this.token = undefined;
      toast(errorText(e), "error");
    } finally {
      this.sendBtn.disabled = false;
      this.input.focus();
    }
  }

  async stop() {
    if (!this.sessionId) return;
    this.stopBtn.disabled = true;
    try {
      const r = await api.post(`/v1/session/${encodeURIComponent(this.sessionId)}/stop`, {});
      if (!r.stopped) toast("No turn was running.");
    } catch (e) {
      toast(errorText(e), "error");
    } finally {
      this.stopBtn.disabled = false;
    }
  }

  async slash(text) {
    const [word, ...rest] = text.split(/\s+/);
    const name = word.slice(1);
    const arg = text.slice(word.length).trim();
    if (name === "help") {
      this.input.value = "";
      const lines = this.commands.length
        ? this.commands.map((c) => h("li", {}, h("code", {}, `/${c.name}${c.hint ? ` ${c.hint}` : ""}`), ` ${c.description || ""}`))
        : [h("li", {}, "This agent has no channel routes that take commands.")];
      this.transcript.append(h("div", { class: "note help" }, h("strong", {}, "Commands"), h("ul", {}, lines), h("p", { class: "muted" }, "Each command calls a channel route; its session opens here.")));
      this.scroll();
      return true;
    }
    const cmd = this.commands.find((c) => c.name === name);
    if (!cmd) return false; // an ordinary message that starts with "/"
    void rest;
    this.sendBtn.disabled = true;
    try {
      const body = cmd.body(arg);
      const r = await api.call(cmd.method, cmd.path, body);
      this.input.value = "";
      if (r && r.sessionId) {
        toast(`/${cmd.name}: ${r.created ? "started" : "continued"} ${r.sessionId}`);
        this.app.navigate(`#/chat/${encodeURIComponent(r.sessionId)}`);
      } else {
        toast(`/${cmd.name}: accepted`);
      }
    } catch (e) {
      toast(errorText(e), "error");
    } finally {
      this.sendBtn.disabled = false;
    }
    return true;
  }
}

/** Arguments on one line when they are short, indented otherwise. */
function compact(value) {
  const line = JSON.stringify(value);
  return line && line.length <= 90 ? line : pretty(value);
}

/** One declared channel route, from `/v1/info` ("POST /path" or an object). */
export function parseRoute(r) {
  if (typeof r === "string") {
    const [method, ...rest] = r.trim().split(/\s+/);
    return { method: (method || "POST").toUpperCase(), path: rest.join(" ") || "/" };
  }
  return { method: String(r.method || "POST").toUpperCase(), path: r.path || "/", description: r.description };
}

/** The URL path of a channel route. */
export function routePath(channel, path) {
  return `/v1/channels/${channel}${path && path !== "/" ? path : ""}`;
}

/**
 * Slash commands from the channel routes of `/v1/info`: every POST, PUT or
 * PATCH route without path parameters. `/<channel>` for the channel's own
 * URL, `/<channel>-<path>` below it. The argument becomes the JSON body
 * when it starts with "{", otherwise `{"text": argument}`.
 */
export function commandsFrom(info) {
  const out = [];
  for (const ch of info.channels || []) {
    for (const raw of ch.routes || []) {
      const r = parseRoute(raw);
      if (!["POST", "PUT", "PATCH"].includes(r.method) || r.path.includes("{")) continue;
      const sub = r.path !== "/" ? r.path.replace(/^\//, "").replaceAll("/", "-") : "";
      const path = routePath(ch.name, r.path);
      out.push({
        name: sub ? `${ch.name}-${sub}` : ch.name,
        method: r.method,
        path,
        description: r.description || `${r.method} ${path}`,
        hint: "<text>",
        body: (arg) => (arg.startsWith("{") ? JSON.parse(arg) : arg ? { text: arg } : {}),
      });
    }
  }
  return out;
}
