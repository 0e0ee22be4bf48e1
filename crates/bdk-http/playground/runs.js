// The Runs surface (sessions the caller can see, search, open in Chat,
// Trace or Raw), the Trace view (a timeline of turns, steps and tool calls
// with durations taken from event timestamps), the Raw view (the exact
// NDJSON the server recorded) and "Open trace" for a local events.ndjson.

import * as api from "./api.js";
import { renderMarkdown } from "./markdown.js";
import { h, clear, toast, errorText, pretty, fmtMs, fmtTime, copy, empty } from "./ui.js";

export class Runs {
  constructor(root, app) {
    this.root = root;
    this.app = app;
    this.sessions = [];
    this.search = h("input", {
      type: "search",
      id: "runs-search",
      placeholder: "Search by title or session id — Enter opens an id",
      "aria-label": "Search sessions",
      onkeydown: (e) => this.onSearchKey(e),
      oninput: () => this.renderList(),
    });
    this.file = h("input", { type: "file", id: "trace-file", accept: ".ndjson,.jsonl,.json,application/x-ndjson", class: "sr-only", onchange: () => this.openFile() });
    this.list = h("div", { class: "runs-list" });
    this.evalRuns = h("div", { class: "eval-runs" });
    this.count = h("span", { class: "muted" });
    clear(this.root,
      h("div", { class: "page" },
        h("div", { class: "page-head" },
          h("div", {}, h("h1", {}, "Runs"), h("p", { class: "muted" }, "Sessions you can see, newest first. ", this.count)),
          h("div", { class: "row" },
            h("label", { class: "btn ghost", for: "trace-file", tabindex: "0", onkeydown: (e) => (e.key === "Enter" || e.key === " ") && this.file.click() }, "Open trace…"),
            this.file,
            h("button", { class: "btn ghost", type: "button", onclick: () => this.load() }, "Refresh"))),
        h("div", { class: "searchbar" }, this.search),
        this.list,
        this.evalRuns));
  }

  async load() {
    try {
      const r = await api.get("/v1/sessions");
      this.sessions = r.sessions || [];
      this.renderList();
    } catch (e) {
      clear(this.list, empty(errorText(e)));
    }
    this.loadEvalRuns();
  }

  /** Recent eval runs, when the server has the eval routes. */
  async loadEvalRuns() {
    let runs = [];
    try {
      runs = ((await api.get("/v1/dev/evals/runs")).runs || []).map((r) => (r.run ? r.run : r));
    } catch {
      // No eval routes (or no access): the section stays away.
    }
    if (!runs.length) {
      clear(this.evalRuns);
      return;
    }
    clear(this.evalRuns,
      h("h2", { class: "section-title" }, "Eval runs"),
      h("table", { class: "table" },
        h("tbody", {}, runs.map((run) => {
          const s = run.summary || {};
          return h("tr", { dataset: { runId: run.runId } },
            h("td", {}, h("a", { href: `#/evals/${encodeURIComponent(run.runId)}`, class: "mono" }, run.runId)),
            h("td", {}, h("span", { class: `pill ${run.status}` }, run.status)),
            h("td", { class: "muted" }, `${s.passed ?? 0} passed · ${s.failed ?? 0} failed · ${s.total ?? 0} total`),
            h("td", { class: "muted nowrap" }, fmtTime(run.startedAt)));
        }))));
  }

  filtered() {
    const q = this.search.value.trim().toLowerCase();
    if (!q) return this.sessions;
    return this.sessions.filter((s) => s.sessionId.toLowerCase().includes(q) || (s.title || "").toLowerCase().includes(q));
  }

