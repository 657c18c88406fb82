// Logs: JSON lines (what Knative's log collection expects, and what pipes and files get), or
// human-readable lines when stdout is a terminal. LOG_FORMAT=json|pretty forces one, LOG_LEVEL
// overrides "info". Every line carries one `component` key: the function's name in a function
// process; source, broker, activator or plane in the local event plane.
import { Writable } from 'node:stream';
import { pino, type Logger } from 'pino';

export type LogFormat = 'json' | 'pretty';

/** LOG_FORMAT when set, else pretty on a terminal and JSON otherwise. */
export function logFormat(env: NodeJS.ProcessEnv = process.env, tty = process.stdout.isTTY === true): LogFormat {
  const forced = env.LOG_FORMAT?.trim().toLowerCase();
  if (forced === 'json' || forced === 'pretty') return forced;
  return tty ? 'pretty' : 'json';
}

/** `component` names the process's part (omit it for a root whose children name theirs). */
export function createLogger(component?: string, level = process.env.LOG_LEVEL ?? 'info', format: LogFormat = logFormat()): Logger {
  const options = { level, base: component ? { component } : {}, timestamp: pino.stdTimeFunctions.isoTime };
  return format === 'pretty' ? pino(options, prettyStream(process.stdout)) : pino(options);
}

const LEVELS: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO ', 40: 'WARN ', 50: 'ERROR', 60: 'FATAL' };
const COLORS: Record<number, string> = { 40: '\u001b[33m', 50: '\u001b[31m', 60: '\u001b[31m' };
const OMIT = new Set(['level', 'time', 'msg', 'component', 'pid', 'hostname']);

/** One pino JSON line as `12:00:00.123 INFO  broker  message key=value …`; anything else unchanged. */
export function prettyLine(json: string, color = false): string {
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  if (record === null || typeof record !== 'object') return json;
  const time = typeof record.time === 'string' ? record.time.slice(11, 23) : '';
  const level = typeof record.level === 'number' ? record.level : 30;
  const name = LEVELS[level] ?? String(level);
  const fields = Object.entries(record)
    .filter(([key, value]) => !OMIT.has(key) && value !== undefined)
    .map(
      ([key, value]) =>
        `${key}=${typeof value === 'string' && !/\s/.test(value) ? value : JSON.stringify(key === 'err' ? errorText(value) : value)}`,
    );
  const head = `${time} ${color && COLORS[level] ? `${COLORS[level]}${name}\u001b[0m` : name} ${String(record.component ?? '-').padEnd(10)} ${String(record.msg ?? '')}`;
  return fields.length ? `${head}  ${fields.join(' ')}` : head;
}

function errorText(value: unknown): unknown {
  const err = value as { message?: string; type?: string };
  return err && typeof err === 'object' && err.message ? `${err.type ?? 'Error'}: ${err.message}` : value;
}

function prettyStream(out: NodeJS.WriteStream): Writable {
  const color = out.isTTY === true;
  return new Writable({
    write(chunk: Buffer, _encoding, callback) {
      const lines = chunk
        .toString('utf8')
        .split('\n')
        .filter((line) => line.trim() !== '');
      // Handed on at once, waiting only when the terminal pushes back: a line logged just before
      // process.exit() is written, where waiting for each write's callback kept it in this
      // stream's buffer and lost it.
      if (out.write(lines.map((line) => `${prettyLine(line, color)}\n`).join(''))) callback();
      else out.once('drain', () => callback());
    },
  });
}
