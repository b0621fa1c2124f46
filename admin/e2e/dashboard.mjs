// Drives the txbox admin dashboard in headless Chromium (Debian's
// /usr/bin/chromium through playwright-core), for admin/e2e_test.go:
//
//  1. load the page and sign in with ADMIN_TOKEN;
//  2. watch the sent counter of EVENT_TYPE move while events flow;
//  3. retry dead letter DEAD_LETTER_ID through the browser, confirming
//     the dialog, and see the API report it changed;
//  4. with GROUP_TYPE, read that type's failure group and retry it.
//  4. with AUDIT_HOSTILE, find that retry in the audit view, and the
//     entry whose who is AUDIT_HOSTILE shown as text (no element made of
//     it).
//
// It prints one JSON line with what it saw and exits 0, or exits 1 with
// the reason on stderr. Without a valid token it cannot get past the login
// page, so it fails: the Go test checks that too. SHOT_DIR, when set,
// receives the screenshots docs/operations.md shows.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const env = (k, d) => process.env[k] ?? d;
const url = env("ADMIN_URL");
const token = env("ADMIN_TOKEN", "");
const type = env("EVENT_TYPE", "orders");
const deadLetter = env("DEAD_LETTER_ID", "");
const shots = env("SHOT_DIR", "");
const timeout = Number(env("STEP_TIMEOUT_MS", "60000"));
// FAILOVER_WANT, when set, replaces steps 2 and 3: wait until the WAL
// stream's failover line contains it, and report the line and its class.
const failoverWant = env("FAILOVER_WANT", "");
// GROUP_TYPE, when set: find the failure group of that event type, read
// its title, and retry the group through the page.
const groupType = env("GROUP_TYPE", "");
const auditHostile = env("AUDIT_HOSTILE", "");
// TENANT_PICK, when set, replaces steps 2 to 4: on a relay with tenants,
// read the tenants table, see OTHER_DEAD_LETTER_ID (the first running
// tenant's) listed, pick TENANT_PICK in the tenant picker, and see
// DEAD_LETTER_ID listed and OTHER_DEAD_LETTER_ID gone.
const tenantPick = env("TENANT_PICK", "");
const otherDeadLetter = env("OTHER_DEAD_LETTER_ID", "");

