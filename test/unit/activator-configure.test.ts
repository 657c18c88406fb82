// Activator.configure: a function's scaling, request timeout and delivery budget changed while it runs (a Knative
// Service edited live), against REAL child processes (test/fixtures/tiny-function.ts). Counts and
// pids are asserted, never tight timings.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { Activator, type FunctionProcessSpec, type Scaling } from '../../eventing/activator/index.ts';

const FIXTURE = fileURLToPath(new URL('../fixtures/tiny-function.ts', import.meta.url));
const log = pino({ level: 'silent' });

async function eventually(check: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await sleep(25);
  }
}

const spec = (scaling: Partial<Scaling> = {}): FunctionProcessSpec => ({
  name: 'tiny',
  command: process.execPath,
  args: [FIXTURE],
  scaling: { minScale: 0, maxScale: 4, target: 10, containerConcurrency: 0, ...scaling },
});

const open: Activator[] = [];
async function start(scaling: Partial<Scaling> = {}, idleTimeoutMs = 60_000) {
  const activator = new Activator({ functions: [spec(scaling)], log, idleTimeoutMs, childOutput: 'log' });
  open.push(activator);
  const base = await activator.listen();
  await activator.start();
  return { activator, url: `${base}/tiny` };
}
after(() => Promise.all(open.map((activator) => activator.close())));

const pidOf = async (url: string) => ((await (await fetch(url)).json()) as { pid: number }).pid;

test('raising min-scale starts instances at once; lowering it lets them go when idle, not before', async () => {
  const { activator, url } = await start({}, 1500);
  assert.equal(activator.instances('tiny'), 0);
  assert.equal(activator.configure('tiny', { scaling: { minScale: 2, maxScale: 4, target: 10, containerConcurrency: 0 } }), true);
  await eventually(() => activator.instances('tiny') === 2, 'two instances for min-scale 2');
  await sleep(2500);
  assert.equal(activator.instances('tiny'), 2, 'held by min-scale past the idle timeout');
  const pid = await pidOf(url);
  activator.configure('tiny', { scaling: { minScale: 0, maxScale: 4, target: 10, containerConcurrency: 0 } });
  assert.equal(activator.instances('tiny'), 2, 'not stopped by the edit itself');
  await eventually(() => activator.instances('tiny') === 0, 'scaled to zero after the idle timeout');
  assert.equal(activator.stats().tiny.started, 2, 'no instance was restarted for the edit');
  assert.ok(pid > 0);
});

test('lowering max-scale stops idle instances above it; a busy one finishes its request first', async () => {
  const { activator, url } = await start({ minScale: 3, maxScale: 3 });
  await eventually(() => activator.instances('tiny') === 3, 'three instances');
  // One request in flight on some instance while max-scale drops to 1.
  const slow = fetch(`${url}/slow?ms=1500`).then((response) => response.json() as Promise<{ pid: number }>);
  await sleep(300);
  activator.configure('tiny', { scaling: { minScale: 1, maxScale: 1, target: 10, containerConcurrency: 0 } });
  await eventually(() => activator.instances('tiny') <= 2, 'idle instances above max-scale stopped');
  const answer = await slow;
  assert.ok(answer.pid > 0, 'the request in flight was answered');
  await eventually(() => activator.instances('tiny') === 1, 'one instance, max-scale 1');
  assert.equal(activator.stats().tiny.started, 3, 'nothing restarted');
});

test('timeoutSeconds applies to the next requests', async () => {
  const { activator, url } = await start({ minScale: 1, maxScale: 1 });
  await eventually(() => activator.instances('tiny') === 1, 'one instance');
  assert.equal((await fetch(`${url}/slow?ms=1500`)).status, 200, 'within the default 300 s');
  activator.configure('tiny', { scaling: activator.configurationOf('tiny').scaling, timeoutSeconds: 1 });
  const timedOut = await fetch(`${url}/slow?ms=3000`);
  assert.equal(timedOut.status, 504, 'past the new 1 s timeout');
  await timedOut.text();
});

test('the delivery budget reaches instances as OPFN_DELIVERY_BUDGET_SECONDS: half a lowered timeout, or as given, in instances started after the edit', async () => {
  const { activator, url } = await start({}, 1000);
  const budgetSeen = async () =>
    (await (await fetch(`${url}/env?name=OPFN_DELIVERY_BUDGET_SECONDS`)).json()) as { pid: number; value: string | null };
  const first = await budgetSeen();
  assert.equal(first.value, '30', "Knative's default timeout of 300 s: 30 s");
  const { scaling } = activator.configurationOf('tiny');
  activator.configure('tiny', { scaling, timeoutSeconds: 20 });
  assert.deepEqual(activator.configurationOf('tiny'), { scaling, timeoutSeconds: 20, deliveryBudgetSeconds: 10 });
  assert.equal((await budgetSeen()).value, '30', 'a running instance keeps the budget it started with');
  await eventually(() => activator.instances('tiny') === 0, 'scaled to zero');
  const second = await budgetSeen();
  assert.notEqual(second.pid, first.pid);
  assert.equal(second.value, '10', 'a new instance: half the 20 s timeout');
  activator.configure('tiny', { scaling, timeoutSeconds: 20, deliveryBudgetSeconds: 4.5 });
  await eventually(() => activator.instances('tiny') === 0, 'scaled to zero');
  assert.equal((await budgetSeen()).value, '4.5', "the Service's own budget");
});

