// HTTP helpers for tests: a raw POST to a function host that keeps the answer as text and JSON,
// one sample of a Prometheus metric from /metrics, and loopback servers closed after a file's tests.
import type { Server } from 'node:http';
import { after } from 'node:test';

export interface RawAnswer {
  status: number;
  contentType: string;
  text: string;
  /** The body as JSON, undefined when it is not JSON. */
  json: { error?: string; failed?: number; [field: string]: unknown } | undefined;
}

/** POSTs `body` with exactly `headers` (no CloudEvent encoding: malformed requests stay malformed). */
export async function postRaw(url: string, headers: Record<string, string>, body?: string): Promise<RawAnswer> {
  const response = await fetch(url, { method: 'POST', headers, body });
  const text = await response.text();
  let json: RawAnswer['json'];
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, contentType: response.headers.get('content-type') ?? '', text, json };
}

/** The value of metric `name` whose labels include `labels`, as /metrics at `url` shows it now. */
export async function metricValue(url: string, name: string, labels: Record<string, string>): Promise<number | undefined> {
  const text = await (await fetch(`${url}/metrics`)).text();
  for (const line of text.split('\n')) {
    const match = /^(\w+)\{([^}]*)\} (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const present = Object.fromEntries([...match[2].matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([key, value]) => present[key] === value)) return Number(match[3]);
  }
  return undefined;
}

/** The loopback servers a test file starts, each closed (its connections cut) once the file's tests are done. */
export function serversClosedAfter(): Server[] {
  const servers: Server[] = [];
  after(() => {
    for (const server of servers) {
      server.closeAllConnections();
      server.close();
    }
  });
  return servers;
}
