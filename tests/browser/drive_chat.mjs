// Drives the chat widget in Debian's chromium (headless, through playwright-core) and prints
// what a person would have seen as one JSON object; tests/browser/test_chat_widget.py asserts
// on it. No browser is downloaded: the system's /usr/bin/chromium is launched.
//
//   node tests/browser/drive_chat.mjs <page url> <screenshot.png> <question>...

import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(new URL("../../web/package.json", import.meta.url));
const { chromium } = require("playwright-core");

const [url, screenshot, ...questions] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const profile = mkdtempSync(join(tmpdir(), "ragagent-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath,
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
  viewport: { width: 900, height: 900 },
});
const result = { turns: [], console: [], sessions: [] };
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("console", (message) => result.console.push(`${message.type()}: ${message.text()}`));
  page.on("pageerror", (error) => result.console.push(`pageerror: ${error.message}`));
  await page.goto(url, { waitUntil: "load" });
  await page.waitForSelector(".ragagent-input");
  // Every change of the last answer's text, with its time: growth over time, not one paint.
  await page.evaluate(() => {
    window.__answers = [];
    new MutationObserver(() => {
      const answers = document.querySelectorAll(".ragagent-answer");
      const last = answers[answers.length - 1];
      if (!last) return;
      window.__answers.push({ turn: answers.length, at: performance.now(), length: last.textContent.length });
    }).observe(document.querySelector(".ragagent-log"), { childList: true, subtree: true, characterData: true });
  });
  for (const [index, question] of questions.entries()) {
    await page.fill(".ragagent-input", question);
    await page.click(".ragagent-send");
    await page.waitForSelector(`.ragagent-turn:nth-child(${index + 1})[data-done]`, { timeout: 60_000 });
    const turn = page.locator(".ragagent-turn").nth(index);
    result.turns.push(
      await turn.evaluate((node) => ({
        question: node.querySelector(".ragagent-question")?.textContent ?? "",
        answer: node.querySelector(".ragagent-answer")?.textContent ?? "",
        status: node.querySelector(".ragagent-status")?.textContent ?? "",
        error: node.querySelector(".ragagent-error")?.textContent ?? "",
        tools: [...node.querySelectorAll(".ragagent-tool")].map((row) => row.textContent),
        citations: [...node.querySelectorAll("a.ragagent-cite")].map((a) => ({ text: a.textContent, href: a.href })),
        sources: [...node.querySelectorAll(".ragagent-source a")].map((a) => a.href),
      })),
    );
    result.sessions.push(await page.evaluate(() => sessionStorage.getItem("ragagent-chat-session")));
  }
  result.lengths = await page.evaluate(() => window.__answers);
  await page.screenshot({ path: screenshot, fullPage: true });
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
process.stdout.write(JSON.stringify(result));
