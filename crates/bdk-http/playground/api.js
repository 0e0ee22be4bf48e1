// The only way the playground talks to the server: the public HTTP API of
// the agent that served the page, with the token from the navbar as a
// bearer credential when one is set.

const meta = document.querySelector('meta[name="bdk-base"]');
/** The agent's base path: "/<slug>", or "" in single mode. */
export const BASE = meta ? meta.content : "";
const TOKEN_KEY = "bdk.playground.token";

export function getToken() {
  return localStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) localStorage.setItem(TOKEN_KEY, value);
  else localStorage.removeItem(TOKEN_KEY);
}

/** An error answer of the API, with its status and `error` code. */
export class ApiError extends Error {
  constructor(status, code, message, body) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

function headers(extra) {
  const h = { accept: "application/json", ...extra };
  const token = getToken();
  if (token) h.authorization = `Bearer ${token}`;
  return h;
}

/** An absolute URL of an API path (which starts with "/v1/"). */
export function url(path) {
  return `${location.origin}${BASE}${path}`;
}

/** Calls a JSON route. Resolves with the body; rejects with ApiError. */
export async function call(method, path, body, opts = {}) {
  const init = { method, headers: headers(), signal: opts.signal };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(url(path), init);
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, "network", "The server cannot be reached.");
  }
  const text = await resp.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!resp.ok) {
    const code = data && typeof data === "object" ? data.error : undefined;
    const message = data && typeof data === "object" ? data.message : undefined;
    throw new ApiError(resp.status, code, message || describe(resp.status), data);
  }
  return opts.withStatus ? { status: resp.status, data } : data;
}

function describe(status) {
  if (status === 401) return "Unauthorized: set a bearer token in the navbar.";
  if (status === 403) return "Forbidden: this session belongs to someone else.";
  if (status === 404) return "Not found.";
  return `HTTP ${status}`;
}

export const get = (path, opts) => call("GET", path, undefined, opts);
export const post = (path, body, opts) => call("POST", path, body ?? {}, opts);

/** The raw text of a route (the NDJSON dump of a session, say). */
export async function text(path) {
  const resp = await fetch(url(path), { headers: headers({ accept: "*/*" }) });
  const body = await resp.text();
  if (!resp.ok) {
    let parsed = null;
    try {
      parsed = JSON.parse(body);
    } catch {
      /* not JSON */
    }
    throw new ApiError(resp.status, parsed?.error, parsed?.message || describe(resp.status), parsed);
  }
  return body;
}

/**
 * Follows a session's NDJSON stream from `startIndex`, calling `onEvent`
 * for every event. Resolves when the server ends the stream, rejects when
 * the connection fails or `signal` aborts it.
 */
export async function stream(sessionId, startIndex, onEvent, signal) {
  const resp = await fetch(url(`/v1/session/${encodeURIComponent(sessionId)}/stream?startIndex=${startIndex}`), {
    headers: headers({ accept: "application/x-ndjson" }),
    signal,
  });
  if (!resp.ok) {
    let parsed = null;
    try {
      parsed = await resp.json();
    } catch {
      /* not JSON */
    }
    throw new ApiError(resp.status, parsed?.error, parsed?.message || describe(resp.status), parsed);
  }
  const reader = resp.body.getReader();
  signal?.addEventListener("abort", () => reader.cancel().catch(() => {}), { once: true });
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (!line) continue; // heartbeat
      let event;
      try {
        event = JSON.parse(line);
      } catch {
        continue;
      }
      onEvent(event);
    }
    if (signal?.aborted) throw new DOMException("aborted", "AbortError");
  }
}

/** Parses NDJSON text into events, skipping blank lines; throws on a bad line. */
export function parseNdjson(body) {
  const out = [];
  body.split("\n").forEach((line, i) => {
    const t = line.trim();
    if (!t) return;
    try {
      out.push(JSON.parse(t));
    } catch {
      throw new Error(`line ${i + 1} is not JSON`);
    }
  });
  return out;
}
