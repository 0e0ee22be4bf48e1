// The playground's entry point: navbar (agent name, tabs, token field),
// hash routing between the surfaces, and the state they share (the agent's
// /v1/meta and /v1/info, fetched again when `bdk dev` reloads the agent).
//
// Routes: #/chat, #/chat/<sessionId>, #/runs, #/trace/<sessionId>,
// #/raw/<sessionId>, #/evals, #/evals/<runId>, #/agent, #/abs, #/logs. A `?sessionId=` query (the
// `playgroundUrl` the API hands out) opens that session in Chat.

import * as api from "./api.js";
import { Chat, commandsFrom } from "./chat.js";
import { Runs, renderTrace, renderRaw } from "./runs.js";
import { Evals } from "./evals.js";
import { Agent } from "./agent.js";
import { Logs } from "./logs.js";
import { Abs } from "./abs.js";
import { h, clear, errorText, empty, toast } from "./ui.js";

class App {
  constructor() {
    this.main = document.getElementById("main");
    this.views = {};
    for (const el of document.querySelectorAll(".view")) this.views[el.dataset.view] = el;
    for (const name of ["trace", "raw"]) {
      const el = h("section", { class: "view", id: `view-${name}`, dataset: { view: name }, hidden: true });
      this.main.append(el);
      this.views[name] = el;
    }
    this.bannerEl = document.getElementById("banner");
    this.meta = null;
    this.infoPromise = null;
    this.chat = new Chat(this.views.chat, this);
    this.runs = new Runs(this.views.runs, this);
    this.evals = new Evals(this.views.evals, this);
    this.agent = new Agent(this.views.agent, this);
    this.logs = new Logs(this.views.logs);
    this.abs = new Abs(this.views.abs);
    this.setupToken();
    window.addEventListener("hashchange", () => this.route());
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && !e.defaultPrevented && this.active === "chat" && this.chat.busy && !document.querySelector("dialog[open]")) this.chat.stop();
    });
  }

  async start() {
    await this.loadMeta();
    const params = new URLSearchParams(location.search);
    const sid = params.get("sessionId");
    if (sid) {
      history.replaceState(null, "", `${location.pathname}#/chat/${encodeURIComponent(sid)}`);
    }
    this.route();
    this.loadCommands();
    if (this.meta?.reload) this.watchReloads();
  }

  /**
   * Under `bdk dev` the server reloads the agent when its folder changes:
   * poll the cheap /v1/meta and, when the version or its state moves,
   * fetch /v1/info again, refresh what shows the agent and say what
   * happened (a failed reload stays on the banner until a good one).
   */
  watchReloads() {
    let last = this.meta.reload;
    const tick = async () => {
      let meta;
      try {
        meta = await api.get("/v1/meta");
      } catch {
        return; // the server restarting; try again on the next tick
      }
      const now = meta.reload;
      if (!now || (now.version === last.version && now.ok === last.ok)) return;
      last = now;
      this.meta = meta;
      document.getElementById("agent-name").textContent = meta.agent;
      let info = null;
      try {
        info = await this.info(true);
      } catch {
        /* reported by info() */
      }
      this.loadCommands();
      if (this.active === "agent") this.agent.load();
      this.showReload(now, info?.reload);
    };
    this.reloadTimer = setInterval(tick, 1000);
  }

  showReload(state, detail) {
    if (state.ok) {
      this.banner(null);
      toast(`Agent reloaded: version ${state.version}`);
      return;
    }
    const first = (detail?.errors || [])[0];
    const why = first ? ` ${first.file}: ${first.message}` : "";
    this.banner(`The last change does not load; still serving version ${state.version}.${why}`);
  }

  async loadMeta() {
    try {
      this.meta = await api.get("/v1/meta");
      document.getElementById("agent-name").textContent = this.meta.agent;
      document.title = `${this.meta.agent} · Playground`;
      document.getElementById("dev-badge").hidden = !this.meta.dev;
    } catch (e) {
      this.banner(`Cannot reach the agent: ${errorText(e)}`);
    }
  }

  /** The agent's /v1/info, fetched once (again with `fresh`). */
  info(fresh = false) {
    if (!this.infoPromise || fresh) {
      this.infoPromise = api.get("/v1/info");
      this.infoPromise.catch((e) => {
        this.infoPromise = null;
        if (e.status === 401) this.banner("This server needs a bearer token: paste it in the field at the top right.");
      });
    }
    return this.infoPromise;
  }

  async loadCommands() {
    try {
      this.chat.setCommands(commandsFrom(await this.info()));
    } catch {
      /* reported by info() */
    }
  }

  setupToken() {
    const input = document.getElementById("token");
    input.value = api.getToken();
    input.addEventListener("change", () => {
      api.setToken(input.value.trim());
      this.banner(null);
      this.infoPromise = null;
      this.loadCommands();
      this.route(true);
    });
  }

  banner(text) {
    this.bannerEl.hidden = !text;
    this.bannerEl.textContent = text || "";
  }

  navigate(hash, replace = false) {
    if (replace) {
      history.replaceState(null, "", hash);
      this.route();
    } else if (location.hash === hash) {
      this.route(true);
    } else {
      location.hash = hash;
    }
  }

  show(view, tab = view) {
    this.active = view;
    for (const [name, el] of Object.entries(this.views)) el.hidden = name !== view;
    for (const a of document.querySelectorAll("#tabs a")) {
      const on = a.dataset.tab === tab;
      a.classList.toggle("active", on);
      if (on) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    if (view === "logs") this.logs.start();
    else this.logs.stop();
    if (view === "abs") this.abs.start();
    else this.abs.stop();
  }

  async route(force = false) {
    const [name, ...rest] = (location.hash.replace(/^#\/?/, "") || "chat").split("/");
    const arg = rest.length ? decodeURIComponent(rest.join("/")) : null;
    switch (name) {
      case "chat":
        this.show("chat");
        if (arg) this.chat.open(arg);
        else if (this.chat.sessionId || force) this.chat.reset(null);
        this.chat.input.focus();
        break;
      case "runs":
        this.show("runs");
        this.runs.load();
        break;
      case "trace":
        this.show("trace", "runs");
        if (arg) this.openTrace(arg);
        else if (!this.views.trace.childElementCount) this.navigate("#/runs", true);
        break;
      case "raw":
        this.show("raw", "runs");
        if (arg) renderRaw(this.views.raw, arg);
        break;
      case "evals":
        this.show("evals");
        this.evals.load(arg);
        break;
      case "agent":
        this.show("agent");
        this.agent.load();
        break;
      case "abs":
        this.show("abs");
        break;
      case "logs":
        this.show("logs");
        break;
      default:
        this.navigate("#/chat", true);
    }
  }

  async openTrace(id) {
    clear(this.views.trace, h("div", { class: "page" }, h("p", { class: "muted" }, "Loading…")));
    try {
      const r = await api.get(`/v1/session/${encodeURIComponent(id)}/events?format=json`);
      renderTrace(this.views.trace, { sessionId: id, events: r.events || [] });
    } catch (e) {
      clear(this.views.trace, h("div", { class: "page" }, empty(errorText(e))));
    }
  }

  /** Shows a trace from events the caller already has (a local file). */
  showTrace(trace) {
    history.pushState(null, "", "#/trace");
    this.show("trace", "runs");
    renderTrace(this.views.trace, trace);
  }
}

const app = new App();
// A handle for the browser tests: drop the live stream the way a network
// failure would, to exercise the reconnect path.
window.bdkPlayground = { dropStream: () => app.chat.dropConnection() };
app.start();
