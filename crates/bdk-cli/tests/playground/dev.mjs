// The playground under `bdk dev`: it notices a reload (the agent page shows
// the new version, a toast says so), reports a change that does not load
// (banner and a card with the diagnostic) while chat keeps working on the
// last good version, and clears the report once the folder loads again.
//
// Environment: as surfaces.mjs, plus AGENT_DIR (the agent folder `bdk dev`
// watches, which this script edits).

import { readFileSync, writeFileSync } from "node:fs";
import { env, launch, makeStep, assert, shot } from "./harness.mjs";

const AGENT = env("AGENT_URL");
const SHOTS = env("SHOTS");
const MANIFEST = `${env("AGENT_DIR")}/agent/agent.toml`;
const original = readFileSync(MANIFEST, "utf8");

const { page, problems, close } = await launch();
const step = makeStep(page, SHOTS);

try {
  await step("the agent page shows the served version", async () => {
    await page.goto(`${AGENT}/playground#/agent`);
    await page.locator(".page-head h1", { hasText: "weather" }).waitFor();
  });

  await step("an edit is noticed without a page reload", async () => {
    writeFileSync(MANIFEST, original.replace(/^description = .*$/m, 'description = "Edited while the page was open."'));
    await page.locator(".toast", { hasText: "Agent reloaded: version 2" }).waitFor();
    await page.locator(".page-head p", { hasText: "Edited while the page was open." }).waitFor();
  });

  await step("a change that does not load is reported, and chat keeps working", async () => {
    writeFileSync(MANIFEST, 'model = 5\n');
    await page.locator("#banner", { hasText: "does not load; still serving version 2" }).waitFor();
    await page.locator("#agent-reload", { hasText: "agent/agent.toml" }).waitFor();
    await page.locator("#agent-reload", { hasText: "must be a string" }).waitFor();
    await shot(page, SHOTS, "dev-reload-failed");
    await page.locator('#tabs a[data-tab="chat"]').click();
    await page.locator("#composer-input").fill("What's the weather in Paris?");
    await page.locator("#composer-input").press("Enter");
    await page.locator(".part.text", { hasText: "in Paris (simulated data)" }).waitFor();
  });

  await step("the folder loads again: the report clears", async () => {
    writeFileSync(MANIFEST, original);
    await page.locator(".toast", { hasText: "Agent reloaded: version 3" }).waitFor();
    await page.locator("#banner").waitFor({ state: "hidden" });
    await page.locator('#tabs a[data-tab="agent"]').click();
    await page.locator(".page-head p", { hasText: "Answers questions about current weather" }).waitFor();
    assert((await page.locator("#agent-reload").count()) === 0, "no reload card once the folder loads");
  });

  await step("no page errors", async () => {
    assert(problems.length === 0, problems.join("\n"));
  });
} catch {
  process.exitCode = 1;
} finally {
  await close();
}