test('containerConcurrency applies to the next requests', async () => {
  const { activator, url } = await start({ minScale: 1, maxScale: 1 });
  await eventually(() => activator.instances('tiny') === 1, 'one instance');
  const burst = () =>
    Promise.all([1, 2, 3].map(() => fetch(`${url}/slow?ms=400`).then((response) => response.json() as Promise<{ active: number }>)));
  assert.ok(
    (await burst()).some((answer) => answer.active > 1),
    'unlimited: requests overlap on the one instance',
  );
  activator.configure('tiny', { scaling: { minScale: 1, maxScale: 1, target: 10, containerConcurrency: 1 } });
  assert.deepEqual(
    (await burst()).map((answer) => answer.active),
    [1, 1, 1],
    'containerConcurrency 1: one at a time',
  );
  assert.equal(activator.stats().tiny.started, 1);
});

test('an unusable configuration is refused and the old one stays; an unchanged one is no change', async () => {
  const { activator } = await start();
  const before = activator.configurationOf('tiny');
  assert.throws(
    () => activator.configure('tiny', { scaling: { minScale: 3, maxScale: 2, target: 10, containerConcurrency: 0 } }),
    /maxScale \(2\) is below minScale \(3\)/,
  );
  assert.throws(() => activator.configure('tiny', { scaling: { ...before.scaling }, timeoutSeconds: -1 }), /timeoutSeconds must be >= 0/);
  assert.throws(
    () => activator.configure('tiny', { scaling: { ...before.scaling }, timeoutSeconds: 20, deliveryBudgetSeconds: 20 }),
    /OPFN_DELIVERY_BUDGET_SECONDS 20 leaves no time before timeoutSeconds 20/,
  );
  assert.throws(
    () => activator.configure('tiny', { scaling: { ...before.scaling }, deliveryBudgetSeconds: Number.NaN }),
    /must be a number of seconds ≥ 0/,
  );
  assert.throws(() => activator.configure('nope', before), /no function named "nope"/);
  assert.deepEqual(activator.configurationOf('tiny'), before);
  assert.equal(activator.configure('tiny', before), false);
});

test('withdrawn (its Service deleted): instances stop, a busy one after its answer; requests get 404 with the reason; the same configuration brings it back', async () => {
  const { activator, url } = await start({ minScale: 1, maxScale: 2 });
  await eventually(() => activator.instances('tiny') === 1, 'one instance for min-scale 1');
  const configuration = activator.configurationOf('tiny');
  const slow = fetch(`${url}/slow?ms=1000`).then((response) => response.status);
  await eventually(() => activator.stats().tiny.proxied === 1, 'the slow request proxied');
  activator.withdraw('tiny', 'Knative Service operator-functions/tiny was deleted');
  assert.equal(await slow, 200, 'the request in flight is answered');
  const refused = await fetch(url);
  assert.equal(refused.status, 404);
  assert.match(await refused.text(), /Knative Service operator-functions\/tiny was deleted/);
  await eventually(() => activator.instances('tiny') === 0, 'no instance left, min-scale notwithstanding');
  assert.equal(activator.lease(url), undefined, 'no warm path either');
  // The Service created again, unchanged: the function runs again (min-scale 1).
  assert.equal(activator.configure('tiny', configuration), true);
  await eventually(() => activator.instances('tiny') === 1, 'min-scale 1 again');
  assert.equal((await fetch(url)).status, 200);
});

test('a changed container environment rolls the instances: the next request is served by a new one that has it, min-scale kept', async () => {
  const { activator, url } = await start({ minScale: 1, maxScale: 1 });
  await eventually(() => activator.instances('tiny') === 1, 'one instance');
  const seen = async () => (await (await fetch(`${url}/env?name=GREETING`)).json()) as { pid: number; value: string | null };
  const before = await seen();
  assert.equal(before.value, null);
  const { scaling } = activator.configurationOf('tiny');
  assert.equal(activator.configure('tiny', { scaling, containerEnv: { GREETING: 'hello' } }), true);
  const after = await seen();
  assert.notEqual(after.pid, before.pid, 'a new instance');
  assert.equal(after.value, 'hello');
  assert.equal(
    activator.configure('tiny', { scaling, containerEnv: { GREETING: 'hello' } }),
    false,
    'the same environment changes nothing',
  );
  assert.equal((await seen()).pid, after.pid, 'and replaces nothing');
  await eventually(() => activator.instances('tiny') === 1, 'min-scale 1 held after the roll');
});

test('roll() replaces the instances; one busy answers its request before it stops', async () => {
  const { activator, url } = await start({ minScale: 1, maxScale: 1 });
  await eventually(() => activator.instances('tiny') === 1, 'one instance');
  const first = await pidOf(url);
  const busy = fetch(`${url}/slow?ms=800`).then((response) => response.json() as Promise<{ pid: number }>);
  await sleep(200);
  assert.equal(activator.roll('tiny', 'rebuilt'), 1);
  const next = await pidOf(url);
  assert.notEqual(next, first);
  assert.equal((await busy).pid, first, 'the old instance answered what it served');
});
