// The edit loop of `opfn dev`: a saved function source is rebuilt and its instances rolled, as a
// new revision would roll them (`opfn reload` asks the same of a running plane with SIGUSR2),
// and the plane's state is written to the state folder for `opfn status`. The control plane and
// every object stay as they are.
import { type FSWatcher, renameSync, watch, writeFileSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import type { Activator } from '../eventing/activator/index.ts';
import type { EventPlane } from '../eventing/plane.ts';
import { STATUS_FILE } from '../eventing/state-files.ts';

/** The plane's state as `opfn status` reads it (status.json). */
export interface PlaneStatus {
  pid: number;
  /** When it was written (ISO 8601). */
  updated: string;
  functions: Record<string, { instances: number; started: number; peakInstances: number; proxied: number; direct: number }>;
  triggers: Record<string, { queued: number; inFlight: number; delivered: number; retried: number; deadLettered: number }>;
  /** The last reload: when, which functions, and its outcome. */
  lastReload?: { at: string; functions: string[]; outcome: string };
}

/** Writes status.json now and every `everyMs` (atomically: a reader never sees half a file); returns the stop. */
export function writeStatusPeriodically(
  plane: EventPlane,
  stateDir: string,
  lastReload: () => PlaneStatus['lastReload'],
  everyMs = 2000,
): () => void {
  const path = join(stateDir, STATUS_FILE);
  const write = () => {
    const stats = plane.stats();
    const status: PlaneStatus = {
      pid: process.pid,
      updated: new Date().toISOString(),
      functions: stats.activator,
      triggers: stats.broker,
      lastReload: lastReload(),
    };
    try {
      writeFileSync(`${path}.${process.pid}`, JSON.stringify(status, null, 2));
      renameSync(`${path}.${process.pid}`, path);
    } catch {
      // A state folder removed meanwhile: the next write tries again.
    }
  };
  write();
  const timer = setInterval(write, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * Which functions a changed file belongs to: those whose folder (the folder of their declaration
 * module) holds it; a change elsewhere under the watched folders (the runtime, shared code)
 * concerns them all.
 */
export function functionsOfChange(file: string, folders: Record<string, string>): string[] {
  const owners = Object.entries(folders)
    .filter(([, folder]) => file === folder || file.startsWith(folder + sep))
    .map(([name]) => name);
  return owners.length > 0 ? owners : Object.keys(folders);
}

/** Files whose change is no edit of a function (editor swap files, build output, state). */
const IGNORED = /(^|[\\/])(node_modules|\.opfn|dist|\.git)([\\/]|$)|(~|\.swp|\.swx|\.tmp)$|(^|[\\/])\.#/;

/**
 * Watches `root` (recursively) for changed TypeScript or JSON sources and calls `changed` with
 * the functions they concern, once per burst of saves (`debounceMs` after the last one). Returns
 * the watcher's close.
 */
export function watchFunctionSources(
  root: string,
  folders: Record<string, string>,
  changed: (functions: string[], files: string[]) => void,
  debounceMs = 300,
): () => void {
  const pending = new Set<string>();
  let timer: NodeJS.Timeout | undefined;
  const watcher: FSWatcher = watch(root, { recursive: true }, (_event, name) => {
    if (!name) return;
    const file = resolve(root, name.toString());
    if (IGNORED.test(relative(root, file)) || !/\.(ts|mts|cts|js|mjs|cjs|json)$/.test(file)) return;
    pending.add(file);
    if (timer) clearTimeout(timer);
    timer = setTimeout(() => {
      const files = [...pending];
      pending.clear();
      changed([...new Set(files.flatMap((file) => functionsOfChange(file, folders)))].sort(), files);
    }, debounceMs);
  });
  watcher.on('error', () => {});
  return () => {
    if (timer) clearTimeout(timer);
    watcher.close();
  };
}

/**
 * Rebuilds (when the plane runs bundles) and rolls `functions`, one reload at a time: a save
 * during a rebuild waits for it, then runs with every function asked for meanwhile. A failed
 * build rolls nothing: the instances keep running the last good build.
 */
export function reloader(
  plane: { activator: Pick<Activator, 'roll' | 'functionNames'> },
  rebuild: (() => Promise<unknown>) | undefined,
  say: (line: string) => void,
): { reload(functions: string[], why: string): Promise<void>; last(): PlaneStatus['lastReload'] } {
  let running: Promise<void> | undefined;
  const queued = new Set<string>();
  let queuedWhy = '';
  let last: PlaneStatus['lastReload'];
  const once = async (functions: string[], why: string): Promise<void> => {
    const started = performance.now();
    const known = functions.filter((name) => plane.activator.functionNames.includes(name));
    try {
      if (rebuild) await rebuild();
    } catch (error) {
      last = { at: new Date().toISOString(), functions: known, outcome: `build failed: ${(error as Error).message}` };
      say(`Reload (${why}): the build failed, nothing rolled; the instances keep the last good build:\n${(error as Error).message}`);
      return;
    }
    const replaced = known.map((name) => plane.activator.roll(name, why)).reduce((a, b) => a + b, 0);
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    last = { at: new Date().toISOString(), functions: known, outcome: `${rebuild ? 'rebuilt, ' : ''}${replaced} instance(s) replaced` };
    say(
      `Reloaded ${known.join(', ')} (${why}) in ${seconds}s: ${rebuild ? 'rebuilt; ' : ''}${replaced} running instance(s) replaced, the next ones start from the new code.`,
    );
  };
  const reload = async (functions: string[], why: string): Promise<void> => {
    if (running) {
      for (const name of functions) queued.add(name);
      queuedWhy = why;
      return running;
    }
    running = once(functions, why).finally(() => {
      running = undefined;
      if (queued.size > 0) {
        const next = [...queued];
        queued.clear();
        void reload(next, queuedWhy);
      }
    });
    return running;
  };
  return { reload, last: () => last };
}
