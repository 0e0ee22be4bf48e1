// Result gates in the playground, against `bdk serve --dev examples/gated`:
// the chat shows the reject and the accept of the `signed` gate, and the
// trace shows both verdicts as gate rows between the two steps.
//
// Environment: as surfaces.mjs.

import { env, launch, makeStep, assert, shot } from "./harness.mjs";

const AGENT = env("AGENT_URL");
const SHOTS = env("SHOTS");

const { page, problems, close } = await launch();
const step = makeStep(page, SHOTS);

try {
  await step("the chat shows each verdict of the turn", async () => {
    await page.goto(`${AGENT}/playground`);
    await page.locator("#agent-name", { hasText: "gated" }).waitFor();
    await page.locator("#composer-input").fill("Write the release notes for 1.2");
    await page.locator("#composer-input").press("Enter");
    await page.locator(".part.gate.reject", { hasText: "signature" }).waitFor();
    await page.locator(".part.gate.accept", { hasText: "attempt 2 of 2" }).waitFor();
    await page.locator(".part.text", { hasText: "-- the release bot" }).waitFor();
    await shot(page, SHOTS, "gates-chat");
  });

  await step("the trace lists the verdicts as gate rows", async () => {
    await page.locator('#tabs a[data-tab="runs"]').click();
    const row = page.locator("tr[data-session-id]").first();
    await row.waitFor();
    const id = await row.getAttribute("data-session-id");
    await page.goto(`${AGENT}/playground#/trace/${id}`);
    await page.locator(".trace-turn.completed").first().waitFor();
    const rows = page.locator(".trace-row.gate");
    await rows.nth(1).waitFor();
    assert((await rows.count()) === 2, "two gate rows");
    assert((await rows.nth(0).innerText()).includes("signed: reject (attempt 1 of 2)"), "the reject comes first");
    assert((await rows.nth(1).innerText()).includes("signed: accept (attempt 2 of 2)"), "then the accept");
    await shot(page, SHOTS, "gates-trace");
  });

  await step("no page errors", async () => {
    assert(problems.length === 0, problems.join("\n"));
  });
} catch {
  process.exitCode = 1;
} finally {
  await close();
}
