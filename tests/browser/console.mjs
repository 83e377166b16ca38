// Drives the DLQ console in Debian's chromium through playwright-core (which downloads no browser), against a
// replayer the Rust test `console_in_a_real_browser` started over the real broker. Exits non-zero on the first
// failed check; the Rust test then checks in Kafka what was processed and recorded.
//
// Env: CONSOLE_URL, CONSOLE_TOKEN, ENTRY_TO_REPLAY, ENTRY_TO_DISCARD, ENTRY_FILTER_TEXT, N_ENTRIES, SERVICE (the
// consumer service that dead-lettered them), SEARCH_SOURCE and SEARCH_MATCH (the source of the accepted events and
// the one event whose body has order id 1), SCREENSHOTS (a directory), CHROMIUM (the browser binary).
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import assert from "node:assert/strict";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const url = env("CONSOLE_URL");
const token = env("CONSOLE_TOKEN");
const toReplay = env("ENTRY_TO_REPLAY");
const toDiscard = env("ENTRY_TO_DISCARD");
const filterText = env("ENTRY_FILTER_TEXT");
const nEntries = Number(env("N_ENTRIES"));
const service = env("SERVICE");
const searchSource = env("SEARCH_SOURCE");
const searchMatch = env("SEARCH_MATCH");
const shots = env("SCREENSHOTS");
mkdirSync(shots, { recursive: true });

