// The A/Bs surface: the agent's experiments with each arm's live figures
// and the latest assignments, polled from GET /v1/abs while the tab is
// open. The figures are folded on the server from the sessions' event
// streams; this view only lays them out.

import * as api from "./api.js";
import { h, clear, empty, errorText, fmtMs, fmtTime } from "./ui.js";

const enc = encodeURIComponent;

function cost(usd) {
  if (typeof usd !== "number") return "—";
  return usd < 0.01 && usd > 0 ? `$${usd.toFixed(5)}` : `$${usd.toFixed(2)}`;
}

function share(part, whole) {
  return whole ? `${Math.round((part / whole) * 100)}%` : "—";
}

export class Abs {
  constructor(root) {
    this.root = root;
    this.timer = null;
    this.status = h("span", { class: "muted small" });
    this.body = h("div", { class: "stack", id: "abs" });
    clear(this.root, h("div", { class: "page" },
      h("div", { class: "page-head" },
        h("div", {}, h("h1", {}, "A/Bs"),
          h("p", { class: "muted" }, "Experiments in agent/experiments/, with each arm's totals over the sessions you can see. ", this.status)),
        h("div", { class: "row" },
          h("button", { class: "btn ghost", type: "button", onclick: () => this.poll() }, "Refresh"))),
      this.body));
  }

  start() {
    if (this.timer) return;
    const tick = async () => {
      await this.poll();
      this.timer = setTimeout(tick, 3000);
    };
    this.timer = setTimeout(tick, 0);
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
  }

  async poll() {
    try {
      const r = await api.get("/v1/abs?limit=50");
      this.render(r.experiments || []);
      this.status.textContent = `Updated ${fmtTime(new Date().toISOString())} · every 3 s`;
    } catch (e) {
      this.status.textContent = errorText(e);
    }
  }

  render(experiments) {
    if (!experiments.length) {
      clear(this.body, empty("No experiments. Declare one as agent/experiments/<name>.toml (see the docs on experiments)."));
      return;
    }
    clear(this.body, ...experiments.map((e) => this.experiment(e)));
  }

  experiment(e) {
    const total = e.totals?.sessions || 0;
    const flags = [
      e.declared ? null : h("span", { class: "chip" }, "no longer declared"),
      e.declared && !e.enabled ? h("span", { class: "chip" }, "disabled") : null,
      e.unit ? h("span", { class: "chip" }, `by ${e.unit === "channel_key" ? "channel key" : "session"}`) : null,
    ];
    const arms = h("table", { class: "table ab-arms" },
      h("thead", {}, h("tr", {},
        h("th", {}, "Arm"), h("th", {}, "Weight"), h("th", {}, "Sessions"), h("th", {}, "Turns"),
        h("th", {}, "Failed"), h("th", { class: "hide-narrow" }, "Tokens in / out"),
        h("th", {}, "Cost"), h("th", { class: "hide-narrow" }, "Mean turn"))),
      h("tbody", {}, ...(e.arms || []).map((a) => {
        const t = a.totals || {};
        return h("tr", { dataset: { arm: a.name } },
          h("td", { class: "strong" }, a.name),
          h("td", {}, a.weight === null || a.weight === undefined ? "—" : `${a.weight}%`),
          h("td", {}, `${t.sessions ?? 0}`, h("span", { class: "muted small" }, ` (${share(t.sessions ?? 0, total)})`)),
          h("td", {}, `${t.turns ?? 0}`),
          h("td", {}, `${t.failedTurns ?? 0}`),
          h("td", { class: "hide-narrow mono" }, `${t.inputTokens ?? 0} / ${t.outputTokens ?? 0}`),
          h("td", {}, cost(t.estimatedCostUsd), t.unpricedTurns ? h("span", { class: "muted small" }, ` +${t.unpricedTurns} unpriced`) : null),
          h("td", { class: "hide-narrow" }, t.meanTurnDurationMs === null || t.meanTurnDurationMs === undefined ? "—" : fmtMs(t.meanTurnDurationMs)));
      })));
    const sessions = (e.sessions || []).length
      ? h("table", { class: "table ab-sessions" },
        h("thead", {}, h("tr", {},
          h("th", {}, "Session"), h("th", {}, "Arm"), h("th", { class: "hide-narrow" }, "Unit"),
          h("th", {}, "Turns"), h("th", {}, "Failed"), h("th", {}, "Started"))),
        h("tbody", {}, ...e.sessions.map((s) => h("tr", {},
          h("td", {}, h("a", { href: `#/trace/${enc(s.sessionId)}`, class: "mono" }, s.sessionId)),
          h("td", {}, s.arm),
          h("td", { class: "hide-narrow muted" }, s.unit === "pinned" ? "pinned (eval)" : s.unit || "—"),
          h("td", {}, `${s.totals?.turns ?? 0}`),
          h("td", {}, `${s.totals?.failedTurns ?? 0}`),
          h("td", { class: "muted nowrap" }, fmtTime(s.createdAt))))))
      : h("p", { class: "muted" }, "No session enrolled yet.");
    const more = e.sessionsOmitted ? h("p", { class: "muted small" }, `${e.sessionsOmitted} older assignment(s) not listed.`) : null;
    const pinned = e.pinnedSessions ? h("p", { class: "muted small" }, `${e.pinnedSessions} session(s) with a pinned arm (evals), not in the totals.`) : null;
    return h("section", { class: "card", dataset: { experiment: e.name } },
      h("div", { class: "card-head" }, h("h2", {}, e.name), ...flags),
      e.description ? h("p", { class: "muted" }, e.description) : null,
      arms,
      h("h3", { class: "section-title" }, "Latest assignments"),
      sessions, more, pinned);
  }
}
