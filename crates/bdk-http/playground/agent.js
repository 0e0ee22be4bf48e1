// The Agent surface: what discovery found (GET /v1/info): model, tools with
// their source (manifest, native, mcp:<connection>) and schemas, skills, subagents, MCP connections and their errors,
// channels with a "Try" form per route, hooks, schedules (dispatch under
// --dev), reminders (fire under --dev), diagnostics, and under `bdk dev`
// how the last reload went.

import * as api from "./api.js";
import { parseRoute, routePath } from "./chat.js";
import { h, clear, toast, errorText, pretty, copy, empty, fmtTime } from "./ui.js";

const TRY_KEY = "bdk.playground.try.";

export class Agent {
  constructor(root, app) {
    this.root = root;
    this.app = app;
    this.dialog = null;
  }

  async load() {
    let info;
    try {
      info = await this.app.info(true);
    } catch (e) {
      clear(this.root, h("div", { class: "page" }, empty(errorText(e))));
      return;
    }
    const dev = !!this.app.meta?.dev;
    const section = (title, count, body, id) =>
      h("section", { class: "card", id }, h("div", { class: "card-head" }, h("h2", {}, title), h("span", { class: "count" }, String(count))), body);
    const list = (items, render, none) => (items && items.length ? h("ul", { class: "items" }, items.map(render)) : h("p", { class: "muted" }, none));

    const tools = section("Tools", (info.tools || []).length, list(info.tools, (t) =>
      h("li", {},
        h("div", { class: "item-head" }, h("span", { class: "mono strong" }, t.name),
          t.title ? h("span", {}, t.title) : null,
          h("span", { class: "chip" }, t.effect || "effect?"), h("span", { class: "chip" }, t.execution || ""),
          t.source ? h("span", { class: "chip", dataset: { source: t.source } }, t.source) : null,
          t.needsApproval ? h("span", { class: "chip warn" }, "needs approval") : null),
        t.description ? h("p", { class: "muted" }, t.description) : null,
        h("details", { class: "fold" }, h("summary", {}, "Input schema"), h("pre", {}, pretty(t.inputSchema ?? {}))),
        t.outputSchema ? h("details", { class: "fold" }, h("summary", {}, "Output schema"), h("pre", {}, pretty(t.outputSchema))) : null),
      "No tools."), "agent-tools");

    const skills = section("Skills", (info.skills || []).length, list(info.skills, (s) =>
      h("li", {}, h("div", { class: "item-head" }, h("span", { class: "mono strong" }, s.name), s.form ? h("span", { class: "chip" }, s.form) : null), s.description ? h("p", { class: "muted" }, s.description) : null),
      "No skills."));

    const subagents = section("Subagents", (info.subagents || []).length, list(info.subagents, (s) =>
      h("li", {}, h("div", { class: "item-head" }, h("span", { class: "mono strong" }, s.name), s.model ? h("span", { class: "chip" }, s.model) : null), s.description ? h("p", { class: "muted" }, s.description) : null),
      "No subagents."));

    const errors = info.connectionErrors || [];
    const errorFor = (name) => errors.filter((e) => (typeof e === "string" ? e.includes(name) : e.name === name || e.connection === name));
    const mcp = section("MCP connections", (info.mcpConnections || []).length, h("div", {},
      list(info.mcpConnections, (m) => {
        const errs = errorFor(m.name);
        return h("li", { class: errs.length ? "has-error" : "" },
          h("div", { class: "item-head" }, h("span", { class: "mono strong" }, m.name), h("span", { class: "chip" }, typeof m.transport === "string" ? m.transport : pretty(m.transport)), m.advertiseTools ? h("span", { class: "chip" }, "advertised") : null),
          errs.map((e) => h("p", { class: "failure-text" }, typeof e === "string" ? e : e.message || pretty(e))));
      }, "No MCP connections."),
      errors.length && !(info.mcpConnections || []).length ? errors.map((e) => h("p", { class: "failure-text" }, typeof e === "string" ? e : pretty(e))) : null), "agent-mcp");

    const channels = section("Channels", (info.channels || []).length, list(info.channels, (ch) =>
      h("li", {},
        h("div", { class: "item-head" }, h("span", { class: "mono strong" }, ch.name)),
        h("ul", { class: "routes" }, (ch.routes || []).map((raw) => {
          const r = parseRoute(raw);
          const path = routePath(ch.name, r.path);
          return h("li", {}, h("span", { class: `method ${r.method.toLowerCase()}` }, r.method), h("code", {}, path),
            h("button", { class: "btn ghost small", type: "button", dataset: { try: `${r.method} ${path}` }, onclick: () => this.openTry(r.method, path) }, "Try"));
        }))),
      "No channels. Add agent/channels/<name>.toml to take webhooks and commands."), "agent-channels");

    const hooks = section("Hooks", (info.hooks || []).length, list(info.hooks, (hk) =>
      h("li", {}, h("div", { class: "item-head" }, h("span", { class: "mono strong" }, hk.name)), h("p", { class: "muted small" }, `${hookEvents(hk.events)} → ${typeof hk.target === "string" ? hk.target : JSON.stringify(hk.target)}`)),
      "No hooks."));

    const schedules = section("Schedules", (info.schedules || []).length, list(info.schedules, (s) =>
      h("li", {},
        h("div", { class: "item-head" }, h("span", { class: "mono strong" }, s.name), h("code", {}, s.cron), s.kind ? h("span", { class: "chip" }, s.kind) : null,
          dev ? h("button", { class: "btn ghost small", type: "button", onclick: () => this.dispatchSchedule(s.name) }, "Dispatch now") : null)),
      "No schedules."), "agent-schedules");
    if (!dev && (info.schedules || []).length) schedules.append(h("p", { class: "muted small" }, "Start the server with --dev to dispatch schedules by hand."));

    this.reminders = h("div", {}, dev ? h("p", { class: "muted" }, "Loading…") : h("p", { class: "muted" }, "Reminders can be fired by hand under --dev."));
    const reminders = section("Reminders", "", this.reminders, "agent-reminders");

    const diags = (info.diagnostics || []).filter(Boolean);
    const reload = info.reload;
    const reloadCard = reload && (!reload.ok || (reload.needsRestart || []).length)
      ? h("div", { class: "card warn", id: "agent-reload" },
          h("h2", {}, reload.ok ? `Version ${reload.version}` : `The last change does not load: still serving version ${reload.version}`),
          (reload.errors || []).length
            ? h("ul", {}, reload.errors.map((d) => h("li", {}, h("span", { class: "mono" }, d.file), ` ${d.message}`, d.fix ? h("p", { class: "muted small" }, d.fix) : null)))
            : null,
          (reload.needsRestart || []).length
            ? h("p", { class: "muted" }, `Changed since the server started, applied after a restart: ${reload.needsRestart.join(", ")}.`)
            : null)
      : null;
    const header = h("div", { class: "page-head" },
      h("div", {}, h("h1", {}, info.name || "Agent"), h("p", { class: "muted" }, info.description || "")),
      h("div", { class: "facts" },
        h("span", { class: "chip" }, `model ${info.model || "default"}`),
        info.maxSteps ? h("span", { class: "chip" }, `max ${info.maxSteps} steps`) : null,
        h("a", { class: "chip", href: `${api.BASE}/v1/openapi.json`, target: "_blank", rel: "noopener" }, "OpenAPI")));
    clear(this.root, h("div", { class: "page" }, header, reloadCard,
      diags.length ? h("div", { class: "card warn" }, h("h2", {}, "Diagnostics"), h("ul", {}, diags.map((d) => h("li", {}, typeof d === "string" ? d : d.message || pretty(d))))) : null,
      h("div", { class: "grid" }, tools, channels, mcp, skills, subagents, hooks, schedules, reminders)));
    if (dev) this.loadReminders();
  }

