// The Evals tab against the eval routes of a real `bdk serve --dev`: list
// the cases, run a tag and cancel it, run a selection to completion, and
// read a failure down to the event that broke it.
//
// Environment: as surfaces.mjs.

import { env, launch, makeStep, assert, shot } from "./harness.mjs";

const AGENT = env("AGENT_URL");
const SHOTS = env("SHOTS");

const { page, problems, close } = await launch();
const step = makeStep(page, SHOTS);
const status = page.locator("#eval-status");

try {
  await step("the cases are listed with their tags", async () => {
    await page.goto(`${AGENT}/playground#/evals`);
    await page.locator('.cases li[data-case-id="playground/wrong-city"]').waitFor();
    await page.locator('.cases li[data-case-id="weather/current-conditions"] .chip', { hasText: "tools" }).waitFor();
  });

  await step("a run by tag can be cancelled", async () => {
    await page.locator("#evals-tag").selectOption("slow");
    await page.getByRole("button", { name: "Run tag" }).click();
    await status.filter({ hasText: "running" }).waitFor();
    await page.locator('.result[data-case-id="playground/held-turn"]').waitFor();
    await page.locator("#evals-cancel").click();
    await status.filter({ hasText: "cancelled" }).waitFor({ timeout: 60000 });
    assert((await page.locator("#evals-cancel").count()) === 0, "no cancel button on a finished run");
  });

  await step("a selection runs to completion and shows the broken assertion", async () => {
    await page.locator('.cases li[data-case-id="weather/current-conditions"] input[type="checkbox"]').check();
    await page.locator('.cases li[data-case-id="playground/wrong-city"] input[type="checkbox"]').check();
    await page.locator("#evals-run-selected").click();
    await page.locator('#eval-run .run[data-status="failed"], #eval-run .run[data-status="completed"]').waitFor({ timeout: 90000 });
    await page.locator('.result[data-case-id="weather/current-conditions"][data-status="passed"]').waitFor();
    const failing = page.locator('.result[data-case-id="playground/wrong-city"][data-status="failed"]');
    await failing.waitFor();
    await failing.locator(".failure", { hasText: "calledTool" }).first().waitFor();
    const broken = failing.locator(".broken-at a").first();
    await broken.waitFor();
    const label = await broken.textContent();
    assert(/#\d+ \S+/.test(label), `event reference: ${label}`);
    await shot(page, SHOTS, "evals");
    await broken.click();
    await page.waitForURL(/#\/trace\/ses_/);
    await page.locator(".trace-row.tool", { hasText: "get_weather" }).first().waitFor();
  });

  await step("the runs are listed newest first", async () => {
    await page.locator('#tabs a[data-tab="evals"]').click();
    await page.locator(".history li").nth(1).waitFor();
    const first = await page.locator(".history li .pill").first().textContent();
    assert(["failed", "completed"].includes(first), `newest run status: ${first}`);
  });

  await step("Runs lists the eval runs and opens one in Evals", async () => {
    await page.locator('#tabs a[data-tab="runs"]').click();
    const cancelled = page.locator(".eval-runs tr", { has: page.locator(".pill.cancelled") }).first();
    await cancelled.waitFor();
    const runId = await cancelled.getAttribute("data-run-id");
    await cancelled.locator("a").click();
    await page.locator(`#eval-run .run[data-run-id="${runId}"][data-status="cancelled"]`).waitFor();
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
