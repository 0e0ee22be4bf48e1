// The Evals surface, over the eval routes: list the cases, start a run (all
// of them, by id or by tag), poll its progress, show each failure with the
// event that broke the assertion (linked to the session's trace), cancel.
// Servers without the eval routes answer 404; the tab says so and stays
// out of the way.

import * as api from "./api.js";
import { h, clear, toast, errorText, pretty, fmtMs, fmtTime, empty } from "./ui.js";

const DONE = new Set(["completed", "failed", "cancelled", "error"]);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const runIdOf = (r) => r?.runId ?? r?.id;
const unwrap = (r) => (r && r.run ? r.run : r);
// Case and run shapes: see crates/bdk-evals (RunResult, CaseResult).
const casesOf = (run) => run?.cases ?? [];
const caseId = (c) => c?.id ?? "";

export class Evals {
  constructor(root, app) {
    this.root = root;
    this.app = app;
    this.cases = [];
    this.selected = new Set();
    this.polling = null;
    this.filter = h("input", { type: "search", id: "evals-filter", placeholder: "Filter cases by id or tag", "aria-label": "Filter cases", oninput: () => this.renderCases() });
    this.tag = h("select", { id: "evals-tag", "aria-label": "Run by tag" });
    this.runAllBtn = h("button", { class: "btn primary", type: "button", id: "evals-run-all", onclick: () => this.start({}) }, "Run all");
    this.runSelBtn = h("button", { class: "btn ghost", type: "button", id: "evals-run-selected", disabled: true, onclick: () => this.start({ filterIds: [...this.selected] }) }, "Run selected");
    this.runTagBtn = h("button", { class: "btn ghost", type: "button", onclick: () => this.tag.value && this.start({ tags: [this.tag.value] }) }, "Run tag");
    this.caseList = h("div", { class: "case-list" });
    this.runPane = h("div", { class: "run-pane", id: "eval-run" });
    this.history = h("div", { class: "run-history" });
    this.config = h("p", { class: "muted" });
    clear(this.root,
      h("div", { class: "page" },
        h("div", { class: "page-head" },
          h("div", {}, h("h1", {}, "Evals"), this.config),
          h("div", { class: "row wrap" }, this.runAllBtn, this.runSelBtn, this.tag, this.runTagBtn)),
        h("div", { class: "split" },
          h("div", { class: "card" }, h("div", { class: "card-head" }, h("h2", {}, "Cases"), this.filter), this.caseList),
          h("div", { class: "stack" }, this.runPane, h("div", { class: "card" }, h("div", { class: "card-head" }, h("h2", {}, "Recent runs")), this.history)))));
  }

  async load(runId) {
    this.wanted = runId;
    try {
      const r = await api.get("/v1/dev/evals");
      this.cases = r.evals ?? r.cases ?? [];
      const cfg = r.config || {};
      this.config.textContent = [
        `${this.cases.length} case${this.cases.length === 1 ? "" : "s"}`,
        cfg.maxConcurrency ? `concurrency ${cfg.maxConcurrency}` : "",
        cfg.judge ? `judge ${cfg.judge}` : "",
        cfg.durableRuns ? "runs kept across restarts" : "runs kept in memory",
      ].filter(Boolean).join(" · ");
      const tags = [...new Set(this.cases.flatMap((c) => c.tags || []))].sort();
      this.tag.replaceChildren(h("option", { value: "" }, "Tag…"), ...tags.map((t) => h("option", { value: t }, t)));
      this.runTagBtn.disabled = this.tag.disabled = tags.length === 0;
      this.renderCases();
      await this.loadRuns();
    } catch (e) {
      if (e.status === 404) {
        clear(this.root, h("div", { class: "page" }, h("div", { class: "page-head" }, h("h1", {}, "Evals")),
          empty("This server does not serve the eval routes, or the agent has no evals/ folder.", h("p", { class: "muted" }, "Add cases under agent/evals/ and run them with `bdk evals`."))));
      } else {
        clear(this.caseList, empty(errorText(e)));
      }
    }
  }

  renderCases() {
    const q = this.filter.value.trim().toLowerCase();
    const rows = this.cases.filter((c) => !q || caseId(c).toLowerCase().includes(q) || (c.tags || []).some((t) => t.toLowerCase().includes(q)));
    if (!rows.length) {
      clear(this.caseList, empty(this.cases.length ? "No case matches." : "No eval cases."));
      return;
    }
    clear(this.caseList, h("ul", { class: "cases" }, rows.map((c) => {
      const id = caseId(c);
      const box = h("input", { type: "checkbox", checked: this.selected.has(id), "aria-label": `Select ${id}`, onchange: () => {
        if (box.checked) this.selected.add(id);
        else this.selected.delete(id);
        this.runSelBtn.disabled = this.selected.size === 0;
      } });
      return h("li", { dataset: { caseId: id } },
        h("label", { class: "case" }, box, h("span", { class: "mono" }, id)),
        h("span", { class: "tags" }, (c.tags || []).map((t) => h("span", { class: "chip" }, t))),
        c.description ? h("div", { class: "muted small" }, c.description) : null);
    })));
  }

  /** Shows one run by id, polling it while it runs. */
  async openRun(runId) {
    try {
      const run = unwrap(await api.get(`/v1/dev/evals/runs/${encodeURIComponent(runId)}`));
      this.show(run);
      if (!DONE.has(run.status) && !this.polling) this.poll(runId);
    } catch (e) {
      toast(errorText(e), "error");
    }
  }

