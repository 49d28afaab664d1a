// The demo page with a push member, in headless Chromium against a real
// `kube-pulse demo --leases --nats URL --push-member prod` over a real
// `nats-server` on loopback: prod's card says it is pushed and that its
// agent is connected, with a heartbeat that keeps arriving, beside pulled
// dev and staging (which say nothing of an agent), and prod's apps run.
// The Simulator panel's "Stop agent" turns prod `Unknown (AgentLost)` in
// its own style, its apps marked stale with no action offered; "Start
// agent" brings it back. Needs nats-server (scripts/test.sh installs it):
// without it the tests say so and are skipped, unless CI is set. Run after
// `cargo build`: KUBE_PULSE_BIN overrides the binary.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { WAIT, freePort, launchBrowser, natsServerBinary, startGateway, startNats, stopGateway } from './lib.mjs';

const SHOTS = fileURLToPath(new URL('./screenshots/', import.meta.url));
const PUSHED = 'prod';
const PULLED = ['dev', 'staging'];
const CARD = `article[data-cluster="${PUSHED}"]`;
const APP = `tr[data-topic="apps/${PUSHED}/shop/web"]`;
// The demo's agent grace (10 s) after its last heartbeat (every 2 s), with room.
const LOST_WITHIN = 30_000;

const binary = natsServerBinary();
if (!binary && process.env.CI) throw new Error('nats-server is needed by the push member tests (CI is set)');
const skip = binary ? false : 'nats-server is not installed (scripts/test.sh installs it)';
if (skip) console.log(`# skipped: ${skip}`);

let nats;
let gateway;
let browser;
let page;
const pageErrors = [];

before(async () => {
  if (skip) return;
  nats = await startNats(binary);
  const port = await freePort();
  gateway = await startGateway(port, ['--leases', '--nats', nats.url, '--push-member', PUSHED]);
  browser = await launchBrowser();
  page = await browser.newPage({ viewport: { width: 1024, height: 900 } });
  page.on('pageerror', (err) => pageErrors.push(err.message));
  await page.goto(`http://127.0.0.1:${port}/`, { timeout: WAIT });
});

after(async () => {
  await browser?.close();
  if (gateway) await stopGateway(gateway);
  await nats?.stop();
});

/** What the push member's card shows: its phase, reason, agent line and style. */
const pushedCard = () =>
  page.$eval(CARD, (card) => {
    const line = card.querySelector('.agent');
    const badge = card.querySelector('.phase');
    return {
      phase: card.dataset.phase,
      reason: card.dataset.reason,
      mode: card.dataset.mode,
      agent: card.dataset.agent,
      line: line.hidden ? null : line.innerText.replace(/\s+/g, ' ').trim(),
      heartbeat: card.querySelector('.agent time.heartbeat').getAttribute('datetime'),
      border: getComputedStyle(card).borderLeftStyle,
      badge: getComputedStyle(badge).backgroundColor,
    };
  });

/** Every element of the card whose box leaves it (the layout test's rule, for the new line). */
const outside = () =>
  page.$eval(CARD, (card) => {
    const box = card.getBoundingClientRect();
    return [...card.querySelectorAll('*')]
      .filter((n) => n.getClientRects().length > 0)
      .filter((n) => {
        const r = n.getBoundingClientRect();
        return r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.bottom > box.bottom + 0.5;
      })
      .map((n) => `${n.tagName}.${n.className}: ${n.textContent.slice(0, 40)}`);
  });