  renderList() {
    const rows = this.filtered();
    this.count.textContent = `${this.sessions.length} session${this.sessions.length === 1 ? "" : "s"}`;
    if (!rows.length) {
      clear(this.list, empty(this.sessions.length ? "No session matches." : "No sessions yet. Start one in Chat."));
      return;
    }
    const enc = encodeURIComponent;
    clear(this.list,
      h("table", { class: "table" },
        h("thead", {}, h("tr", {}, h("th", {}, "Session"), h("th", { class: "hide-narrow" }, "Channel"), h("th", { class: "hide-narrow" }, "Principal"), h("th", {}, "Updated"), h("th", {}, ""))),
        h("tbody", {},
          rows.map((s) =>
            h("tr", { dataset: { sessionId: s.sessionId } },
              h("td", {},
                h("a", { href: `#/chat/${enc(s.sessionId)}`, class: "strong" }, s.title || s.sessionId),
                s.title ? h("div", { class: "mono muted small" }, s.sessionId) : null),
              h("td", { class: "hide-narrow" }, h("span", { class: "chip" }, s.channel), " ", h("span", { class: "muted small" }, s.mode)),
              h("td", { class: "hide-narrow muted" }, s.principal || "—"),
              h("td", { class: "muted nowrap" }, fmtTime(s.updatedAt)),
              h("td", { class: "actions nowrap" },
                h("a", { class: "btn ghost small", href: `#/chat/${enc(s.sessionId)}` }, "Chat"),
                h("a", { class: "btn ghost small", href: `#/trace/${enc(s.sessionId)}` }, "Trace"),
                h("a", { class: "btn ghost small", href: `#/raw/${enc(s.sessionId)}` }, "Raw")))))));
  }

  onSearchKey(e) {
    if (e.key !== "Enter") return;
    const q = this.search.value.trim();
    if (!q) return;
    const rows = this.filtered();
    const exact = this.sessions.find((s) => s.sessionId === q);
    const id = exact ? exact.sessionId : /^ses_/.test(q) ? q : rows[0]?.sessionId;
    if (id) this.app.navigate(`#/chat/${encodeURIComponent(id)}`);
  }

  async openFile() {
    const f = this.file.files && this.file.files[0];
    if (!f) return;
    try {
      const text = await f.text();
      const events = api.parseNdjson(text);
      this.app.showTrace({ title: f.name, events, local: true });
    } catch (e) {
      toast(`Cannot read ${f.name}: ${e.message}`, "error");
    } finally {
      this.file.value = "";
    }
  }
}

/** Renders a session's events as a timeline. */
function compactValue(v) {
  return typeof v === "string" ? v : JSON.stringify(v);
}

