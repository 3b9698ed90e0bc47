// Drives the dashboard in headless Chromium (Playwright). Two modes:
//
//   node dashboard_test.mjs follow URL TASK_ID EXPECT_STATE
//     loads the page, waits until the task's row shows, prints "row-seen",
//     then waits (without reloading) until its state cell reads
//     EXPECT_STATE, which the shell test causes by acting on the task.
//
//   node dashboard_test.mjs pages URL DONE_ID FAILED_ID SHOTS_DIR
//     at 1280 and 1920 px (and 1400 for the columns): the task list (every column visible without
//     scrolling sideways, the figures and the stop reasons of both tasks),
//     the DONE task's page reached by its link (state, stop reason,
//     reference and best time, speedup, tokens, cost, downloads; the plot's
//     best and base lines, legend and seed labels), and the FAILED task's
//     page loaded directly by its URL; screenshots in SHOTS_DIR.
import { chromium } from "playwright-core";

const [mode, url, ...rest] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const fail = async (msg) => { console.error("FAIL: " + msg); await browser.close(); process.exit(1); };
const expect = async (cond, msg) => { if (!cond) await fail(msg); };

async function follow(taskId, expectState) {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url, { waitUntil: "load", timeout: 15000 });
  await expect((await page.title()) === "kclaw", "title is " + (await page.title()));
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
  // The stop reason shows in the list as soon as the task ended.
  await page.waitForFunction((id) => document.querySelector(`#tasks tr[data-id="${id}"]`).cells[8].textContent === "cancelled",
    taskId, { timeout: 10000 });
  await row.click();
  await page.waitForFunction((id) => document.getElementById("detail-title").textContent.includes(id), taskId, { timeout: 10000 });
  await expect(new URL(page.url()).pathname === "/task/" + taskId, "the task page's URL is " + page.url());
  await page.waitForFunction(() => document.querySelectorAll("#task-events div").length > 0, null, { timeout: 10000 });
  await expect(!errors.length, "page errors: " + errors.join("; "));
  console.log("follow ok");
}

// Every header and cell of the task list lies inside the table's section,
// and nothing scrolls sideways.
async function checkColumns(page, width) {
  const r = await page.evaluate(() => {
    const sec = document.getElementById("tasks-section"), sr = sec.getBoundingClientRect();
    const out = { docScroll: document.documentElement.scrollWidth, inner: window.innerWidth,
      secScroll: sec.scrollWidth, secClient: sec.clientWidth, bad: [], clipped: [] };
    for (const th of document.querySelectorAll("#tasks th")) {
      const b = th.getBoundingClientRect();
      if (b.left < sr.left || b.right > sr.right || b.width < 30) out.bad.push(`${th.textContent} [${b.left.toFixed(0)}, ${b.right.toFixed(0)}]`);
    }
    // The figures are never cut (the name and the reason may be, with an
    // ellipsis and the full text in their title).
    for (const tr of document.querySelectorAll("#tasks tbody tr"))
      for (const i of [0, 2, 3, 4, 5, 6, 7]) {
        const td = tr.cells[i];
        if (td.scrollWidth > td.clientWidth) out.clipped.push(`${tr.dataset.id}: column ${i} "${td.textContent}"`);
      }
    return out;
  });
  await expect(r.docScroll <= r.inner, `${width}px: the page scrolls sideways (${r.docScroll} > ${r.inner})`);
  await expect(r.secScroll <= r.secClient, `${width}px: the task list scrolls sideways (${r.secScroll} > ${r.secClient})`);
  await expect(r.bad.length === 0, `${width}px: columns outside the list: ${r.bad.join(", ")}`);
  await expect(r.clipped.length === 0, `${width}px: figures cut: ${r.clipped.join(", ")}`);
  const heads = await page.$$eval("#tasks th", (ths) => ths.map((t) => t.textContent));
  for (const h of ["best ms", "speedup", "tokens", "cost", "why it ended"])
    await expect(heads.includes(h), `no column "${h}" (${heads.join(", ")})`);
}

const usd = (c) => "$" + c.toFixed(c > 0 && c < 1 ? 4 : 2);
const cell = (page, id, i) => page.$eval(`#tasks tr[data-id="${id}"]`, (tr, i) => tr.cells[i].textContent, i);
const field = (page, k) => page.$eval(`#facts dd[data-field="${k}"]`, (d) => d.textContent);

