// Watches the console's flow overview in Debian's chromium through playwright-core, against a replayer the Rust
// test `the_flow_overview_shows_the_failing_service_apart_from_the_healthy_one` started while events flow through
// two consumer services, one of whose downstream fails. Exits non-zero on the first failed check.
//
// Env: CONSOLE_URL, CONSOLE_TOKEN, SOURCE (the source events are sent to), HEALTHY and FAILING (the services),
// SCREENSHOTS (a directory), CHROMIUM (the browser binary).
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import assert from "node:assert/strict";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const url = env("CONSOLE_URL");
const source = env("SOURCE");
const healthy = env("HEALTHY");
const failing = env("FAILING");
const shots = env("SCREENSHOTS");
mkdirSync(shots, { recursive: true });

const step = (text) => console.log(`browser: ${text}`);
const browser = await chromium.launch({ executablePath: env("CHROMIUM"), args: ["--no-sandbox"] });
const failures = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
  const page = await context.newPage();
  page.on("console", (message) => {
    if (message.type() === "error") failures.push(message.text());
  });
  page.on("pageerror", (error) => failures.push(String(error)));

  step("log in");
  await page.goto(`${url}/ui/login`);
  await page.fill("#token", env("CONSOLE_TOKEN"));
  await page.click("button[type=submit]");
  await page.waitForURL(`${url}/ui/`);

  const sourceCard = `div.card.flow[data-source="${source}"]`;
  const card = (service) => `div.card.flow[data-service="${service}"]`;
  const count = async (selector) => {
    const element = await page.$(selector);
    return element ? Number(await element.getAttribute("data-count")) : null;
  };
  const lag = async (service) => {
    const element = await page.$(`${card(service)} td.lag`);
    const value = element && (await element.getAttribute("data-lag"));
    return value === null || value === undefined ? null : Number(value);
  };
  const read = async () => ({
    accepted: await count(`${sourceCard} .accepted`),
    refused: await count(`${sourceCard} .refused`),
    healthyProcessed: await count(`${card(healthy)} .outcome.processed`),
    healthyRetrying: await count(`${card(healthy)} .outcome.retrying`),
    failingProcessed: await count(`${card(failing)} .outcome.processed`),
    failingRetrying: await count(`${card(failing)} .outcome.retrying`),
    healthyLag: await lag(healthy),
    failingLag: await lag(failing),
  });

  step("the overview, refreshed while events flow, tells the failing service from the healthy one");
  const deadline = Date.now() + 45_000;
  let seen;
  for (;;) {
    seen = await read();
    const shown =
      seen.accepted >= 10 && seen.refused >= 1 &&
      seen.healthyProcessed >= 10 && seen.failingRetrying >= 5 &&
      seen.healthyLag !== null && seen.failingLag !== null && seen.failingLag > seen.healthyLag + 5;
    if (shown) break;
    assert.ok(Date.now() < deadline, `the overview never showed the flow: ${JSON.stringify(seen)}`);
    await page.waitForTimeout(1500);
    await page.reload();
  }
  step(`seen: ${JSON.stringify(seen)}`);
  assert.equal(seen.healthyRetrying, 0, "the healthy service retries nothing");
  assert.equal(seen.failingProcessed, 0, "the failing service processes nothing");
  assert.match(await page.textContent(`${sourceCard} .refusals`), /Top refusals: \w+ \(\d+\)/);
  assert.ok(await page.isVisible(`${sourceCard} svg.minutes rect.c0`), "accepted requests are charted");
  assert.ok(await page.isVisible(`${card(failing)} svg.minutes rect.c1`), "retries are charted");
  assert.equal(await page.$(`${card(healthy)} svg.minutes rect.c1`), null, "no retry bar for the healthy service");
  assert.equal(await page.$("#gateways-unreachable"), null, "the gateway answered");
  assert.equal(await page.$(".card.flow .unreachable"), null, "every replica answered");
  const links = await page.$$eval(`${card(failing)} .links a`, (anchors) => anchors.map((a) => a.getAttribute("href")));
  assert.ok(links.includes(`/ui/entries?service=${failing}`), JSON.stringify(links));
  const sourceLinks = await page.$$eval(`${sourceCard} .links a`, (anchors) => anchors.map((a) => a.getAttribute("href")));
  assert.ok(sourceLinks.includes(`/ui/rejections?source=${source}`), JSON.stringify(sourceLinks));
  assert.ok(sourceLinks.some((href) => href.startsWith(`/ui/search?source=${source}&since=`)), JSON.stringify(sourceLinks));
  await page.screenshot({ path: `${shots}/flow.png`, fullPage: true });

  step("pause a route of the failing service from its card, then resume it there");
  await page.click(`${card(failing)} details summary`);
  await page.fill(`${card(failing)} form.pause input[name=route]`, source);
  await page.fill(`${card(failing)} form.pause input[name=reason]`, "downstream outage");
  await page.click(`${card(failing)} form.pause button`);
  assert.match(await page.textContent("#pause-notice"), new RegExp(`paused route ${source} of service ${failing}`));
  await page.goto(`${url}/ui/`);
  const resume = `${card(failing)} form.resume[data-route="${source}"]`;
  assert.match(await page.textContent(`${card(failing)} td.paused`), /downstream outage/);
  await page.fill(`${resume} input[name=reason]`, "downstream back");
  await page.click(`${resume} button`);
  assert.match(await page.textContent("#pause-notice"), new RegExp(`resumed route ${source} of service ${failing}`));

  assert.deepEqual(failures, [], "no console errors or CSP violations");
  step("ok");
} finally {
  await browser.close();
}