export function renderTrace(root, { title, sessionId, events, local }) {
  const enc = encodeURIComponent;
  const head = h("div", { class: "page-head" },
    h("div", {},
      h("h1", {}, "Trace ", h("span", { class: "muted" }, title || sessionId)),
      h("p", { class: "muted" }, local ? "Loaded from a local file; nothing was sent to the server." : `${events.length} events`)),
    sessionId && !local
      ? h("div", { class: "row" },
          h("a", { class: "btn ghost", href: `#/chat/${enc(sessionId)}` }, "Chat"),
          h("a", { class: "btn ghost", href: `#/raw/${enc(sessionId)}` }, "Raw"))
      : null);
  if (!events.length) {
    clear(root, h("div", { class: "page" }, head, empty("No events.")));
    return;
  }
  const at = (e) => new Date(e.at).getTime();
  const t0 = at(events[0]);
  const tEnd = Math.max(...events.map(at).filter((x) => !Number.isNaN(x)), t0 + 1);

  // Fold the event list into spans: turns, steps and tool calls.
  const turns = [];
  let turn = null;
  const steps = new Map();
  const calls = new Map();
  // Messages wait for the turn that answers them.
  let waiting = [];
  for (const e of events) {
    const d = e.data || {};
    switch (e.type) {
      case "message.received":
      case "nudge.delivered":
        if (turn && turn.end === null && e.type === "nudge.delivered") turn.items.push({ kind: "message", label: d.message, start: at(e), event: e });
        else waiting.push({ kind: "message", label: d.message, start: at(e), event: e });
        break;
      case "turn.started":
        turn = { id: e.turnId, start: at(e), end: null, status: "running", items: waiting, event: e, model: d.model };
        waiting = [];
        turns.push(turn);
        break;
      case "step.started": {
        const s = { kind: "step", label: `Step ${d.step}`, start: at(e), end: null, event: e };
        steps.set(`${e.turnId}:${d.step}`, s);
        turn?.items.push(s);
        break;
      }
      case "step.completed": {
        const s = steps.get(`${e.turnId}:${d.step}`);
        if (s) {
          s.end = at(e);
          s.duration = d.durationMs;
          s.detail = d.usage ? `${d.usage.inputTokens} in / ${d.usage.outputTokens} out` : d.finishReason;
        }
        break;
      }
      case "actions.requested":
        for (const a of d.actions || []) {
          const c = { kind: "tool", label: a.name, start: at(e), end: null, input: a.input, event: e };
          calls.set(a.callId, c);
          turn?.items.push(c);
        }
        break;
      case "action.approval_requested": {
        const c = calls.get(d.callId);
        if (c) c.approval = "waiting for approval";
        break;
      }
      case "action.approval_resolved": {
        const c = calls.get(d.callId);
        if (c) c.approval = d.approved ? `approved${d.by ? ` by ${d.by}` : ""}` : "denied";
        break;
      }
      case "action.result": {
        const c = calls.get(d.callId);
        if (c) {
          c.end = at(e);
          c.duration = d.durationMs;
          c.error = d.isError;
          c.output = d.output;
        }
        break;
      }
      case "message.completed":
        turn?.items.push({ kind: "reply", label: d.text, start: at(e), event: e });
        break;
      case "reasoning.completed":
        turn?.items.push({ kind: "reasoning", label: d.text, start: at(e), event: e });
        break;
      case "gate.verdict": {
        // A result gate's verdict on a final reply: accept, reject (the
        // model repairs) or fail; `error` when the gate itself broke.
        const what = d.feedback || d.message || (d.action !== undefined ? compactValue(d.action) : "");
        turn?.items.push({
          kind: "gate",
          label: `${d.gate}: ${d.verdict} (attempt ${d.attempt} of ${d.maxAttempts})${what ? ` · ${what}` : ""}`,
          detail: d.error ? `gate error: ${d.error}` : undefined,
          error: d.verdict !== "accept" || !!d.error,
          start: at(e),
          end: at(e),
          duration: d.durationMs,
          event: e,
        });
        break;
      }
      case "turn.completed":
      case "turn.failed":
        if (turn) {
          turn.end = at(e);
          turn.status = e.type === "turn.completed" ? "completed" : d.status;
          turn.duration = d.durationMs ?? turn.end - turn.start;
          turn.failure = d.message;
          turn.usage = d.usage;
        }
        break;
      default:
        break;
    }
  }
  for (const m of waiting) turns.push({ pending: m.event, items: [] });
  const span = Math.max(tEnd - t0, 1);
  const bar = (start, end, cls) => {
    const left = ((start - t0) / span) * 100;
    const width = Math.max((((end ?? tEnd) - start) / span) * 100, 0.6);
    const b = h("div", { class: `bar ${cls}` });
    b.style.left = `${Math.min(left, 99.4)}%`;
    b.style.width = `${Math.min(width, 100 - Math.min(left, 99.4))}%`;
    return h("div", { class: "track" }, b);
  };
  const row = (item) => {
    const duration = item.duration ?? (item.end ? item.end - item.start : undefined);
    const label = item.kind === "reply" || item.kind === "reasoning" || item.kind === "message" ? (item.label || "").slice(0, 140) : item.label;
    const body = [];
    if (item.input !== undefined) body.push(h("div", { class: "label" }, "Arguments"), h("pre", {}, pretty(item.input)));
    if (item.output !== undefined) body.push(h("div", { class: "label" }, "Output"), h("pre", {}, pretty(item.output)));
    if (item.kind === "reply" || item.kind === "reasoning") {
      const md = h("div", { class: "md" });
      md.innerHTML = renderMarkdown(item.label || "");
      body.push(md);
    }
    body.push(h("details", { class: "fold" }, h("summary", {}, "Event"), h("pre", {}, pretty(item.event))));
    return h("details", { class: `trace-row ${item.kind}${item.error ? " error" : ""}` },
      h("summary", {},
        h("span", { class: "offset mono" }, `+${fmtMs(item.start - t0)}`),
        h("span", { class: `kind ${item.kind}` }, item.kind),
        h("span", { class: "what" }, label, item.approval ? h("span", { class: "muted" }, ` · ${item.approval}`) : null, item.detail ? h("span", { class: "muted" }, ` · ${item.detail}`) : null),
        h("span", { class: "dur mono" }, duration !== undefined ? fmtMs(duration) : item.end === null ? "…" : ""),
        item.kind === "step" || item.kind === "tool" ? bar(item.start, item.end, item.kind + (item.error ? " error" : "")) : h("span", { class: "track" })),
      h("div", { class: "trace-detail" }, body));
  };
  const blocks = turns.map((t) => {
    if (!t.id) return h("div", { class: "trace-turn pending" }, h("div", { class: "turn-head" }, h("strong", {}, "Message"), " ", (t.pending.data || {}).message || ""));
    const u = t.usage || {};
    return h("div", { class: `trace-turn ${t.status}`, dataset: { turn: t.id } },
      h("div", { class: "turn-head" },
        h("strong", {}, "Turn"), h("span", { class: "mono muted small" }, t.id),
        h("span", { class: `pill ${t.status}` }, t.status),
        h("span", { class: "muted" }, [fmtMs(t.duration), t.model, t.usage ? `${u.inputTokens} in / ${u.outputTokens} out` : t.usage === null ? "tokens unknown" : ""].filter(Boolean).join(" · ")),
        bar(t.start, t.end, `turn ${t.status}`)),
      t.failure && t.status !== "completed" ? h("p", { class: "failure-text" }, t.failure) : null,
      h("div", { class: "trace-rows" }, t.items.map(row)));
  });
  clear(root, h("div", { class: "page trace" }, head, h("div", { class: "trace-body" }, blocks.length ? blocks : empty("No turns in these events."))));
}