async function pages(doneId, failedId, shots) {
  // 1400 px, where the columns used to hide behind a scrollbar.
  {
    const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    const page = await ctx.newPage();
    await page.goto(url, { waitUntil: "load", timeout: 15000 });
    await page.locator(`#tasks tr[data-id="${failedId}"]`).waitFor({ timeout: 15000 });
    await checkColumns(page, 1400);
    await ctx.close();
  }
  for (const width of [1280, 1920]) {
    const ctx = await browser.newContext({ viewport: { width, height: 900 } });
    const page = await ctx.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(url, { waitUntil: "load", timeout: 15000 });
    await page.locator(`#tasks tr[data-id="${doneId}"]`).waitFor({ timeout: 15000 });
    await page.locator(`#tasks tr[data-id="${failedId}"]`).waitFor({ timeout: 15000 });
    await page.waitForFunction(() => /^v\d/.test(document.getElementById("health").textContent), null, { timeout: 15000 });
    await page.waitForFunction(() => document.querySelectorAll("#procs tbody tr").length > 0, null, { timeout: 15000 });
    const t = (await (await page.request.get(url + "api/tasks/" + doneId)).json()).task;
    await checkColumns(page, width);
    // The DONE task's row: its figures as the API has them.
    await expect((await cell(page, doneId, 2)) === "DONE", "state " + (await cell(page, doneId, 2)));
    await expect((await cell(page, doneId, 3)) === `${t.round}/${t.max_rounds}`, "round " + (await cell(page, doneId, 3)));
    await expect((await cell(page, doneId, 4)) === t.best_ms.toFixed(4), "best ms " + (await cell(page, doneId, 4)));
    await expect((await cell(page, doneId, 5)) === t.speedup.toFixed(2), "speedup " + (await cell(page, doneId, 5)));
    await expect((await cell(page, doneId, 6)) === t.tokens.toLocaleString("en-US"), "tokens " + (await cell(page, doneId, 6)));
    await expect(t.cost_usd > 0 && (await cell(page, doneId, 7)) === usd(t.cost_usd), "cost " + (await cell(page, doneId, 7)));
    await expect((await cell(page, doneId, 8)) === "stopped: round budget spent", "why " + (await cell(page, doneId, 8)));
    await expect((await cell(page, failedId, 2)) === "FAILED", "failed state " + (await cell(page, failedId, 2)));
    await expect((await cell(page, failedId, 8)).startsWith("no seed: every Generator job"), "failed why " + (await cell(page, failedId, 8)));
    await page.screenshot({ path: `${shots}/list-${width}.png` });

    // The DONE task's page, by its link.
    await page.click(`#tasks tr[data-id="${doneId}"] a`);
    await page.waitForFunction(() => document.querySelector('#facts dd[data-field="download"]'), null, { timeout: 10000 });
    await expect(new URL(page.url()).pathname === "/task/" + doneId, "task page URL " + page.url());
    await expect(await page.isHidden("#list-view"), "the list still shows on the task page");
    await expect((await field(page, "state")).startsWith("DONE"), "state field: " + (await field(page, "state")));
    await expect((await field(page, "stop")) === "stopped: round budget spent", "stop field: " + (await field(page, "stop")));
    await expect((await page.$('#facts dd[data-field="agent"]')) === null, "an agent error row on a task whose jobs succeeded");
    await expect((await field(page, "rounds")).startsWith(`${t.round}/${t.max_rounds}`), "rounds field: " + (await field(page, "rounds")));
    await expect((await field(page, "reference")).startsWith(t.reference_ms.toFixed(4) + " ms"), "reference field: " + (await field(page, "reference")));
    await expect((await field(page, "best")).startsWith(t.best_ms.toFixed(4) + " ms"), "best field: " + (await field(page, "best")));
    await expect((await field(page, "speedup")).startsWith(t.speedup.toFixed(2) + "×"), "speedup field: " + (await field(page, "speedup")));
    const tok = await field(page, "tokens");
    const sum = (k) => t.usage.reduce((a, u) => a + u[k], 0).toLocaleString("en-US");
    await expect(tok.startsWith(t.tokens.toLocaleString("en-US")) && tok.includes("reasoning " + sum("reasoning_tokens")) &&
      tok.includes("cached " + sum("cached_tokens")), "tokens field: " + tok);
    await expect((await field(page, "cost")) === usd(t.cost_usd), "cost field: " + (await field(page, "cost")));
    const links = await page.$$eval('#facts dd[data-field="download"] a', (as) => as.map((a) => a.getAttribute("href")));
    await expect(links.includes(`/api/result/${doneId}/kernel.tar`) && links.includes(`/api/result/${doneId}/kernel.cu`) &&
      links.includes(`/api/result/${doneId}/plan.json`), "download links: " + links.join(", "));
    const tar = await page.request.get(url.replace(/\/$/, "") + `/api/result/${doneId}/kernel.tar`);
    await expect(tar.ok() && tar.headers()["content-type"] === "application/x-tar", "kernel.tar: " + tar.status());
    // The usage table: one row per role.
    await expect((await page.$$("#usage tbody tr")).length === t.usage.length, "usage rows");
    // The plot: best, then base over it (dashed), a legend, labelled seeds.
    const p = await page.evaluate(() => {
      const svg = document.getElementById("plot"), ids = [...svg.children].map((c) => c.id).filter(Boolean);
      const best = svg.querySelector("#plot-best path"), base = svg.querySelector("#plot-base path");
      return { ids, best: best && best.getAttribute("d"), base: base && base.getAttribute("d"),
        dash: base && base.getAttribute("stroke-dasharray"), bestColor: best && best.getAttribute("stroke"),
        baseColor: base && base.getAttribute("stroke"),
        legend: (svg.querySelector("#plot-legend") || {}).textContent || "",
        seeds: [...svg.querySelectorAll(".seed-label")].map((s) => s.textContent) };
    });
    await expect(p.best && p.best.length > 10 && p.base && p.base.length > 10, "plot lines: " + JSON.stringify(p));
    await expect(p.ids.indexOf("plot-base") > p.ids.indexOf("plot-best"), "the base line is drawn under the best: " + p.ids.join(","));
    await expect(p.dash && p.baseColor !== p.bestColor, "the base line looks like the best");
    await expect(p.legend.includes("best so far") && p.legend.includes("base"), "legend: " + p.legend);
    const nseeds = (await (await page.request.get(url + "api/result/" + doneId)).json()).history.filter((h) => h.candidate.origin === "generator").length;
    await expect(p.seeds.length === nseeds && p.seeds.some((s) => s.startsWith("seed 1: ")) &&
      p.seeds.some((s) => /^seed \d: COMPILE_ERROR$/.test(s)), "seed labels: " + p.seeds.join(" | "));
    await page.screenshot({ path: `${shots}/task-${width}.png` });
    // Back to the list (history).
    await page.goBack();
    await page.locator(`#tasks tr[data-id="${doneId}"]`).waitFor({ timeout: 10000 });
    await expect(await page.isHidden("#task-view"), "back did not show the list");

    // The FAILED task's page by its URL, and the #task= form.
    const p2 = await ctx.newPage();
    p2.on("pageerror", (e) => errors.push(String(e)));
    await p2.goto(url + "task/" + failedId, { waitUntil: "load", timeout: 15000 });
    await p2.waitForFunction(() => document.querySelector('#facts dd[data-field="stop"]'), null, { timeout: 10000 });
    await expect((await field(p2, "state")).startsWith("FAILED"), "failed page state: " + (await field(p2, "state")));
    await expect((await field(p2, "stop")).startsWith("no seed: every Generator job"), "failed page stop: " + (await field(p2, "stop")));
    await expect((await field(p2, "download")) === "no correct kernel", "failed page download: " + (await field(p2, "download")));
    await p2.goto(url + "#task=" + doneId, { waitUntil: "load", timeout: 15000 });
    await p2.waitForFunction((id) => location.pathname === "/task/" + id && document.querySelector('#facts dd[data-field="stop"]'), doneId, { timeout: 10000 });
    await expect(!errors.length, `${width}px: page errors: ${errors.join("; ")}`);
    await ctx.close();
    console.log(`pages ok at ${width}px`);
  }
}

try {
  if (mode === "follow") await follow(rest[0], rest[1]);
  else if (mode === "pages") await pages(rest[0], rest[1], rest[2]);
  else await fail("mode is follow or pages, not " + mode);
} catch (e) {
  await fail(String(e));
}
await browser.close();