  async loadReminders() {
    try {
      const r = await api.get("/v1/dev/reminders");
      const items = r.reminders || [];
      clear(this.reminders, items.length
        ? h("ul", { class: "items" }, items.map((m) => h("li", {},
            h("div", { class: "item-head" }, h("span", { class: "mono small" }, m.id), h("span", { class: "chip" }, m.state || m.status || ""),
              h("button", { class: "btn ghost small", type: "button", onclick: () => this.fireReminder(m.id) }, "Fire now")),
            h("p", { class: "muted small" }, [m.prompt || m.handler || m.name, m.nextFireAt || m.next ? `next ${fmtTime(m.nextFireAt || m.next)}` : ""].filter(Boolean).join(" · ")))))
        : h("p", { class: "muted" }, "No reminders."));
    } catch (e) {
      clear(this.reminders, h("p", { class: "muted" }, errorText(e)));
    }
  }

  async dispatchSchedule(name) {
    try {
      const r = await api.post(`/v1/dev/schedules/${encodeURIComponent(name)}`, {});
      const ids = r.sessionIds || [];
      toast(`Schedule ${name} dispatched: ${ids.length} session${ids.length === 1 ? "" : "s"}`);
      if (ids[0]) this.app.navigate(`#/chat/${encodeURIComponent(ids[0])}`);
    } catch (e) {
      toast(errorText(e), "error");
    }
  }

