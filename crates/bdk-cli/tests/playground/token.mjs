// The token field against `bdk serve --bearer-token`: without a token the
// API refuses and the page says what to do; with one, chat works and the
// session belongs to the token's principal.
//
// Environment: as surfaces.mjs, plus TOKEN.

import { env, launch, makeStep, assert, shot } from "./harness.mjs";

const AGENT = env("AGENT_URL");
const SHOTS = env("SHOTS");
const TOKEN = env("TOKEN");

const { page, problems, close } = await launch();
const step = makeStep(page, SHOTS);

try {
  await step("without a token the page asks for one", async () => {
    await page.goto(`${AGENT}/playground`);
    await page.locator("#agent-name", { hasText: "weather" }).waitFor();
    await page.locator("#banner", { hasText: "token" }).waitFor();
    await page.locator("#composer-input").fill("What's the weather in Paris?");
    await page.locator("#composer-input").press("Enter");
    await page.locator(".toast.error", { hasText: "unauthorized" }).waitFor();
  });

  await step("with the token, chat works and the token is kept", async () => {
    await page.locator("#token").fill(TOKEN);
    await page.locator("#token").press("Tab");
    await page.locator("#banner").waitFor({ state: "hidden" });
    await page.locator("#composer-input").fill("What's the weather in Paris?");
    await page.locator("#composer-input").press("Enter");
    await page.locator(".part.text", { hasText: "in Paris (simulated data)" }).waitFor();
    await page.reload();
    assert((await page.locator("#token").inputValue()) === TOKEN, "the token survives a reload");
    await page.locator('#tabs a[data-tab="runs"]').click();
    await page.locator("tbody tr td", { hasText: "ops" }).first().waitFor();
    await shot(page, SHOTS, "runs-bearer");
  });

  await step("no page errors", async () => {
    assert(problems.length === 0, problems.join("\n"));
  });
} catch {
  process.exitCode = 1;
} finally {
  await close();
}
