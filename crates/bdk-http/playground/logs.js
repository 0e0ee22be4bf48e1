// The Logs surface: recent server log lines, polled from GET /v1/logs with
// the cursor the previous answer returned, while the tab is open.

import * as api from "./api.js";
import { h, clear, errorText, fmtTime } from "./ui.js";

const MAX_LINES = 2000;

export class Logs {
  constructor(root) {
    this.root = root;
    this.cursor = 0;
    this.timer = null;
    this.paused = false;
    this.level = h("select", { "aria-label": "Minimum level", onchange: () => this.applyFilter() },
      ...["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].map((l) => h("option", { value: l, selected: l === "DEBUG" }, l)));
    this.filter = h("input", { type: "search", placeholder: "Filter lines", "aria-label": "Filter log lines", oninput: () => this.applyFilter() });
    this.pauseBtn = h("button", { class: "btn ghost", type: "button", onclick: () => this.togglePause() }, "Pause");
    this.status = h("span", { class: "muted small" });
    this.body = h("div", { class: "logs", id: "logs", role: "log", tabindex: "0" });
    clear(this.root, h("div", { class: "page" },
      h("div", { class: "page-head" },
        h("div", {}, h("h1", {}, "Logs"), h("p", { class: "muted" }, "Recent server log lines. ", this.status)),
        h("div", { class: "row" }, this.filter, this.level, this.pauseBtn,
          h("button", { class: "btn ghost", type: "button", onclick: () => clear(this.body) }, "Clear"))),
      this.body));
  }

  start() {
    if (this.timer) return;
    const tick = async () => {
      if (!this.paused) await this.poll();
      this.timer = setTimeout(tick, 1500);
    };
    this.timer = setTimeout(tick, 0);
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
  }

  togglePause() {
    this.paused = !this.paused;
    this.pauseBtn.textContent = this.paused ? "Resume" : "Pause";
  }

  async poll() {
    try {
      const r = await api.get(`/v1/logs?after=${this.cursor}&limit=500`);
      const stick = this.body.scrollHeight - this.body.scrollTop - this.body.clientHeight < 40;
      for (const l of r.lines || []) this.body.append(this.line(l));
      while (this.body.childElementCount > MAX_LINES) this.body.firstChild.remove();
      if (typeof r.next === "number") this.cursor = r.next;
      this.status.textContent = `Polling every 1.5 s · cursor ${this.cursor}`;
      if (stick) this.body.scrollTop = this.body.scrollHeight;
    } catch (e) {
      this.status.textContent = errorText(e);
    }
  }

  line(l) {
    const level = String(l.level || "INFO").toUpperCase();
    const el = h("div", { class: `log-line ${level.toLowerCase()}`, dataset: { level } },
      h("span", { class: "at" }, fmtTime(l.at)),
      h("span", { class: `lvl ${level.toLowerCase()}` }, level),
      h("span", { class: "target" }, l.target || ""),
      h("span", { class: "msg" }, l.message || ""));
    this.match(el);
    return el;
  }

  match(el) {
    const order = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];
    const min = order.indexOf(this.level.value);
    const q = this.filter.value.trim().toLowerCase();
    const ok = order.indexOf(el.dataset.level) >= min && (!q || el.textContent.toLowerCase().includes(q));
    el.hidden = !ok;
  }

  applyFilter() {
    for (const el of this.body.children) this.match(el);
  }
}