test('the pushed member shows beside the pulled ones, with its agent connected', { skip }, async () => {
  await page.waitForSelector(`${CARD}[data-mode="push"][data-agent="connected"][data-phase="Healthy"]`, { timeout: WAIT });
  for (const name of PULLED) {
    await page.waitForSelector(`article[data-cluster="${name}"][data-phase="Healthy"]`, { timeout: WAIT });
    const pulled = await page.$eval(`article[data-cluster="${name}"]`, (card) => ({
      mode: card.dataset.mode ?? null,
      agentShown: !card.querySelector('.agent').hidden,
    }));
    assert.deepEqual(pulled, { mode: null, agentShown: false }, `${name} is pulled`);
  }
  const first = await pushedCard();
  assert.match(first.line, /^push agent connected · heartbeat \d+s ago$/, JSON.stringify(first));
  assert.ok(first.heartbeat, 'the last heartbeat is shown');
  // Heartbeats keep coming (every 2 s): the time moves on without a reload.
  await page.waitForFunction(
    ([selector, before]) => document.querySelector(`${selector} .agent time.heartbeat`).getAttribute('datetime') > before,
    [CARD, first.heartbeat],
    { timeout: WAIT },
  );
  // The agent's documents: prod's sync registry and apps, running, not stale.
  await page.waitForSelector(`${APP}[data-state="Running"]:not([data-stale])`, { timeout: WAIT });
  assert.equal(await page.isHidden(`${APP} .stale`), true);
  assert.equal(await page.isEnabled(`${APP} [data-action="Stop"]`), true);
  await page.waitForFunction((card) => document.querySelectorAll(`${card} .sync tr`).length === 10, CARD, { timeout: WAIT });
  assert.deepEqual(await outside(), [], 'nothing leaves the pushed card at 1024 px');
  // The Simulator panel offers to stop the agent, on prod's row only.
  assert.equal(await page.locator('#sim [data-agent="stop"]').count(), 1);
  assert.equal(await page.locator(`#sim li[data-cluster="${PUSHED}"] [data-agent="stop"]`).count(), 1);
});

test('its agent stopped, the member is Unknown (AgentLost) in its own style and its apps stale; started, it is back', { skip }, async () => {
  const healthy = await pushedCard();
  await page.click(`#sim li[data-cluster="${PUSHED}"] [data-agent="stop"]`);
  await page.waitForSelector(`${CARD}[data-phase="Unknown"][data-reason="AgentLost"]`, { timeout: LOST_WITHIN });
  const lost = await pushedCard();
  assert.equal(lost.agent, 'lost', JSON.stringify(lost));
  assert.match(lost.line, /^push agent lost · heartbeat \d+s ago$/, JSON.stringify(lost));
  assert.equal(lost.border, 'dashed', 'AgentLost has its own border');
  // The badge's colour eases over 0.3 s (style.css): read it once that is over.
  await page.waitForFunction(
    ([card, before]) => getComputedStyle(document.querySelector(`${card} .phase`)).backgroundColor !== before,
    [CARD, healthy.badge],
    { timeout: 2_000 },
  ).catch(() => {});
  const { badge } = await pushedCard();
  assert.notEqual(badge, healthy.badge, 'and its own badge colour');
  const pulledBadge = await page.$eval(`article[data-cluster="${PULLED[0]}"] .phase`, (b) => getComputedStyle(b).backgroundColor);
  assert.notEqual(badge, pulledBadge);
  // Its apps: the agent's last report, marked stale, nothing to act on.
  await page.waitForSelector(`${APP}[data-stale="AgentLost"]`, { timeout: WAIT });
  assert.equal(await page.isVisible(`${APP} .stale`), true);
  assert.match(await page.getAttribute(`${APP} .stale`, 'title'), /^stale \(AgentLost\) since /);
  for (const action of ['Stop', 'Start', 'Update']) {
    assert.equal(await page.isDisabled(`${APP} [data-action="${action}"]`), true, `${action} while stale`);
  }
  // The pulled members are not touched.
  for (const name of PULLED) {
    assert.equal(await page.getAttribute(`article[data-cluster="${name}"]`, 'data-phase'), 'Healthy');
  }
  const log = await page.textContent('#log');
  assert.match(log, new RegExp(`cluster ${PUSHED}\\s*Healthy → Unknown\\s*AgentLost`));
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: `${SHOTS}push-agent-lost.png`, fullPage: true });

  await page.click(`#sim li[data-cluster="${PUSHED}"] [data-agent="start"]`);
  await page.waitForSelector(`${CARD}[data-phase="Healthy"][data-agent="connected"]`, { timeout: WAIT });
  await page.waitForSelector(`${APP}[data-state="Running"]:not([data-stale])`, { timeout: WAIT });
  assert.equal(await page.isHidden(`${APP} .stale`), true);
  assert.equal(await page.isEnabled(`${APP} [data-action="Stop"]`), true);
  assert.equal((await pushedCard()).border, 'solid');
  await page.screenshot({ path: `${SHOTS}push.png`, fullPage: true });
  assert.deepEqual(pageErrors, []);
});
