// A small Markdown renderer for model output. Safety first: the source is
// HTML-escaped before any markup is added, links keep only http(s), mailto
// and same-origin targets, and no raw HTML passes through. It covers what
// models write: headings, paragraphs, emphasis, inline code, fenced code
// (highlighted), lists, quotes, rules, links and pipe tables. Streaming
// text is simply re-rendered; an unclosed fence renders as code so far.

export function escapeHtml(s) {
  return String(s)
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;")
    .replaceAll("'", "&#39;");
}

const KEYWORDS = new Set(
  (
    "as async await break case catch class const continue crate def default del do elif else enum " +
    "except export extends false fn finally for from func function go if impl import in interface " +
    "is lambda let loop match mod move mut new nil None not null or pass pub raise return self " +
    "Self static struct super switch then this throw true True False try type typeof undefined " +
    "unsafe use var void where while with yield echo fi done esac local"
  ).split(" "),
);

/** Highlights code; returns escaped HTML with token spans. */
export function highlight(code, lang = "") {
  const l = lang.toLowerCase();
  const hashComments = ["py", "python", "sh", "bash", "shell", "toml", "yaml", "yml", "ruby", "rb"].includes(l);
  const slashComments = !["py", "python", "sh", "bash", "shell", "toml", "yaml", "yml", "json"].includes(l);
  const re = new RegExp(
    [
      slashComments ? String.raw`(\/\/[^\n]*|\/\*[\s\S]*?\*\/)` : "(\\b\\B)",
      hashComments ? String.raw`(#[^\n]*)` : "(\\b\\B)",
      String.raw`("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|\x60(?:[^\x60\\]|\\.)*\x60)`,
      String.raw`(\b\d[\d_]*(?:\.\d+)?(?:e[+-]?\d+)?\b)`,
      String.raw`([A-Za-z_][A-Za-z0-9_]*)`,
    ].join("|"),
    "g",
  );
  let out = "";
  let last = 0;
  for (const m of code.matchAll(re)) {
    out += escapeHtml(code.slice(last, m.index));
    const [tok, c1, c2, str, num, word] = m;
    if (c1 || c2) out += `<span class="tk-c">${escapeHtml(tok)}</span>`;
    else if (str) out += `<span class="tk-s">${escapeHtml(tok)}</span>`;
    else if (num) out += `<span class="tk-n">${escapeHtml(tok)}</span>`;
    else if (word && KEYWORDS.has(word)) out += `<span class="tk-k">${escapeHtml(tok)}</span>`;
    else if (word && /^[A-Z]/.test(word)) out += `<span class="tk-t">${escapeHtml(tok)}</span>`;
    else out += escapeHtml(tok);
    last = m.index + tok.length;
  }
  return out + escapeHtml(code.slice(last));
}

function safeHref(raw) {
  // `raw` is already escaped text; decode the one entity URLs commonly use.
  const href = raw.replaceAll("&amp;", "&");
  if (/^(https?:|mailto:)/i.test(href) || /^[/#?]/.test(href)) return escapeHtml(href);
  return null;
}

/** Inline markup over one escaped line or paragraph. */
function inline(escaped) {
  const codes = [];
  let s = escaped.replace(/`([^`\n]+)`/g, (_, c) => {
    codes.push(`<code>${c}</code>`);
    return `\u0000${codes.length - 1}\u0000`;
  });
  s = s.replace(/\[([^\]\n]+)\]\(([^)\s]+)\)/g, (whole, text, href) => {
    const safe = safeHref(href);
    return safe ? `<a href="${safe}" target="_blank" rel="noopener noreferrer">${text}</a>` : text;
  });
  s = s.replace(/(^|[\s(])(https?:\/\/[^\s<]+[^\s<.,;:!?)])/g, (whole, pre, href) => {
    const safe = safeHref(href);
    return safe ? `${pre}<a href="${safe}" target="_blank" rel="noopener noreferrer">${href}</a>` : whole;
  });
  s = s.replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>");
  s = s.replace(/__([^_\n]+)__/g, "<strong>$1</strong>");
  s = s.replace(/(^|[^*\w])\*([^*\n]+)\*(?!\w)/g, "$1<em>$2</em>");
  s = s.replace(/(^|[^_\w])_([^_\n]+)_(?!\w)/g, "$1<em>$2</em>");
  s = s.replace(/~~([^~\n]+)~~/g, "<del>$1</del>");
  return s.replace(/\u0000(\d+)\u0000/g, (_, i) => codes[Number(i)]);
}

function tableRow(line) {
  let t = line.trim();
  if (t.startsWith("|")) t = t.slice(1);
  if (t.endsWith("|")) t = t.slice(0, -1);
  return t.split("|").map((c) => c.trim());
}

/** Renders Markdown to HTML that is safe to assign to innerHTML. */
export function renderMarkdown(src) {
  const lines = String(src ?? "").replace(/\r\n?/g, "\n").split("\n");
  const out = [];
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) out.push(`<p>${inline(escapeHtml(para.join("\n"))).replaceAll("\n", "<br>")}</p>`);
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+#.-]*)/);
    if (fence) {
      flush();
      const marker = fence[1];
      const lang = fence[2] || "";
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(marker)) body.push(lines[i++]);
      i++;
      const label = lang ? `<span class="code-lang">${escapeHtml(lang)}</span>` : "";
      out.push(`<pre class="code">${label}<code>${highlight(body.join("\n"), lang)}</code></pre>`);
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      flush();
      const n = Math.min(heading[1].length + 2, 6);
      out.push(`<h${n}>${inline(escapeHtml(heading[2]))}</h${n}>`);
      i++;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flush();
      out.push("<hr>");
      i++;
      continue;
    }
    if (/^\s*>/.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
      out.push(`<blockquote>${renderMarkdown(quoted.join("\n"))}</blockquote>`);
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/.test(lines[i + 1])) {
      flush();
      const head = tableRow(line);
      i += 2;
      const rows = [];
      while (i < lines.length && lines[i].includes("|") && lines[i].trim()) rows.push(tableRow(lines[i++]));
      const th = head.map((c) => `<th>${inline(escapeHtml(c))}</th>`).join("");
      const tb = rows.map((r) => `<tr>${r.map((c) => `<td>${inline(escapeHtml(c))}</td>`).join("")}</tr>`).join("");
      out.push(`<div class="table-wrap"><table><thead><tr>${th}</tr></thead><tbody>${tb}</tbody></table></div>`);
      continue;
    }
    const item = line.match(/^(\s*)([-*+]|\d+[.)])\s+(.*)$/);
    if (item) {
      flush();
      const ordered = /\d/.test(item[2]);
      const items = [];
      while (i < lines.length) {
        const m = lines[i].match(/^(\s*)([-*+]|\d+[.)])\s+(.*)$/);
        if (m && /\d/.test(m[2]) === ordered) {
          items.push({ depth: m[1].length >= 2 ? 1 : 0, text: m[3] });
          i++;
        } else if (lines[i].trim() && /^\s{2,}/.test(lines[i]) && items.length) {
          items[items.length - 1].text += ` ${lines[i].trim()}`;
          i++;
        } else break;
      }
      const tag = ordered ? "ol" : "ul";
      const li = items
        .map((it) => `<li${it.depth ? ' class="nested"' : ""}>${inline(escapeHtml(it.text))}</li>`)
        .join("");
      out.push(`<${tag}>${li}</${tag}>`);
      continue;
    }
    if (!line.trim()) {
      flush();
      i++;
      continue;
    }
    para.push(line);
    i++;
  }
  flush();
  return out.join("\n");
}
