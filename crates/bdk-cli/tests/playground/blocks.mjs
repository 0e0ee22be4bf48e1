// A tool's MCP content blocks in the chat, against an agent whose `chart`
// tool answers with text, an image, audio, an embedded resource and an image
// of a type the playground does not render: each shows as what it is, the
// image decodes (the page's policy admits `data:` images), and the SVG is
// only named.
//
// Environment: as surfaces.mjs.

import { env, launch, makeStep, assert, shot } from "./harness.mjs";

const AGENT = env("AGENT_URL");
const SHOTS = env("SHOTS");

const { page, problems, close } = await launch();
const step = makeStep(page, SHOTS);

try {
  await step("the tool's blocks render in its card", async () => {
    await page.goto(`${AGENT}/playground`);
    await page.locator("#agent-name", { hasText: "charts" }).waitFor();
    await page.locator("#composer-input").fill("Draw the chart");
    await page.locator("#composer-input").press("Enter");
    await page.locator(".part.text", { hasText: "Here it is." }).waitFor();
    const blocks = page.locator(".tool-output .blocks");
    await blocks.waitFor();
    assert((await blocks.locator("pre.block.text").innerText()) === "Rendered the chart.", "the text block");
    const img = blocks.locator("img.block.image");
    assert((await img.count()) === 1, "one rendered image");
    const width = await img.evaluate((el) => (el.complete ? el.naturalWidth : -1));
    assert(width === 1, `the PNG decodes (naturalWidth ${width})`);
    assert((await blocks.locator("audio.block.audio").count()) === 1, "an audio player");
    const resource = await blocks.locator(".block.resource").innerText();
    assert(resource.includes("chart://q3") && resource.includes("Q3 went up."), `the resource: ${resource}`);
    const named = await blocks.locator(".block.muted").innerText();
    assert(named.includes("[image: image/svg+xml"), `the SVG is named, not shown: ${named}`);
    await shot(page, SHOTS, "blocks-chat");
  });

  await step("no page errors", async () => {
    assert(problems.length === 0, problems.join("\n"));
  });
} catch {
  process.exitCode = 1;
} finally {
  await close();
}
