// Function processes' stdout/stderr, line by line, prefixed with the instance (`[name#n] `) or
// sent to the plane's log with a `component` key naming the function.
import type { Readable, Writable } from 'node:stream';
import type { Logger } from 'pino';

/** Longest line relayed; the rest of a longer one is dropped, not relayed as lines of its own. */
const MAX_LINE = 64 * 1024;

export function pipeLines(stream: Readable, emit: (line: string) => void): void {
  let buf = '';
  // Inside an overlong line whose start was emitted: skip to its end.
  let skipping = false;
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    buf += chunk;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      if (!skipping) emit(buf.slice(0, nl).replace(/\r$/, ''));
      skipping = false;
      buf = buf.slice(nl + 1);
    }
    if (buf.length > MAX_LINE) {
      // Its pieces as lines of their own would look like records (a JSON log line cut in parts).
      if (!skipping) emit(`${buf.slice(0, MAX_LINE)}… (line longer than ${MAX_LINE} characters, cut)`);
      skipping = true;
      buf = '';
    }
  });
  stream.on('end', () => {
    if (buf && !skipping) emit(buf);
    buf = '';
  });
  stream.on('error', () => {});
}

/**
 * Where one instance's lines go. A JSON log line of the function (it carries its own
 * `component`) passes through with the instance number added, so the plane's output stays JSON
 * lines; any other line is prefixed `[name#n] `.
 */
export function lineSink(
  output: Writable | 'log',
  log: Logger,
  fn: string,
  instance: number,
  which: 'stdout' | 'stderr',
): (line: string) => void {
  if (output === 'log') {
    const child = log.child({ fn, instance, stream: which });
    return (line) => child.info(line);
  }
  const prefix = `[${fn}#${instance}] `;
  return (line) =>
    output.write(line.startsWith('{"') && line.endsWith('}') ? `{"instance":${instance},${line.slice(1)}\n` : `${prefix}${line}\n`);
}
