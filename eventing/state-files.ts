// What a plane keeps in its state folder (`.opfn` of the project), named and read back in one
// place; light enough for the CLI to load without loading the plane.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/** The state folder's name in a project. */
export const STATE_DIR_NAME = '.opfn';

/**
 * The state folder of the project `from` is in, so that `opfn` finds the running plane and
 * cluster from any of its folders: $OPFN_STATE_DIR when set; else the nearest `.opfn` in `from`
 * or a folder above it, stopping at the project's root (the nearest folder with a package.json),
 * whose `.opfn` it is then; else `.opfn` in `from`.
 */
export function findStateDir(from: string = process.cwd(), env: NodeJS.ProcessEnv = process.env): string {
  if (env.OPFN_STATE_DIR) return resolve(env.OPFN_STATE_DIR);
  for (let folder = resolve(from); ; folder = dirname(folder)) {
    if (existsSync(join(folder, STATE_DIR_NAME)) || existsSync(join(folder, 'package.json'))) return join(folder, STATE_DIR_NAME);
    if (dirname(folder) === folder) return join(resolve(from), STATE_DIR_NAME);
  }
}

export const DEAD_LETTER_FILE = 'dead-letters.jsonl';
/**
 * The running plane's pid (with the process's start time), broker and activator URLs and the
 * kubeconfig of its cluster, for `opfn dead-letters replay`, `invoke`, `reload`, `cluster env`.
 */
export const PLANE_STATE_FILE = 'plane.json';
/** What the running plane does now (functions, instances, Triggers), rewritten every few seconds, for `opfn status`. */
export const STATUS_FILE = 'status.json';
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
  readRecord(join(stateDir, PLANE_STATE_FILE), {
    pid: 'number',
    startTime: 'string',
    brokerUrl: 'string',
    activatorUrl: 'string',
    kubeconfig: 'string',
    binDir: 'string',
  });

/** What `opfn cluster up` running from `stateDir` wrote about its control plane. */
export const clusterRecord = (stateDir: string) =>
  readRecord(join(stateDir, CLUSTER_STATE_FILE), { pid: 'number', startTime: 'string', kubeconfig: 'string', binDir: 'string' });
