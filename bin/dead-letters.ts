// `opfn dead-letters list | replay | clear`: the events the broker could not deliver, in the
// dead-letter file of the state folder (or --file).
import { clearDeadLetterFile, readDeadLetterFile, replayDeadLetterFile } from '../eventing/broker/index.ts';
import { planeRecord } from '../eventing/state-files.ts';
import { isSameProcess } from '../processes/index.ts';
import { say } from './terminal.ts';

/** The reason in a failed delivery's answer: a function's JSON `{"error": ...}`, else the text as it is. */
export function errorReason(answer: string): string {
  try {
    const { error } = JSON.parse(answer) as { error?: unknown };
    if (typeof error === 'string') return error;
  } catch {
    // not JSON
  }
  return answer;
}

/** One line per dead letter, oldest first: id, type, subject, status and reason (or each letter as JSON). */
export async function listDeadLetters(file: string, options: { json?: boolean }): Promise<void> {
  const entries = await readDeadLetterFile(file);
  for (const entry of entries) {
    if (!entry.letter) {
      console.log(`${entry.file}:${entry.line}: unparsable line (${entry.error})`);
      continue;
    }
    const l = entry.letter as Record<string, unknown>;
    if (options.json) {
      console.log(JSON.stringify(l));
      continue;
    }
    const reason =
      typeof l.knativeerrordata === 'string'
        ? errorReason(Buffer.from(l.knativeerrordata, 'base64').toString('utf8')).replace(/\s+/g, ' ').slice(0, 120)
        : '';
    console.log([l.id, l.type, l.subject ?? l.source, l.knativeerrorcode ?? '-', reason].join('  '));
  }
  // The letters a function refused for good are kept apart (`<file>.refused`), rotated ones too.
  const files = [...new Set(entries.map((entry) => entry.file))];
  say(`${entries.length} dead letter(s) in ${files.length > 0 ? files.join(', ') : file}`);
}

/** Re-publishes every letter through `broker`, or the running plane's broker ingress; the letters it refuses stay in the file. */
export async function replayDeadLetters(file: string, stateDir: string, broker: string | undefined): Promise<void> {
  const plane = planeRecord(stateDir);
  // A plane killed without cleaning up leaves its record; its port may since be anyone's.
  const running = isSameProcess(plane);
  const target = broker ?? (running ? plane?.brokerUrl : undefined);
  if (!target) {
    const stale = plane?.pid !== undefined && !running ? ` (${stateDir}/plane.json names process ${plane.pid}, which has ended)` : '';
    say(`opfn dead-letters replay: no running plane found in ${stateDir}${stale} (start \`opfn dev\`), or pass --broker <url>`);
    process.exit(1);
  }
  const result = await replayDeadLetterFile(file, target);
  for (const failed of result.failed) say(`not replayed: ${failed.id}: ${failed.reason}`);
  say(
    `${result.replayed} dead letter(s) replayed through ${target}${result.failed.length ? `; ${result.failed.length} kept in the file` : ''}`,
  );
  process.exit(result.failed.length ? 1 : 0);
}

/** Deletes every dead letter (the file, its .refused letters and their rotated .1). */
export async function clearDeadLetters(file: string): Promise<void> {
  say(`${await clearDeadLetterFile(file)} dead letter(s) removed from ${file}`);
}