const profile = mkdtempSync(join(tmpdir(), "txbox-e2e-chromium-"));
// A fresh profile directory (Chromium's --user-data-dir, which
// playwright takes as the persistent context's directory).
const context = await chromium.launchPersistentContext(profile, {
  executablePath: env("CHROMIUM", "/usr/bin/chromium"),
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--disable-quic", "--no-first-run"],
  viewport: { width: 1400, height: 1000 },
  // Starting a browser on a loaded machine takes longer than a step.
  timeout: Math.max(timeout, 120000),
});
const out = {};
let code = 0;
try {
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(timeout);
  const errors = [];
  page.on("pageerror", e => errors.push(String(e)));
  page.on("console", m => { if (m.type() === "error") errors.push(m.text()); });
  // A hostile text that became markup could run alert(): count it.
  page.on("dialog", d => { errors.push("a script opened a dialog: " + d.message()); d.dismiss().catch(() => {}); });

  const first = await page.goto(url);
  out.firstStatus = first.status();
  await page.fill("#token", token);
  await Promise.all([page.waitForURL(u => !u.pathname.endsWith("/login")), page.click("#login-form button[type=submit]")]);
  // The login page itself was a 401, which Chromium reports as a console
  // error: only errors of the dashboard count.
  errors.length = 0;

  if (tenantPick) {
    await page.locator("#tenants tr[data-tenant]").first().waitFor();
    const rows = page.locator("#tenants tr[data-tenant]");
    out.tenantRows = await rows.count();
    const states = [];
    for (let i = 0; i < out.tenantRows; i++) {
      const cells = await rows.nth(i).locator("td").allTextContents();
      states.push(cells[0] + " " + cells[1]);
    }
    out.tenantStates = states.join(", ");
    await page.locator(`#dead-letters tr[data-id="${otherDeadLetter}"]`).waitFor();
    out.tenantFirstDeadLetters = await page.locator(`#dead-letters tr[data-id="${otherDeadLetter}"]`).count();
    await page.selectOption("#tenant-picker", tenantPick);
    await page.locator(`#dead-letters tr[data-id="${deadLetter}"]`).waitFor();
    out.tenantPickedDeadLetter = await page.locator(`#dead-letters tr[data-id="${deadLetter}"]`).count();
    out.tenantOtherDeadLetter = await page.locator(`#dead-letters tr[data-id="${otherDeadLetter}"]`).count();
    if (shots) {
      await page.waitForTimeout(2500); // the picked tenant's overview
      await page.screenshot({ path: join(shots, "dashboard-tenants.png"), fullPage: true });
    }
  }
  if (failoverWant) {
    const line = page.locator("#stream-failover", { hasText: failoverWant });
    await line.waitFor();
    out.failover = await line.textContent();
    out.failoverClass = await line.getAttribute("class");
  }
  const sent = page.locator(`#types tr[data-type="${type}"] td.sent`);
  const read = async () => Number((await sent.textContent()).replace(/[^0-9]/g, ""));
  if (!failoverWant && !tenantPick) {
    await sent.waitFor();
    await page.waitForFunction(sel => /\d/.test(document.querySelector(sel)?.textContent || ""), `#types tr[data-type="${type}"] td.sent`);
    out.sentBefore = await read();
    const deadline = Date.now() + timeout;
    while ((out.sentAfter = await read()) <= out.sentBefore) {
      if (Date.now() > deadline) throw new Error(`sent counter of ${type} stayed at ${out.sentBefore}`);
      await page.waitForTimeout(250);
    }
    out.chartLines = await page.locator("#chart-throughput polyline").count();
  }
  // For the documentation's screenshot, let the charts fill a little.
  if (shots && !tenantPick) await page.waitForTimeout(30000);
  if (shots && !tenantPick) await page.screenshot({ path: join(shots, "dashboard.png"), fullPage: true });

  if (deadLetter && !tenantPick) {
    const row = page.locator(`#dead-letters tr[data-id="${deadLetter}"]`);
    await row.waitFor();
    await row.locator(".preview-btn").click();
    await page.locator("#preview-id", { hasText: deadLetter }).waitFor();
    out.preview = await page.locator("#preview-body").textContent();
    if (shots) await page.locator("#preview").screenshot({ path: join(shots, "dashboard-dead-letter.png") });
    await row.locator(".retry-btn").click();
    await page.locator("#confirm[open]").waitFor();
    out.confirmText = await page.locator("#confirm-text").textContent();
    if (shots) await page.screenshot({ path: join(shots, "dashboard-confirm.png") });
    await page.click("#confirm-ok");
    await page.locator("#dl-message", { hasText: "retry: 1 of 1 changed" }).waitFor();
    out.message = await page.locator("#dl-message").textContent();
  }
  if (deadLetter && auditHostile) {
    // The retry just made: its row in the audit view (not the dry run
    // before it).
    const row = page.locator(`#audit tr[data-action="retry"][data-dry-run="false"]`, { hasText: "admin-token" }).first();
    await row.waitFor();
    out.auditRow = (await row.locator("td").allTextContents()).join(" | ");
    const hostile = page.locator("#audit td.who", { hasText: auditHostile }).first();
    await hostile.waitFor();
    out.auditWho = await hostile.textContent();
    out.auditFilter = await hostile.locator("xpath=..").locator("td.filter").textContent();
    out.auditElements = await page.locator("#audit img, #audit script, #audit b").count();
    if (shots) await page.locator("#audit").screenshot({ path: join(shots, "dashboard-audit.png") });
  }
  if (groupType) {
    const row = page.locator("#groups tr[data-group]", { hasText: groupType });
    await row.waitFor();
    out.groupMessage = await row.locator("td.err").textContent();
    out.groupMarkup = await row.locator("td.err *").count();
    if (shots) await page.locator("#groups").screenshot({ path: join(shots, "dashboard-groups.png") });
    await row.locator(".retry-group-btn").click();
    await page.locator("#confirm[open]").waitFor();
    out.groupConfirm = await page.locator("#confirm-text").textContent();
    await page.click("#confirm-ok");
    await page.locator("#groups-message", { hasText: "retry: 2 of 2 changed." }).waitFor();
    out.groupResult = await page.locator("#groups-message").textContent();
    // The group's retry in the audit view.
    const audited = page.locator(`#audit tr[data-action="retry"][data-dry-run="false"]`, { hasText: "group" }).first();
    await audited.waitFor();
    out.groupAudit = (await audited.locator("td").allTextContents()).join(" | ");
  }
  out.pageErrors = errors;
  if (errors.length) throw new Error("errors in the page: " + errors.join("; "));
} catch (e) {
  process.stderr.write("dashboard e2e: " + e.message + "\n");
  code = 1;
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(code);
