// Kubernetes API requests as the API server itself counts them: `apiserver_request_total` from
// kube-apiserver's /metrics, summed per verb and per resource, as a difference between two
// scrapes. Counting at the server covers every client at once (the user, the source, every
// function instance, the controller manager), which a client-side counter cannot.
// `byResource` keeps the verb as the server reports it.
// A request is counted when its handler returns, a moment after the client has its answer, and a
// watch only when it ends.
import { setTimeout as sleep } from 'node:timers/promises';
import type { ControlPlane } from '../cluster/index.ts';

export interface RequestSeries {
  verb: string;
  resource: string;
  code: string;
  value: number;
}
export type RequestTotals = Map<string, RequestSeries>;

/** verb → count, "VERB resource[/subresource]" → count, and the same with the HTTP code where it is not 2xx; `total` excludes non-resource paths. */
export interface RequestCounts {
  byVerb: Record<string, number>;
  byResource: Record<string, number>;
  failed: Record<string, number>;
  total: number;
}

export function parseRequestTotals(text: string): RequestTotals {
  const series: RequestTotals = new Map();
  for (const line of text.split('\n')) {
    if (!line.startsWith('apiserver_request_total{')) continue;
    const labelsEnd = line.lastIndexOf('}');
    const labels = Object.fromEntries(
      [...line.slice('apiserver_request_total{'.length, labelsEnd).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((match) => [
        match[1],
        match[2],
      ]),
    );
    // /metrics, /readyz, /healthz…: the measurement and probes, not work on objects.
    const resource = labels.resource ? `${labels.resource}${labels.subresource ? `/${labels.subresource}` : ''}` : '';
    series.set(line.slice(0, labelsEnd + 1), {
      verb: labels.verb ?? '?',
      resource,
      code: labels.code ?? '',
      value: Number(line.slice(labelsEnd + 1).trim()),
    });
  }
  return series;
}

export async function scrapeRequestTotals(cp: Pick<ControlPlane, 'request'>): Promise<RequestTotals> {
  const answer = await cp.request('GET', '/metrics');
  if (answer.status !== 200 || typeof answer.body !== 'string') throw new Error(`GET /metrics answered ${answer.status}`);
  return parseRequestTotals(answer.body);
}

/** Requests on resources between two scrapes; `withNonResource` also keeps paths like /metrics under "(other)". */
export function requestDifference(before: RequestTotals, after: RequestTotals, withNonResource = false): RequestCounts {
  const counts: RequestCounts = { byVerb: {}, byResource: {}, failed: {}, total: 0 };
  for (const [key, { verb, resource, code, value }] of after) {
    const delta = value - (before.get(key)?.value ?? 0);
    if (delta === 0 || (!resource && !withNonResource)) continue;
    const label = `${verb} ${resource || '(other)'}`;
    counts.byVerb[verb] = (counts.byVerb[verb] ?? 0) + delta;
    counts.byResource[label] = (counts.byResource[label] ?? 0) + delta;
    if (!code.startsWith('2')) counts.failed[`${label} ${code}`] = (counts.failed[`${label} ${code}`] ?? 0) + delta;
    counts.total += delta;
  }
  return counts;
}

/**
 * Waits until the API server has counted no new resource request for `quietMs` (scraping every
 * `everyMs`), or `timeoutMs` passed; returns the last scrape and when the counts last moved.
 */
export async function awaitQuiet(
  cp: Pick<ControlPlane, 'request'>,
  options: { quietMs?: number; everyMs?: number; timeoutMs?: number } = {},
): Promise<{ totals: RequestTotals; lastChangeAt: number; quiet: boolean }> {
  const { quietMs = 1500, everyMs = 250, timeoutMs = 120_000 } = options;
  const deadline = performance.now() + timeoutMs;
  let totals = await scrapeRequestTotals(cp);
  let lastChangeAt = performance.now();
  while (performance.now() < deadline) {
    await sleep(everyMs);
    const next = await scrapeRequestTotals(cp);
    if (requestDifference(totals, next).total > 0) lastChangeAt = performance.now();
    totals = next;
    if (performance.now() - lastChangeAt >= quietMs) return { totals, lastChangeAt, quiet: true };
  }
  return { totals, lastChangeAt, quiet: false };
}