  async fireReminder(id) {
    try {
      await api.post(`/v1/dev/reminders/${encodeURIComponent(id)}`, {});
      toast(`Reminder ${id} fired`);
      this.loadReminders();
    } catch (e) {
      toast(errorText(e), "error");
    }
  }

  openTry(method, path) {
    const key = `${TRY_KEY}${method} ${path}`;
    const hasBody = method !== "GET" && method !== "DELETE";
    const body = h("textarea", { class: "mono", id: "try-body", rows: 6, spellcheck: "false", "aria-label": "Request body (JSON)" });
    body.value = localStorage.getItem(key) ?? (hasBody ? '{\n  "text": "hello"\n}' : "");
    const result = h("div", { class: "try-result", id: "try-result" });
    const curl = () => {
      const token = api.getToken();
      const parts = [`curl -X ${method} '${api.url(path)}'`];
      if (token) parts.push("-H 'authorization: Bearer $TOKEN'");
      if (hasBody && body.value.trim()) parts.push("-H 'content-type: application/json'", `-d '${body.value.trim().replaceAll("'", "'\\''")}'`);
      return parts.join(" \\\n  ");
    };
    const send = async () => {
      localStorage.setItem(key, body.value);
      let payload;
      if (hasBody && body.value.trim()) {
        try {
          payload = JSON.parse(body.value);
        } catch (e) {
          clear(result, h("p", { class: "failure-text" }, `The body is not JSON: ${e.message}`));
          return;
        }
      }
      clear(result, h("p", { class: "muted" }, "Sending…"));
      try {
        const r = await api.call(method, path, payload, { withStatus: true });
        const sid = r.data && r.data.sessionId;
        clear(result,
          h("div", { class: "item-head" }, h("span", { class: "pill completed" }, String(r.status)),
            sid ? h("a", { class: "btn primary small", href: `#/chat/${encodeURIComponent(sid)}`, onclick: () => dialog.close() }, "Open session") : null),
          h("pre", {}, pretty(r.data)));
      } catch (e) {
        clear(result, h("span", { class: "pill failed" }, String(e.status || "error")), h("pre", {}, pretty(e.body ?? errorText(e))));
      }
    };
    const dialog = h("dialog", { class: "modal", "aria-label": `Try ${method} ${path}` },
      h("form", { method: "dialog", class: "modal-body", onsubmit: (e) => (e.preventDefault(), send()) },
        h("div", { class: "card-head" }, h("h2", {}, "Try ", h("span", { class: `method ${method.toLowerCase()}` }, method), " ", h("code", {}, path))),
        hasBody ? h("label", { class: "label", for: "try-body" }, "JSON body (remembered for this endpoint)") : h("p", { class: "muted" }, "This route takes no body."),
        hasBody ? body : null,
        h("div", { class: "row" },
          h("button", { class: "btn primary", type: "submit", id: "try-send" }, "Send"),
          h("button", { class: "btn ghost", type: "button", onclick: () => copy(curl()) }, "Copy curl"),
          h("button", { class: "btn ghost", type: "button", onclick: () => dialog.close() }, "Close")),
        result));
    dialog.addEventListener("close", () => dialog.remove());
    document.body.append(dialog);
    dialog.showModal();
    (hasBody ? body : dialog.querySelector("button")).focus();
  }
}

function hookEvents(events) {
  if (events === "*" || events === "all" || events?.all) return "every event";
  const list = Array.isArray(events) ? events : events?.only;
  return Array.isArray(list) ? list.join(", ") : JSON.stringify(events);
}
