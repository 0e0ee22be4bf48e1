// A tool's MCP content blocks (action.result.content), shown as what they
// are: text as text, images as images, audio as a player, embedded
// resources as their text or a size, resource links as their URI. Data
// arrives base64 in the event; it is only ever put in `data:` URLs of
// <img> and <audio>, which run no script.

import { h } from "./ui.js";

// Media types shown inline; anything else is named, not rendered.
const IMAGES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
const AUDIO = new Set(["audio/wav", "audio/x-wav", "audio/mpeg", "audio/ogg", "audio/webm", "audio/flac"]);
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function bytes(data) {
  const pad = (data.match(/=+$/) || [""])[0].length;
  return Math.max(0, Math.floor(data.length / 4) * 3 - pad);
}

function dataUrl(mime, data) {
  return `data:${mime};base64,${data}`;
}

function block(b) {
  const data = typeof b.data === "string" && BASE64.test(b.data) ? b.data : null;
  switch (b.type) {
    case "text":
      return h("pre", { class: "block text" }, String(b.text ?? ""));
    case "image":
      return data && IMAGES.has(b.mimeType)
        ? h("img", { class: "block image", src: dataUrl(b.mimeType, data), alt: `image (${b.mimeType})` })
        : h("div", { class: "block muted" }, `[image: ${b.mimeType}, ${data ? bytes(data) : 0} bytes]`);
    case "audio":
      return data && AUDIO.has(b.mimeType)
        ? h("audio", { class: "block audio", controls: true, src: dataUrl(b.mimeType, data) })
        : h("div", { class: "block muted" }, `[audio: ${b.mimeType}, ${data ? bytes(data) : 0} bytes]`);
    case "resource": {
      const r = b.resource || {};
      const head = h("div", { class: "block-head" }, h("code", {}, String(r.uri ?? "")), r.mimeType ? ` · ${r.mimeType}` : "");
      return typeof r.text === "string"
        ? h("div", { class: "block resource" }, head, h("pre", {}, r.text))
        : h("div", { class: "block resource" }, head, ` · ${typeof r.blob === "string" ? bytes(r.blob) : 0} bytes`);
    }
    case "resource_link":
      return h("div", { class: "block link" }, "Link: ", h("code", {}, String(b.uri ?? "")), b.name ? ` (${b.name})` : "");
    default:
      return h("div", { class: "block muted" }, `[${String(b.type)} content]`);
  }
}

/** The blocks as elements, or null when there are none. */
export function renderBlocks(blocks) {
  if (!Array.isArray(blocks) || blocks.length === 0) return null;
  return h("div", { class: "blocks" }, blocks.map(block));
}