/** The exact NDJSON of a session. */
export async function renderRaw(root, sessionId) {
  const enc = encodeURIComponent;
  const pre = h("pre", { class: "raw", id: "raw-ndjson", tabindex: "0" }, "Loading…");
  let text = "";
  const download = h("button", { class: "btn ghost", type: "button", onclick: () => {
    const blob = new Blob([text], { type: "application/x-ndjson" });
    const a = h("a", { href: URL.createObjectURL(blob), download: `${sessionId}.events.ndjson` });
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  } }, "Download");
  clear(root, h("div", { class: "page" },
    h("div", { class: "page-head" },
      h("div", {}, h("h1", {}, "Raw ", h("span", { class: "muted" }, sessionId)), h("p", { class: "muted" }, "The events exactly as the server recorded them (", h("code", {}, "GET /v1/session/:id/events"), ").")),
      h("div", { class: "row" },
        h("a", { class: "btn ghost", href: `#/chat/${enc(sessionId)}` }, "Chat"),
        h("a", { class: "btn ghost", href: `#/trace/${enc(sessionId)}` }, "Trace"),
        h("button", { class: "btn ghost", type: "button", onclick: () => copy(text) }, "Copy"),
        download)),
    pre));
  try {
    text = await api.text(`/v1/session/${enc(sessionId)}/events`);
    pre.textContent = text || "(no events)";
  } catch (e) {
    pre.textContent = errorText(e);
    pre.classList.add("error");
  }
}