const step = (text) => console.log(`browser: ${text}`);
const browser = await chromium.launch({ executablePath: env("CHROMIUM"), args: ["--no-sandbox"] });
const failures = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  // Any blocked resource or script error (a CSP violation included) fails the test; the 401 of the wrong-token
  // login and the 403s of the forged forms below are expected.
  page.on("console", (message) => {
    if (message.type() === "error" && !/status of 40[13]/.test(message.text())) failures.push(message.text());
  });
  page.on("pageerror", (error) => failures.push(String(error)));
  const shot = (name) => page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
  const statusOf = async () => page.locator("h1 .status").first().getAttribute("data-status");

  step("a wrong token gets nowhere");
  await page.goto(`${url}/ui/entries`);
  assert.ok(page.url().endsWith("/ui/login"), `not sent to the login form: ${page.url()}`);
  await page.fill("#token", "not-the-token");
  await page.click("button[type=submit]");
  assert.equal((await page.textContent("#login-problem")).trim(), "wrong token");
  assert.equal((await context.cookies()).length, 0, "no cookie for a wrong token");
  await page.goto(`${url}/ui/entries/${encodeURIComponent(toReplay)}`);
  assert.ok(page.url().endsWith("/ui/login"), "an entry page without a session shows the login form");
  const forged = await page.request.post(`${url}/ui/actions/run`, {
    form: { action: "discard", ids: toDiscard, reason: "forged" },
    maxRedirects: 0,
  });
  assert.equal(forged.status(), 401, "an action without a session is refused");
  await shot("login");

  step("log in: the session cookie is Secure, HttpOnly, SameSite=Strict");
  await page.fill("#token", token);
  await page.click("button[type=submit]");
  await page.waitForURL(`${url}/ui/`);
  const [cookie] = await context.cookies();
  assert.equal(cookie.name, "hookline-session");
  assert.ok(cookie.secure && cookie.httpOnly && cookie.sameSite === "Strict", JSON.stringify(cookie));
  const csp = (await page.request.get(`${url}/ui/`)).headers()["content-security-policy"];
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /script-src 'self'/);
  assert.ok(await page.isVisible("#chart"), "the chart is drawn");
  assert.equal(await page.textContent("#by-status td.num"), String(nEntries));
  assert.equal((await page.textContent("#by-service td a")).trim(), service, "counts grouped by service");
  assert.equal(await page.textContent("#by-service td.num"), String(nEntries));
  await shot("overview");

  step("filter the list");
  await page.click("header >> text=Entries");
  assert.equal((await page.textContent("#matching")).trim(), `${nEntries} entries match.`);
  await page.fill("input[name=source]", "github");
  await page.fill("input[name=service]", service);
  await page.selectOption("select[name=status]", "new");
  await page.click("#filters button[type=submit]");
  assert.equal((await page.textContent("#matching")).trim(), `${nEntries} entries match.`);
  assert.equal((await page.textContent("#entries tbody td.service")).trim(), service, "the service column");
  await shot("list");
  await page.fill("input[name=text]", filterText);
  await page.click("#filters button[type=submit]");
  assert.equal((await page.textContent("#matching")).trim(), "1 entries match.");
  assert.equal(await page.locator("#entries tbody tr").count(), 1);

  step("open the entry: headers, body, fate");
  await page.click("#entries tbody a");
  assert.equal((await page.textContent("#entry-id")).trim(), toReplay);
  assert.equal(await statusOf(), "new");
  assert.ok((await page.textContent("#headers")).includes("hookline-dlq-error-class"));
  assert.ok(await page.isVisible("#body-pretty pre"), "a JSON body is pretty-printed");
  await page.click("#body-base64 summary");
  assert.ok(await page.isVisible("#body-base64 pre"), "the base64 view opens");
  await shot("entry");

  step("replay it after the fix: dry-run preview, confirmation, then succeeded");
  await page.click("#replay-one button");
  assert.match(await page.textContent("#preview-count"), /replay 1 entry/);
  await shot("preview");
  await page.click("#confirm-button");
  await page.waitForSelector("#job-state[data-state=done]", { timeout: 30000 });
  await page.goto(`${url}/ui/entries/${encodeURIComponent(toReplay)}`);
  const deadline = Date.now() + 30000;
  while ((await statusOf()) !== "succeeded") {
    assert.ok(Date.now() < deadline, `still ${await statusOf()} after 30 s`);
    await page.waitForTimeout(300);
    await page.reload();
  }
  assert.match(await page.textContent("#last-status"), /by consumer:/);
  await shot("entry-succeeded");

  step("discard another with a reason");
  await page.goto(`${url}/ui/entries/${encodeURIComponent(toDiscard)}`);
  await page.fill("#discard-one input[name=reason]", "test event from the provider's dashboard");
  await page.click("#discard-one button");
  assert.match(await page.textContent("#preview-count"), /discard 1 entry/);
  await page.click("#confirm-button");
  await page.waitForSelector("#job-state[data-state=done]", { timeout: 30000 });
  await page.goto(`${url}/ui/entries/${encodeURIComponent(toDiscard)}`);
  assert.equal(await statusOf(), "discarded");
  assert.match(await page.textContent("#last-status"), /test event from the provider's dashboard/);

  step("pause a route from the Routes page, then resume it with its button");
  await page.goto(`${url}/ui/pauses`);
  await page.waitForSelector("#no-pauses");
  await page.fill("#pause-form input[name=service]", service);
  await page.fill("#pause-form input[name=route]", "github");
  await page.fill("#pause-form input[name=reason]", "downstream maintenance");
  await page.click("#pause-form button");
  assert.match(await page.textContent("#pause-notice"), /paused route github/);
  const row = `#pauses tr[data-route="github"]`;
  assert.match(await page.textContent(row), /downstream maintenance/);
  await shot("routes-paused");
  await page.fill(`${row} input[name=reason]`, "maintenance over");
  await page.click(`${row} button`);
  assert.match(await page.textContent("#pause-notice"), /resumed route github/);
  await page.waitForSelector("#no-pauses");

  step("find an accepted event by its content and time on the Search page");
  await page.goto(`${url}/ui/search`);
  await page.fill("#event-search-form input[name=source]", searchSource);
  const anHourAgo = new Date(Date.now() - 3600 * 1000).toISOString().replace(/\.\d+Z$/, "Z");
  await page.fill("#event-search-form input[name=since]", anHourAgo);
  await page.fill("#event-search-form input[name=where]", "/order/id == 1");
  await Promise.all([page.waitForURL(/\/ui\/search\?/), page.click("#event-search-form button")]);
  assert.equal(await page.getAttribute("#event-matches", "data-matches"), "1", await page.textContent("main"));
  const match = await page.textContent("#event-matches tbody");
  assert.ok(match.includes(searchMatch), `the match is not ${searchMatch}: ${match}`);
  await shot("event-search");

  step("a form without the CSRF token, or from another site, changes nothing");
  const noCsrf = await page.request.post(`${url}/ui/actions/run`, {
    form: { action: "replay", all: "1" },
    maxRedirects: 0,
  });
  assert.equal(noCsrf.status(), 403);
  const crossSite = await page.request.post(`${url}/ui/actions/run`, {
    form: { action: "replay", all: "1" },
    headers: { origin: "https://evil.example" },
    maxRedirects: 0,
  });
  assert.equal(crossSite.status(), 403);

  step("log out");
  await page.click("header form button");
  await page.waitForURL(`${url}/ui/login`);
  await page.goto(`${url}/ui/`);
  assert.ok(page.url().endsWith("/ui/login"), "logged out");
  assert.deepEqual(failures, [], "no console errors or CSP violations");
  step("ok");
} finally {
  await browser.close();
}
