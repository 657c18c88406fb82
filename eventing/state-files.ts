// What a plane keeps in its state folder (`.opfn` by default), named and read back in one place;
// light enough for the CLI to load without loading the plane.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export const DEAD_LETTER_FILE = 'dead-letters.jsonl';
/** The running plane's pid (with the process's start time) and broker URL, for `opfn dead-letters replay`. */
export const PLANE_STATE_FILE = 'plane.json';
/** The control plane `opfn cluster up` keeps running: its pid (with the process's start time), server and kubeconfig. */
export const CLUSTER_STATE_FILE = 'cluster.json';

/** The fields of a JSON record in the folder that have the expected type; undefined when the file is missing or not JSON. */
function readRecord<T extends Record<string, 'string' | 'number'>>(
  path: string,
  fields: T,
): { [K in keyof T]?: T[K] extends 'string' ? string : number } | undefined {
  let parsed: Record<string, unknown>;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  return Object.fromEntries(
    Object.entries(fields)
      .filter(([name, type]) => typeof parsed?.[name] === type)
      .map(([name]) => [name, parsed[name]]),
  ) as { [K in keyof T]?: T[K] extends 'string' ? string : number };
}

/** What the plane running from `stateDir` wrote about itself. */
export const planeRecord = (stateDir: string) =>
  readRecord(join(stateDir, PLANE_STATE_FILE), { pid: 'number', startTime: 'string', brokerUrl: 'string' });

/** What `opfn cluster up` running from `stateDir` wrote about its control plane. */
export const clusterRecord = (stateDir: string) =>
  readRecord(join(stateDir, CLUSTER_STATE_FILE), { pid: 'number', startTime: 'string', kubeconfig: 'string', binDir: 'string' });