  async loadRuns() {
    try {
      const r = await api.get("/v1/dev/evals/runs");
      const runs = (r.runs || []).map(unwrap);
      clear(this.history, runs.length
        ? h("ul", { class: "history" }, runs.map((run) => h("li", {},
            h("button", { class: "linkish", type: "button", onclick: () => this.openRun(runIdOf(run)) }, h("span", { class: `pill ${run.status}` }, run.status), " ", h("span", { class: "mono small" }, runIdOf(run))),
            h("span", { class: "muted small" }, ` ${summary(run)} · ${fmtTime(run.startedAt)}`))))
        : empty("No runs yet."));
      const active = r.activeRunId ? runs.find((x) => runIdOf(x) === r.activeRunId) : null;
      if (this.wanted) {
        const id = this.wanted;
        this.wanted = null;
        this.openRun(id);
      } else if (active && !this.polling) this.poll(r.activeRunId);
      else if (!this.current && runs[0]) this.show(runs[0]);
    } catch (e) {
      clear(this.history, empty(errorText(e)));
    }
  }

  async start(selection) {
    try {
      const r = await api.post("/v1/dev/evals/runs", selection);
      const run = unwrap(r);
      this.show(run);
      this.poll(runIdOf(run));
    } catch (e) {
      if (e.status === 409) toast("A run is already in progress.", "error");
      else if (e.status === 404 && e.code !== "not_found") toast("No case matches this selection.", "error");
      else toast(errorText(e), "error");
    }
  }

  async poll(runId) {
    const token = {};
    this.polling = token;
    while (this.polling === token) {
      try {
        const run = unwrap(await api.get(`/v1/dev/evals/runs/${encodeURIComponent(runId)}`));
        this.show(run);
        if (DONE.has(run.status)) break;
      } catch (e) {
        toast(errorText(e), "error");
        break;
      }
      await sleep(500);
    }
    if (this.polling === token) this.polling = null;
    this.loadRuns();
  }

  async cancel(runId) {
    try {
      await api.post(`/v1/dev/evals/runs/${encodeURIComponent(runId)}/cancel`, {});
      toast("Cancelling the run…");
    } catch (e) {
      toast(errorText(e), "error");
    }
  }

  show(run) {
    this.current = run;
    const id = runIdOf(run);
    const cases = casesOf(run);
    const total = run.summary?.total ?? cases.length;
    const done = cases.filter((c) => c.status !== "pending" && c.status !== "running").length;
    const pct = total ? Math.round((done / total) * 100) : DONE.has(run.status) ? 100 : 0;
    const progress = h("div", { class: "progress", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": String(total || 0), "aria-valuenow": String(done || 0) }, h("div", { class: "fill" }));
    progress.firstChild.style.width = `${pct}%`;
    const broken = (run.summary?.failed ?? 0) > 0 ? " has-failures" : "";
    clear(this.runPane, h("div", { class: `card run ${run.status}${broken}`, dataset: { runId: id, status: run.status } },
      h("div", { class: "card-head" },
        h("h2", {}, "Run ", h("span", { class: "mono small muted" }, id)),
        h("span", { class: `pill ${run.status}`, id: "eval-status" }, run.status),
        DONE.has(run.status) ? null : h("button", { class: "btn danger small", type: "button", id: "evals-cancel", onclick: () => this.cancel(id) }, "Cancel")),
      progress,
      h("p", { class: "muted small" }, `${summary(run)}${run.durationMs !== undefined ? ` · ${fmtMs(run.durationMs)}` : ""}`),
      run.error ? h("p", { class: "failure-text" }, typeof run.error === "string" ? run.error : pretty(run.error)) : null,
      h("ul", { class: "results" }, cases.map((c) => this.caseResult(c)))));
  }

  caseResult(c) {
    const status = c.status || "pending";
    const iterations = c.iterations || [];
    const many = (c.iterationCount || iterations.length) > 1;
    const session = iterations.find((i) => i.sessionId)?.sessionId;
    const facts = [
      status,
      c.durationMs ? fmtMs(c.durationMs) : "",
      many ? `pass rate ${Math.round((c.passRate || 0) * 100)}% (min ${Math.round((c.minPassRate || 0) * 100)}%)` : "",
    ];
    return h("li", { class: `result ${status}`, dataset: { caseId: caseId(c), status } },
      h("div", { class: "result-head" },
        h("span", { class: `dot ${status}`, "aria-hidden": "true" }),
        h("span", { class: "mono" }, caseId(c)),
        h("span", { class: "muted small" }, facts.filter(Boolean).join(" · ")),
        session ? h("a", { class: "btn ghost small", href: `#/trace/${encodeURIComponent(session)}` }, "Trace") : null),
      iterations.filter((it) => (it.failures || []).length || it.stopped).map((it) => this.iteration(it, many)));
  }

  iteration(it, many) {
    const trace = (label) =>
      it.sessionId ? h("a", { href: `#/trace/${encodeURIComponent(it.sessionId)}` }, label) : h("code", {}, label);
    return h("div", { class: "iteration" },
      many ? h("div", { class: "muted small" }, `Iteration ${it.iteration} · ${it.status}`) : null,
      it.stopped ? h("p", { class: "failure-text" }, it.stopped) : null,
      h("ul", { class: "failures" }, (it.failures || []).map((f) => h("li", { class: "failure" },
        h("div", {}, h("strong", {}, f.assertion || "assertion"), f.scope ? h("span", { class: "muted small" }, ` (${f.scope})`) : null, ": ", f.message || ""),
        f.event ? h("div", { class: "small broken-at" }, "Broken at event ", trace(`#${f.event.index} ${f.event.type || ""}`)) : null))));
  }
}

function summary(run) {
  const s = run.summary || {};
  const parts = [`${s.passed ?? 0} passed`, `${s.failed ?? 0} failed`];
  if (s.cancelled) parts.push(`${s.cancelled} cancelled`);
  parts.push(`${s.total ?? casesOf(run).length} total`);
  return parts.join(" · ");
}
