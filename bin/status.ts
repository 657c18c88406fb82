// `opfn status` and `opfn reload`: the running `opfn dev` of the project, found through its state
// folder: what it runs (status.json, which it rewrites every few seconds), the dead letters, and
// a rebuild-and-roll of every function (SIGUSR2, what saving a source does for one).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { readDeadLetterFile } from '../eventing/broker/index.ts';
import { DEAD_LETTER_FILE, planeRecord, STATUS_FILE } from '../eventing/state-files.ts';
import { isSameProcess } from '../processes/index.ts';
import { errorReason } from './dead-letters.ts';
import type { PlaneStatus } from './dev-loop.ts';
import { say } from './terminal.ts';

function readStatus(stateDir: string): PlaneStatus | undefined {
  try {
    return JSON.parse(readFileSync(join(stateDir, STATUS_FILE), 'utf8')) as PlaneStatus;
  } catch {
    return undefined;
  }
}

/** The running plane's record, or undefined after saying why there is none. */
function runningPlane(stateDir: string) {
  const plane = planeRecord(stateDir);
  if (isSameProcess(plane)) return plane!;
  const stale = plane?.pid !== undefined ? ` (${join(stateDir, 'plane.json')} names process ${plane.pid}, which has ended)` : '';
  say(`no plane is running from ${stateDir}${stale}; start one with \`npm start\` (opfn dev)`);
  return undefined;
}

/** Columns padded to their widest cell. */
function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  return rows
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** `opfn status`: functions and instances, Triggers, the last reload, the dead letters. */
export async function statusCommand(stateDir: string, options: { json?: boolean }): Promise<void> {
  const plane = runningPlane(stateDir);
  const status = plane ? readStatus(stateDir) : undefined;
  if (options.json) {
    if (status) console.log(JSON.stringify(status, null, 2));
    process.exit(status ? 0 : 1);
  }
  if (plane) {
    console.log(`plane: pid ${plane.pid}, broker ${plane.brokerUrl ?? '?'}, functions at ${plane.activatorUrl ?? '?'}/<function>`);
    if (plane.kubeconfig) console.log(`cluster: export KUBECONFIG=${plane.kubeconfig}`);
  }
  if (status) {
    const age = Math.round((Date.now() - Date.parse(status.updated)) / 1000);
    console.log(
      `\n${table([
        ['FUNCTION', 'INSTANCES', 'STARTED', 'PEAK', 'REQUESTS', 'DIRECT'],
        ...Object.entries(status.functions).map(([name, fn]) => [
          name,
          String(fn.instances),
          String(fn.started),
          String(fn.peakInstances),
          String(fn.proxied + fn.direct),
          String(fn.direct),
        ]),
      ])}`,
    );
    console.log(
      `\n${table([
        ['TRIGGER', 'DELIVERED', 'RETRIED', 'DEAD-LETTERED', 'QUEUED', 'IN-FLIGHT'],
        ...Object.entries(status.triggers).map(([name, t]) => [
          name,
          String(t.delivered),
          String(t.retried),
          String(t.deadLettered),
          String(t.queued),
          String(t.inFlight),
        ]),
      ])}`,
    );
    if (status.lastReload)
      console.log(`\nlast reload: ${status.lastReload.at}: ${status.lastReload.functions.join(', ')}: ${status.lastReload.outcome}`);
    console.log(`(as of ${age}s ago)`);
  }
  const entries = await readDeadLetterFile(join(stateDir, DEAD_LETTER_FILE));
  const letters = entries.filter((entry) => entry.letter).map((entry) => entry.letter as Record<string, unknown>);
  const last = letters.at(-1);
  console.log(`\ndead letters: ${letters.length}${letters.length ? ` (\`opfn dead-letters list\`)` : ''}`);
  if (last) {
    const reason =
      typeof last.knativeerrordata === 'string'
        ? errorReason(Buffer.from(last.knativeerrordata, 'base64').toString('utf8')).replace(/\s+/g, ' ').slice(0, 120)
        : '';
    console.log(`last: ${[last.time ?? '-', last.type, last.subject ?? last.source, last.knativeerrorcode ?? '-', reason].join('  ')}`);
  }
  process.exit(plane ? 0 : 1);
}

/** `opfn reload`: asks the running plane to rebuild and roll every function, and waits for its answer in status.json. */
export async function reloadCommand(stateDir: string): Promise<void> {
  const plane = runningPlane(stateDir);
  if (!plane) process.exit(1);
  const before = readStatus(stateDir)?.lastReload?.at;
  process.kill(plane.pid!, 'SIGUSR2');
  say(`asked the plane (pid ${plane.pid}) to rebuild and roll every function...`);
  const deadline = Date.now() + 180_000;
  while (Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    const reload = readStatus(stateDir)?.lastReload;
    if (reload && reload.at !== before) {
      say(`${reload.functions.join(', ')}: ${reload.outcome}`);
      process.exit(reload.outcome.startsWith('build failed') ? 1 : 0);
    }
  }
  say("no answer within 180 s; the plane's log says what it is doing");
  process.exit(1);
}
