// Drives the dashboard in headless Chromium. Steps are given by the shell
// test through a control file, so the page is checked between real actions
// on the service:
//   node dashboard_test.mjs URL TASK_ID EXPECT_STATE
// loads the page, waits until the task's row shows, then waits (without
// reloading) until its state cell reads EXPECT_STATE, which the shell test
// causes by acting on the task after "row-seen" is printed.
import { chromium } from "playwright-core";

const [url, taskId, expectState] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const fail = async (msg) => { console.error("FAIL: " + msg); await browser.close(); process.exit(1); };
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url, { waitUntil: "load", timeout: 15000 });
  if ((await page.title()) !== "kclaw") await fail("title is " + (await page.title()));
  // Health shows the orchestrator's version once the API answered.
  await page.waitForFunction(() => /^v\d/.test(document.getElementById("health").textContent), null, { timeout: 15000 });
  // The live socket connects.
  await page.waitForFunction(() => document.getElementById("conn").className === "live", null, { timeout: 15000 });
  const row = page.locator(`#tasks tr[data-id="${taskId}"]`);
  await row.waitFor({ timeout: 15000 });
  console.log("row-seen");
  // Now the shell test changes the task; the page must follow by itself.
  await page.waitForFunction(([id, st]) => {
    const tr = document.querySelector(`#tasks tr[data-id="${id}"]`);
    return tr && tr.cells[2].textContent === st;
  }, [taskId, expectState], { timeout: 30000 });
  console.log("state-seen " + expectState);
  await row.click();
  await page.waitForFunction((id) => document.getElementById("detail-title").textContent.includes(id), taskId, { timeout: 10000 });
  const events = await page.locator("#events div").count();
  if (events < 1) await fail("no events listed");
  if (errors.length) await fail("page errors: " + errors.join("; "));
  await page.screenshot({ path: process.env.SCREENSHOT || "/tmp/kclaw-dashboard.png" });
  console.log("dashboard ok");
} catch (e) {
  await fail(String(e));
}
await browser.close();
