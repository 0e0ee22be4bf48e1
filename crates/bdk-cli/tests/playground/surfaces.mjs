// End-to-end test of the playground against a real `bdk serve --dev` of the
// weather example (with the playground-weather overlay): chat, follow-up,
// reconnect, stop, approvals, slash commands, runs, trace, raw, local trace
// files, the agent surface with Try, logs, the A/Bs tab, narrow and dark layouts.
//
// Environment: AGENT_URL (http://host:port/<slug>), CHROMIUM, PLAYWRIGHT_DIR,
// SHOTS (screenshot directory), WORK (a scratch directory).

import fs from "node:fs";
import path from "node:path";
import { env, launch, makeStep, assert, shot } from "./harness.mjs";

const AGENT = env("AGENT_URL");
const SHOTS = env("SHOTS");
const WORK = env("WORK");

const { page, problems, close } = await launch();
const step = makeStep(page, SHOTS);
const composer = page.locator("#composer-input");

async function send(text) {
  await composer.fill(text);
  await composer.press("Enter");
}

// Every stream request the page makes, to see reconnects resume.
const streams = [];
page.on("request", (r) => {
  const m = r.url().match(/\/stream\?startIndex=(\d+)$/);
  if (m) streams.push(Number(m[1]));
});

const sessionOf = () => decodeURIComponent(new URL(page.url()).hash.replace(/^#\/chat\//, ""));
const ids = {};

try {
  await step("page loads with the agent name and no CSP violations", async () => {
    const resp = await page.goto(`${AGENT}/playground`);
    assert(resp.status() === 200, `status ${resp.status()}`);
    assert((resp.headers()["content-security-policy"] || "").includes("script-src 'self'"), "CSP header");
    await page.locator("#agent-name", { hasText: "weather" }).waitFor();
    await page.locator(".welcome").waitFor();
  });

  await step("chat streams a reply with the get_weather tool call", async () => {
    await send("What's the weather in Paris?");
    await page.waitForURL(/#\/chat\/ses_/);
    ids.first = sessionOf();
    const tool = page.locator('.part.tool:has(.tool-name:text-is("get_weather"))');
    await tool.waitFor();
    await page.locator(".part.tool.ok .tool-status", { hasText: "done" }).first().waitFor();
    const args = await tool.locator(".tool-args").textContent();
    assert(args.includes('"city":"Paris"'), `tool arguments: ${args}`);
    const out = await tool.locator(".tool-output pre").textContent();
    assert(out.includes('"simulated": true'), `tool output: ${out}`);
    await page.locator(".msg.assistant .part.text", { hasText: "in Paris (simulated data)" }).waitFor();
    await page.locator(".msg.assistant .part.reasoning").first().waitFor({ state: "attached" });
    await page.locator(".turn-meta", { hasText: "tokens" }).first().waitFor();
  });

  await step("follow-up uses the rotated token", async () => {
    await send("And the weather in Tokyo?");
    await page.locator(".msg.assistant .part.text", { hasText: "in Tokyo (simulated data)" }).waitFor();
    assert((await page.locator(".msg.user").count()) === 2, "two user messages");
    assert((await page.locator(".toast.error").count()) === 0, "no error toast");
  });

  await step("reconnect after a dropped stream resumes without duplicates", async () => {
    const before = streams.length;
    await page.evaluate(() => window.bdkPlayground.dropStream());
    await page.waitForFunction(() => document.querySelector(".conn.live"));
    await send("Show me some markdown");
    const reply = page.locator(".msg.assistant .part.text", { hasText: "Checking the forecast" });
    await reply.waitFor();
    await reply.locator("pre.code .tk-k", { hasText: "def" }).waitFor();
    await reply.locator("strong", { hasText: "get_weather" }).waitFor();
    await page.locator(".turn-meta", { hasText: "tokens" }).nth(2).waitFor();
    await page.locator(".conn.live").waitFor();
    // Every event once: three user messages, three turns, one tool call each for the first two.
    assert((await page.locator(".msg.user").count()) === 3, "three user messages");
    const turns = await page.locator(".msg.assistant").evaluateAll((els) => els.map((e) => e.dataset.turn));
    assert(turns.length === 3 && new Set(turns).size === 3, `turns: ${turns}`);
    assert((await page.locator(".part.tool").count()) === 2, "two tool cards");
    assert(streams.length > before, "the page reconnected");
    assert(streams.at(-1) > 0, `the reconnect resumed after the last event (startIndex=${streams.at(-1)})`);
    await shot(page, SHOTS, "chat");
  });

  await step("Esc stops a slow turn", async () => {
    await send("Be slow, please");
    await page.locator("#stop").waitFor();
    // Drop the stream mid-turn too: the end of the turn arrives after the reconnect.
    await page.evaluate(() => window.bdkPlayground.dropStream());
    await composer.press("Escape");
    await page.locator(".part.failure.cancelled", { hasText: "Stopped." }).waitFor();
    await page.locator("#stop").waitFor({ state: "hidden" });
    await page.locator(".conn.live").waitFor();
    assert((await page.locator(".part.failure").count()) === 1, "one stopped turn");
    assert((await page.locator(".msg.user").count()) === 4, "four user messages");
  });

  await step("a parked call is approved from the chat", async () => {
    await page.getByRole("button", { name: "New chat" }).click();
    await page.locator(".welcome").waitFor();
    await send("Please deploy the build");
    await page.waitForURL(/#\/chat\/ses_/);
    ids.deploy = sessionOf();
    const card = page.locator('.part.tool.awaiting:has(.tool-name:text-is("deploy"))');
    await card.waitFor();
    assert((await card.locator(".tool-args").textContent()).includes("staging"), "deploy arguments");
    await shot(page, SHOTS, "approval");
    await card.getByRole("button", { name: "Approve" }).click();
    await page.locator('.part.tool.ok:has(.tool-name:text-is("deploy")) .tool-status', { hasText: "done" }).waitFor();
    await page.locator(".part.text", { hasText: "Deployed 1.4.2 to staging" }).waitFor();
  });

  await step("/help and slash-command autocomplete call a channel route", async () => {
    await page.getByRole("button", { name: "New chat" }).click();
    await composer.fill("/he");
    await page.locator(".suggest li", { hasText: "/help" }).waitFor();
    await send("/help");
    await page.locator(".note.help code", { hasText: "/drive" }).waitFor();
    await composer.fill("/dr");
    await page.locator(".suggest li", { hasText: "/drive" }).waitFor();
    await composer.press("Tab");
    assert((await composer.inputValue()) === "/drive ", `completed: ${await composer.inputValue()}`);
    await composer.type("What's the weather in Oslo?");
    await composer.press("Enter");
    await page.locator(".msg.assistant .part.text", { hasText: "in Oslo (simulated data)" }).waitFor();
    ids.drive = sessionOf();
    assert(ids.drive.startsWith("ses_") && ![ids.first, ids.deploy].includes(ids.drive), `drive session ${ids.drive}`);
  });

  await step("runs lists the sessions and Enter opens an id", async () => {
    await page.locator('#tabs a[data-tab="runs"]').click();
    for (const id of [ids.first, ids.deploy, ids.drive]) await page.locator(`tr[data-session-id="${id}"]`).waitFor();
    await shot(page, SHOTS, "runs");
    await page.locator("#runs-search").fill(ids.deploy.slice(0, 12));
    assert((await page.locator("tbody tr").count()) >= 1, "search keeps the match");
    await page.locator("#runs-search").fill(ids.deploy);
    await page.locator("#runs-search").press("Enter");
    await page.waitForURL(new RegExp(`#/chat/${ids.deploy}$`));
    await page.locator(".part.text", { hasText: "Deployed 1.4.2 to staging" }).waitFor();
    await page.locator(".part.tool.ok", { hasText: "approved" }).waitFor({ state: "detached" }).catch(() => {});
  });

  await step("trace shows turns, steps and tool calls with durations", async () => {
    await page.goto(`${AGENT}/playground#/trace/${ids.first}`);
    await page.locator(".trace-turn.completed").nth(2).waitFor();
    assert((await page.locator(".trace-turn.cancelled").count()) === 1, "the stopped turn is cancelled");
    const tool = page.locator(".trace-row.tool", { hasText: "get_weather" }).first();
    await tool.waitFor();
    const dur = await tool.locator(".dur").textContent();
    assert(/\d+(\.\d+)? (ms|s)/.test(dur), `tool duration: ${dur}`);
    await tool.locator("summary").first().click();
    await tool.locator(".trace-detail pre", { hasText: "Paris" }).first().waitFor();
    await shot(page, SHOTS, "trace");
  });

  let raw;
  await step("raw shows the exact NDJSON", async () => {
    await page.locator("#view-trace a.btn", { hasText: "Raw" }).click();
    await page.waitForURL(/#\/raw\//);
    await page.locator("#raw-ndjson", { hasText: '"type":"session.started"' }).waitFor();
    raw = await page.locator("#raw-ndjson").textContent();
    const expected = await page.evaluate(async (url) => (await fetch(url)).text(), `${AGENT}/v1/session/${ids.first}/events`);
    assert(raw === expected, "the raw view matches the events route byte for byte");
    await shot(page, SHOTS, "raw");
  });

  await step("Open trace renders a local events.ndjson", async () => {
    const file = path.join(WORK, "events.ndjson");
    fs.writeFileSync(file, raw);
    await page.locator('#tabs a[data-tab="runs"]').click();
    await page.locator("#trace-file").setInputFiles(file);
    await page.locator(".page.trace", { hasText: "Loaded from a local file" }).waitFor();
    await page.locator(".trace-row.tool", { hasText: "get_weather" }).first().waitFor();
  });

  await step("agent surface lists tools, channels and Try opens the created session", async () => {
    await page.locator('#tabs a[data-tab="agent"]').click();
    await page.locator("#agent-tools .mono.strong", { hasText: "get_weather" }).waitFor();
    await page.locator("#agent-tools .chip.warn", { hasText: "needs approval" }).waitFor();
    // Every tool names where it comes from.
    await page.locator("#agent-tools .chip[data-source=\"manifest\"]", { hasText: "manifest" }).first().waitFor();
    // A connection that failed to start shows its error.
    await page.locator("#agent-mcp li.has-error .failure-text", { hasText: "initialization failed" }).waitFor();
    await shot(page, SHOTS, "agent");
    await page.locator('#agent-channels button[data-try="POST /v1/channels/drive"]').click();
    const body = page.locator("#try-body");
    await body.fill('{"text": "What\'s the weather in Rome?"}');
    await page.locator("#try-send").click();
    await page.locator("#try-result .pill", { hasText: "202" }).waitFor();
    await shot(page, SHOTS, "try");
    await page.locator("#try-result a", { hasText: "Open session" }).click();
    await page.locator(".msg.assistant .part.text", { hasText: "in Rome (simulated data)" }).waitFor();
    // The body is remembered per endpoint.
    await page.locator('#tabs a[data-tab="agent"]').click();
    await page.locator('#agent-channels button[data-try="POST /v1/channels/drive"]').click();
    assert((await page.locator("#try-body").inputValue()).includes("Rome"), "remembered body");
    await page.keyboard.press("Escape");
  });

  await step("dev dispatch: a schedule and a reminder run from the Agent tab", async () => {
    // A reminder, set by the agent in a conversation.
    await page.locator('#tabs a[data-tab="chat"]').click();
    await page.getByRole("button", { name: "New chat" }).click();
    await send("Please remind me to check again");
    await page.locator(".part.text", { hasText: "I will check the weather in Paris again" }).waitFor();
    ids.reminder = sessionOf();
    await page.locator('#tabs a[data-tab="agent"]').click();
    await page.locator("#agent-schedules .mono.strong", { hasText: "morning-report" }).waitFor();
    await page.locator("#agent-reminders .btn", { hasText: "Fire now" }).first().click();
    await page.locator(".toast", { hasText: "fired" }).waitFor();
    await page.goto(`${AGENT}/playground#/chat/${ids.reminder}`);
    await page.locator(".msg.user", { hasText: "Check the weather in Paris again." }).waitFor();
    // The example's rule reads the city as "Paris again".
    await page.locator(".part.text", { hasText: "in Paris again (simulated data)" }).waitFor();
    // The schedule starts a task session, which opens in Chat.
    await page.locator('#tabs a[data-tab="agent"]').click();
    await page.locator("#agent-schedules .btn", { hasText: "Dispatch now" }).click();
    await page.waitForURL((u) => u.hash.startsWith("#/chat/ses_") && !u.hash.endsWith(ids.reminder));
    await page.locator(".part.text", { hasText: "in Berlin (simulated data)" }).waitFor();
    await page.locator(".note", { hasText: "schedule channel" }).waitFor();
  });

  await step("logs are polled with the cursor", async () => {
    await page.locator('#tabs a[data-tab="logs"]').click();
    await page.locator(".log-line").first().waitFor();
    // New lines arrive on the next polls, after the cursor.
    const before = await page.locator(".log-line").count();
    await page.evaluate((url) => fetch(url), `${AGENT}/v1/health`);
    await page.waitForFunction((n) => document.querySelectorAll(".log-line").length > n, before);
    const cursors = await page.evaluate(async (url) => (await (await fetch(url)).json()).lines.map((l) => l.cursor), `${AGENT}/v1/logs?after=0&limit=1000`);
    assert(new Set(cursors).size === cursors.length, "cursors are unique");
    const shown = await page.locator(".log-line").count();
    assert(shown <= cursors.length + 2, `no line shown twice (${shown} shown, ${cursors.length} served)`);
    await shot(page, SHOTS, "logs");
  });

  await step("the A/Bs tab shows the arms and the assignments", async () => {
    await page.locator('#tabs a[data-tab="abs"]').click();
    const card = page.locator('#abs section[data-experiment="greeting"]');
    await card.waitFor();
    await card.locator('tr[data-arm="left"]').waitFor();
    await card.locator('tr[data-arm="right"]').waitFor();
    // The figures are the server's: the tab shows every assignment /v1/abs lists.
    const served = await page.evaluate(async (url) => (await (await fetch(url)).json()).experiments[0], `${AGENT}/v1/abs?limit=50`);
    assert(served.totals.sessions > 0, "the earlier chats were enrolled");
    await page.waitForFunction((n) => document.querySelectorAll("#abs .ab-sessions tbody tr").length === n, served.sessions.length);
    await shot(page, SHOTS, "abs");
  });

  await step("narrow and dark layouts", async () => {
    await page.goto(`${AGENT}/playground#/chat/${ids.first}`);
    await page.locator(".part.text", { hasText: "in Tokyo" }).waitFor();
    await page.emulateMedia({ colorScheme: "dark" });
    await shot(page, SHOTS, "chat-dark");
    await page.setViewportSize({ width: 390, height: 844 });
    await page.emulateMedia({ colorScheme: "light" });
    await shot(page, SHOTS, "chat-narrow");
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1);
    assert(!overflow, "no horizontal scrolling on a narrow screen");
    await page.setViewportSize({ width: 1280, height: 820 });
  });

  await step("no page errors", async () => {
    assert(problems.length === 0, problems.join("\n"));
  });
} catch {
  // The failing step has printed what went wrong.
  process.exitCode = 1;
} finally {
  await close();
}
