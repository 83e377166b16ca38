// Logs in to the DLQ console through single sign-on (the provider of oidc-provider.mjs) in Debian's chromium,
// against a replayer the Rust test `console_oidc_browser` started: a viewer can search events but gets 403 when
// it tries to replay; an operator replays an entry, and the console's audit trail names the operator. The Rust test then checks in Kafka who the replay is recorded
// under. Exits non-zero on the first failed check.
//
// Env: CONSOLE_URL, ENTRY_TO_REPLAY, SEARCH_SOURCE, CHROMIUM.
import { chromium } from "playwright-core";
import assert from "node:assert/strict";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const url = env("CONSOLE_URL");
const toReplay = env("ENTRY_TO_REPLAY");
const searchSource = env("SEARCH_SOURCE");
const step = (text) => console.log(`browser: ${text}`);

/// Logs `user` in through the provider, in a fresh browser context; returns its page.
async function logIn(browser, user) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${url}/ui/entries`);
  assert.ok(page.url().endsWith("/ui/login"), `not sent to the login form: ${page.url()}`);
  await page.click("#sso");
  await page.waitForSelector("input[name=login]");
  assert.ok(!page.url().startsWith(url), `not at the provider: ${page.url()}`);
  await page.fill("input[name=login]", user);
  await page.fill("input[name=password]", "any password");
  await page.click("button[type=submit]");
  await page.waitForURL(`${url}/ui/`);
  const session = (await context.cookies()).find((cookie) => cookie.name === "hookline-session");
  assert.ok(session && session.secure && session.httpOnly && session.sameSite === "Strict", JSON.stringify(session));
  return page;
}

const browser = await chromium.launch({ executablePath: env("CHROMIUM"), args: ["--no-sandbox"] });
try {
  step("a viewer logs in, searches, and may not replay");
  const viewer = await logIn(browser, "viewer-ann");
  await viewer.goto(`${url}/ui/search`);
  await viewer.fill("#event-search-form input[name=source]", searchSource);
  await viewer.fill("#event-search-form input[name=since]", new Date(Date.now() - 3600_000).toISOString());
  await Promise.all([viewer.waitForURL(/\/ui\/search\?/), viewer.click("#event-search-form button")]);
  assert.ok(await viewer.isVisible("#event-search-summary"), "the search answered");
  await viewer.goto(`${url}/ui/entries/${encodeURIComponent(toReplay)}`);
  const [refused] = await Promise.all([
    viewer.waitForResponse((response) => response.url().endsWith("/ui/actions/preview")),
    viewer.click("#replay-one button"),
  ]);
  assert.equal(refused.status(), 403, "a viewer's replay is refused");
  assert.match(await viewer.textContent(".problem"), /viewer-ann.*operator role/);

  step("an operator logs in and replays the entry");
  const operator = await logIn(browser, "operator-olga");
  await operator.goto(`${url}/ui/entries/${encodeURIComponent(toReplay)}`);
  await operator.click("#replay-one button");
  assert.match(await operator.textContent("#preview-count"), /replay 1 entry/);
  await operator.click("#confirm-button");
  await operator.waitForSelector("#job-state[data-state=done]", { timeout: 30000 });

  step("the audit trail names the operator, and the viewer may read it");
  for (const page of [operator, viewer]) {
    await page.goto(`${url}/ui/audit?what=replay`);
    assert.equal(await page.locator("#audit tbody tr").count(), 1, "one replay recorded");
    assert.equal((await page.textContent("#audit td.subject")).trim(), "oidc:operator-olga");
  }
} finally {
  await browser.close();
}
step("done");
