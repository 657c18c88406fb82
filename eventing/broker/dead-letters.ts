// Where events go that could not be delivered: Knative's `deadLetterSink` (an HTTP sink that gets
// the original event plus knativeerrordest/code/data, pkg/kncloudevents/attributes/
// knative_error.go), retried with the trigger's delivery policy; locally also a JSON-lines file,
// used when no sink is configured and as the fallback when the sink fails. The log line is the
// last resort, so an event is never lost silently.
//
// The file may hold whole objects (Resource-mode events), so it is created 0600 and its size is
// capped: when an append would take it past `maxBytes`, the file is rotated to `<file>.1` (the
// previous `.1`, the oldest letters, is deleted, with a log line saying how many were dropped).
// Recent failures are the ones worth replaying; refusing new letters would keep the stale ones.
//
// Letters the subscriber refused for good (a 4xx it does not retry: a malformed or meaningless
// event) are kept apart, in `<file>.refused` with an eighth of the cap. Anyone who can reach the
// ingress can make such letters at will (a forged 3.9 MB event answered 400), and in one file
// forty of them would rotate away every letter of real work whose retries ran out.
import { mkdir, open, readdir, readFile, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import { isRetryableStatus, withErrorExtensions, type DeadLetterTarget, type DeliveryFailure, type ResolvedDelivery } from '../delivery.ts';
import { isRunning } from '../../processes/index.ts';
import { withRetries } from './attempts.ts';
import { judge, type Dispatcher } from './dispatcher.ts';

/** Default cap of the dead-letter file (the rotated `.1` may hold as much again). */
export const DEFAULT_DEAD_LETTER_MAX_BYTES = 64 * 1024 * 1024;
/** The refused letters' file gets this share of the cap. */
const REFUSED_SHARE = 1 / 8;

/** Where the letters of events refused for good are kept, beside the dead-letter file `path`. */
export const refusedLettersFile = (path: string): string => `${path}.refused`;

/** The refused letters' file gets a share of the cap. */
const refusedCap = (maxBytes: number): number => Math.max(1, Math.floor(maxBytes * REFUSED_SHARE));

/** The subscriber refused the event for good (SelectiveRetry does not retry its 4xx answer). */
const isRefusal = (failure: DeliveryFailure): boolean =>
  failure.status !== undefined && failure.status >= 400 && failure.status < 500 && !isRetryableStatus(failure.status);

const REPLAYING = '.replaying-';
/** Where this process's replay moves the letters of `path` while it sends them (`<aside>.1` holds the rotated ones). */
const replayAside = (path: string): string => `${path}${REPLAYING}${process.pid}`;

/**
 * Files that a replay killed midway left aside (`replayAside` of a process that is gone): letters
 * it may not have sent yet. Listing, replaying and clearing treat them as part of the file, so a
 * killed replay loses nothing; the letters it did send may be sent again (events are doorbells,
 * and every function is idempotent).
 */
async function strandedReplays(path: string): Promise<string[]> {
  const prefix = `${basename(path)}${REPLAYING}`;
  let names: string[];
  try {
    names = await readdir(dirname(path));
  } catch {
    return [];
  }
  return names
    .map((name) => ({ name, pid: name.startsWith(prefix) ? Number(/^(\d+)(\.|$)/.exec(name.slice(prefix.length))?.[1]) : NaN }))
    .filter(({ pid }) => Number.isSafeInteger(pid) && pid !== process.pid && !isRunning(pid))
    .map(({ name }) => join(dirname(path), name))
    .sort();
}

/** The files a dead-letter file stands for: the refused letters', then its own; in each, what a killed replay left, then the rotated predecessor, then the file. */
async function letterFiles(path: string): Promise<string[]> {
  const files: string[] = [];
  for (const family of [refusedLettersFile(path), path]) files.push(...(await strandedReplays(family)), `${family}.1`, family);
  return files;
}

const JSON_TYPE = /^application\/(json|[a-z0-9.+-]*\+json)\s*(;|$)/i;

/**
 * JSON (structured-mode) form of an event, as written to dead-letter files. Binary data is
 * data_base64, except data of a JSON content type, written as `data` so the file stays readable.
 */
export function toStructuredJson(event: CloudEventV1<unknown>): string {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(event)) {
    if (value === undefined) continue;
    if (key === 'data' && ArrayBuffer.isView(value)) {
      if (event.data_base64 === undefined)
        out.data_base64 = Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64');
      continue;
    }
    if (key === 'data' && event.data_base64 !== undefined) continue;
    out[key] = ArrayBuffer.isView(value) ? Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64') : value;
  }
  if (typeof out.data_base64 === 'string' && JSON_TYPE.test(String(event.datacontenttype ?? ''))) {
    try {
      out.data = JSON.parse(Buffer.from(out.data_base64, 'base64').toString('utf8'));
      delete out.data_base64;
    } catch {
      // not JSON after all: keep the bytes
    }
  }
  try {
    return JSON.stringify(out, (_key, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
  } catch (err) {
    return JSON.stringify({ unserializable: true, error: (err as Error).message });
  }
}

const fileChains = new Map<string, Promise<void>>();

/** Runs `work` after every earlier call for `path` has settled, so appends never interleave. */
function serialized(path: string, work: () => Promise<void>): Promise<void> {
  const next = (fileChains.get(path) ?? Promise.resolve()).catch(() => undefined).then(work);
  fileChains.set(path, next);
  void next
    .finally(() => {
      if (fileChains.get(path) === next) fileChains.delete(path);
    })
    .catch(() => undefined);
  return next;
}

/** Appends one line to a 0600 file, rotating it to `<path>.1` first when it would exceed `maxBytes`. */
export function appendJsonLine(
  path: string,
  line: string,
  options: { maxBytes?: number; onRotate?: (dropped: number) => void } = {},
): Promise<void> {
  const text = line.endsWith('\n') ? line : `${line}\n`;
  const maxBytes = options.maxBytes ?? DEFAULT_DEAD_LETTER_MAX_BYTES;
  return serialized(path, async () => {
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const size = await stat(path).then(
      (s) => s.size,
      () => 0,
    );
    if (size > 0 && size + Buffer.byteLength(text) > maxBytes) {
      const dropped = await countLines(`${path}.1`);
      await rename(path, `${path}.1`);
      options.onRotate?.(dropped);
    }
    const handle = await open(path, 'a', 0o600);
    try {
      // A file created earlier by another version may be world-readable.
      await handle.chmod(0o600);
      await handle.appendFile(text, 'utf8');
    } finally {
      await handle.close();
    }
  });
}

async function countLines(path: string): Promise<number> {
  try {
    const text = await readFile(path, 'utf8');
    return text.split('\n').filter((l) => l.trim() !== '').length;
  } catch {
    return 0;
  }
}

/** Every letter of the file, its refused letters, their rotated predecessors and what a killed replay left (oldest first in each); unparsable lines are reported, not dropped. */
export async function readDeadLetterFile(
  path: string,
): Promise<Array<{ letter?: CloudEventV1<unknown>; line: number; file: string; error?: string }>> {
  const out: Array<{ letter?: CloudEventV1<unknown>; line: number; file: string; error?: string }> = [];
  for (const file of await letterFiles(path)) {
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch {
      continue;
    }
    text.split('\n').forEach((raw, i) => {
      if (raw.trim() === '') return;
      try {
        out.push({ letter: JSON.parse(raw) as CloudEventV1<unknown>, line: i + 1, file });
      } catch (err) {
        out.push({ line: i + 1, file, error: (err as Error).message });
      }
    });
  }
  return out;
}

/** Removes the file, its refused letters, their rotated predecessors and what a killed replay left; resolves to the number of letters removed. */
export async function clearDeadLetterFile(path: string): Promise<number> {
  let removed = 0;
  for (const family of [path, refusedLettersFile(path)]) {
    await serialized(family, async () => {
      for (const file of [...(await strandedReplays(family)), family, `${family}.1`]) {
        removed += await countLines(file);
        await rm(file, { force: true });
      }
    });
  }
  return removed;
}

export class DeadLetterSink {
  readonly #file: string;
  readonly #maxBytes: number;
  readonly #dispatcher: Dispatcher;
  readonly #log: Logger;

  constructor(options: { file: string; maxBytes?: number; dispatcher: Dispatcher; log: Logger }) {
    this.#file = options.file;
    this.#maxBytes = options.maxBytes ?? DEFAULT_DEAD_LETTER_MAX_BYTES;
    this.#dispatcher = options.dispatcher;
    this.#log = options.log;
  }

  get file(): string {
    return this.#file;
  }

  /** Dead-letters `event` after `failure`: Knative's error extensions added, a log line, then the sink or file. Never rejects. */
  async send(
    target: DeadLetterTarget,
    event: CloudEventV1<unknown>,
    failure: DeliveryFailure,
    delivery: ResolvedDelivery,
    context: Record<string, unknown>,
  ): Promise<void> {
    const letter = withErrorExtensions(event, failure);
    const sink = target.kind === 'http' ? target.url : target.path;
    this.#log.warn(
      {
        ...context,
        subscriber: failure.destination,
        id: event.id,
        type: event.type,
        source: event.source,
        status: failure.status,
        reason: failure.reason,
        sink,
      },
      'event dead-lettered',
    );
    if (target.kind === 'http') await this.toHttp(target.url, letter, delivery, context);
    else if (isRefusal(failure)) await this.toFile(letter, context, refusedLettersFile(target.path), refusedCap(this.#maxBytes));
    else await this.toFile(letter, context, target.path);
  }

  /** Sends `letter` to the HTTP sink (retried per `delivery`), falling back to the file. Never rejects. */
  async toHttp(url: string, letter: CloudEventV1<unknown>, delivery: ResolvedDelivery, context: Record<string, unknown>): Promise<void> {
    const error = await this.#sendToSink(url, letter, delivery);
    if (error === undefined) return;
    this.#log.error(
      { ...context, id: letter.id, sink: url, error, fallback: this.#file },
      'dead-letter sink failed; writing the event to the dead-letter file',
    );
    await this.toFile(letter, context);
  }

  /** Appends `letter` to the file (or `path`, capped at `maxBytes`); when even that fails the event goes into the log. Never rejects. */
  async toFile(
    letter: CloudEventV1<unknown>,
    context: Record<string, unknown>,
    path = this.#file,
    maxBytes = this.#maxBytes,
  ): Promise<void> {
    const line = toStructuredJson(letter);
    try {
      await appendJsonLine(path, line, {
        maxBytes,
        onRotate: (dropped) =>
          this.#log.warn(
            { file: path, maxBytes, dropped },
            `dead-letter file reached its size cap; rotated to ${path}.1 (${dropped} older letters deleted)`,
          ),
      });
    } catch (err) {
      this.#log.error({ ...context, file: path, err, event: line }, 'cannot write the dead-letter file; the event is in this log line');
    }
  }

  /** Undefined when the sink took the letter; else why not. */
  async #sendToSink(url: string, letter: CloudEventV1<unknown>, delivery: ResolvedDelivery): Promise<string | undefined> {
    // A closing broker needs no check of its own: its dispatcher then fails every send at once, for good.
    const result = await withRetries(
      this.#dispatcher,
      delivery,
      () => false,
      async () => {
        const outcome = await this.#dispatcher.send(url, letter, delivery.timeoutMs, false);
        // Any 2xx: Knative reads only a dead-letter sink's status, not its body.
        if (outcome.kind === 'response' && outcome.status >= 200 && outcome.status < 300) return { ok: true };
        return judge(url, outcome);
      },
    );
    return result.ok ? undefined : (result.failure?.reason ?? 'not attempted');
  }
}

/** Knative's error extensions and the broker's TTL: taken off a letter before it is sent again. */
const DELIVERY_ATTRIBUTES = ['knativeerrordest', 'knativeerrorcode', 'knativeerrordata', 'knativebrokerttl'];

/** The event as it was before its failed delivery (error extensions and TTL removed). */
export function originalEvent(letter: CloudEventV1<unknown>): CloudEventV1<unknown> {
  const out: Record<string, unknown> = { ...letter };
  for (const name of DELIVERY_ATTRIBUTES) delete out[name];
  return out as unknown as CloudEventV1<unknown>;
}

export interface ReplayResult {
  replayed: number;
  /** Letters the broker did not accept; they are written back to the file. */
  failed: Array<{ id: string; reason: string }>;
}

/**
 * Re-publishes every letter through a broker's ingress (structured mode). The file is moved
 * aside first, so letters the broker writes meanwhile (a replay that fails again) land in a new
 * file and are never lost; letters the ingress refuses are appended back. What an earlier replay
 * killed midway left aside is taken over and sent first.
 */
export async function replayDeadLetterFile(path: string, brokerUrl: string): Promise<ReplayResult> {
  const result: ReplayResult = { replayed: 0, failed: [] };
  // Both files are moved aside before anything is sent: a replayed letter the function refuses
  // again lands in a new `.refused` file, not in this replay a second time.
  const families = [
    { path, maxBytes: DEFAULT_DEAD_LETTER_MAX_BYTES, moved: await moveAside(path) },
    {
      path: refusedLettersFile(path),
      maxBytes: refusedCap(DEFAULT_DEAD_LETTER_MAX_BYTES),
      moved: await moveAside(refusedLettersFile(path)),
    },
  ];
  for (const family of families) await replayMoved(family, brokerUrl, result);
  return result;
}

/** Moves a file, its rotated predecessor and what a killed replay left into this replay's own files (`replayAside`); returns them, oldest first. */
async function moveAside(path: string): Promise<string[]> {
  const aside = replayAside(path);
  const moved: string[] = [];
  const stranded = await strandedReplays(path);
  const sources = [
    ...stranded.map((file, i) => ({ file, target: `${aside}.taken-${i}` })),
    { file: `${path}.1`, target: `${aside}.1` },
    { file: path, target: aside },
  ];
  for (const { file, target } of sources) {
    try {
      await rename(file, target);
      moved.push(target);
    } catch {
      // no such file, or another replay took it over first
    }
  }
  return moved;
}

/** Sends the letters of the moved files into `result`; what is not accepted goes back to `path`. */
async function replayMoved(
  { path, maxBytes, moved }: { path: string; maxBytes: number; moved: string[] },
  brokerUrl: string,
  result: ReplayResult,
): Promise<void> {
  const rest: string[] = [];
  for (const file of moved) {
    const text = await readFile(file, 'utf8');
    for (const line of text.split('\n')) {
      if (line.trim() === '') continue;
      let letter: CloudEventV1<unknown>;
      try {
        letter = JSON.parse(line) as CloudEventV1<unknown>;
      } catch (err) {
        result.failed.push({ id: '?', reason: `unparsable line kept: ${(err as Error).message}` });
        rest.push(line);
        continue;
      }
      const reason = await post(brokerUrl, toStructuredJson(originalEvent(letter)));
      if (reason === undefined) result.replayed++;
      else {
        result.failed.push({ id: String(letter.id), reason });
        rest.push(line);
      }
    }
  }
  for (const line of rest) await appendJsonLine(path, line, { maxBytes });
  for (const file of moved) await rm(file, { force: true });
}

async function post(url: string, body: string): Promise<string | undefined> {
  try {
    const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/cloudevents+json' }, body });
    const text = await response.text();
    return response.status >= 200 && response.status < 300 ? undefined : `${response.status} ${text.trim()}`;
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    return `broker ${url} unreachable (${cause?.code ?? cause?.message ?? (err as Error).message})`;
  }
}
