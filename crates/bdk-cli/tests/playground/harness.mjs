// Shared set-up of the playground browser tests: launch Debian's chromium
// through playwright-core (never a downloaded browser), collect page
// errors, and run named steps that leave a screenshot behind when they fail.

import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set; run this script from crates/bdk-cli/tests/playground.rs`);
  return v;
}

export async function launch() {
  const require = createRequire(path.join(env("PLAYWRIGHT_DIR"), "package.json"));
  const { chromium } = require("playwright-core");
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "bdk-playground-chromium-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: env("CHROMIUM"),
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport: { width: 1280, height: 820 },
    colorScheme: "light",
  });
  context.setDefaultTimeout(60000);
  const page = context.pages()[0] || (await context.newPage());
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    const text = m.text();
    // A 4xx answer the page handles is logged by the browser; that is not a bug.
    if (text.startsWith("Failed to load resource")) return;
    problems.push(`console error: ${text}`);
  });
  const close = async () => {
    await context.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  };
  return { context, page, problems, close };
}

export function makeStep(page, shots) {
  fs.mkdirSync(shots, { recursive: true });
  return async function step(name, fn) {
    const started = Date.now();
    try {
      await fn();
      console.log(`ok   ${name} (${Date.now() - started} ms)`);
    } catch (e) {
      const script = path.basename(process.argv[1], ".mjs");
      const file = path.join(shots, `failure-${script}-${name.replace(/[^a-z0-9]+/gi, "-")}.png`);
      await page.screenshot({ path: file, fullPage: true }).catch(() => {});
      console.log(`FAIL ${name}: ${e.stack || e}`);
      console.log(`     screenshot: ${file}`);
      throw e;
    }
  };
}

export function assert(cond, message) {
  if (!cond) throw new Error(`assertion failed: ${message}`);
}

/** A screenshot of the surface itself: passing notifications are dropped first. */
export async function shot(page, shots, name) {
  await page.evaluate(() => document.querySelectorAll(".toast").forEach((t) => t.remove()));
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: false });
}
