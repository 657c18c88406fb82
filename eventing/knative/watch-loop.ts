// A list-then-watch loop over one kind, as client-go's reflector runs it for an informer: list
// (every object is `applied`, objects gone since the last list are `removed`), then watch from
// the list's resourceVersion, resume from the last resourceVersion when a watch ends, and list
// again only on 410 Gone or a failure (with backoff). Handlers run one at a time, in order.
import type { Logger } from 'pino';
import { keyOf, keyString, type KubeObject, type ResourceKind } from '../../functions/runtime/kinds.ts';
import { ApiError, type KubeClient } from '../../functions/runtime/kube.ts';

export interface ObjectHandlers {
  apply(object: KubeObject): Promise<void>;
  remove(object: KubeObject): Promise<void>;
}

const BACKOFF_INITIAL_MS = 200;
const BACKOFF_MAX_MS = 10_000;

const sleep = (ms: number, signal: AbortSignal) => new Promise<void>((resolve) => {
  const timer = setTimeout(resolve, ms);
  signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
});

/**
 * Runs until `signal` aborts. Resolves `listed` after the first list was applied (or rejects
 * with the reason the kind cannot be listed, e.g. its CRD is missing).
 */
export function watchObjects(kube: KubeClient, kind: ResourceKind, handlers: ObjectHandlers, log: Logger, signal: AbortSignal): { listed: Promise<void>; done: Promise<void> } {
  const known = new Map<string, KubeObject>();
  let resolveListed!: () => void;
  let rejectListed!: (error: Error) => void;
  const listed = new Promise<void>((resolve, reject) => { resolveListed = resolve; rejectListed = reject; });
  listed.catch(() => {});
  const handle = async (what: 'apply' | 'remove', object: KubeObject) => {
    try {
      await handlers[what](object);
    } catch (error) {
      log.warn({ kind: kind.kind, object: keyString(keyOf(object)), reason: (error as Error).message }, `${kind.kind} ${keyString(keyOf(object))}: ${(error as Error).message}`);
    }
  };
  const done = (async () => {
    let resourceVersion: string | undefined;
    let delay = BACKOFF_INITIAL_MS;
    let first = true;
    while (!signal.aborted) {
      try {
        if (!resourceVersion) {
          const list = await kube.list(kind);
          const seen = new Set<string>();
          for (const object of list.items) {
            const key = keyString(keyOf(object));
            seen.add(key);
            known.set(key, object);
            await handle('apply', object);
          }
          for (const [key, object] of known) if (!seen.has(key)) { known.delete(key); await handle('remove', object); }
          resourceVersion = list.metadata.resourceVersion;
          if (first) { first = false; resolveListed(); }
        }
        for await (const event of kube.watch(kind, { resourceVersion, timeoutSeconds: 300, signal })) {
          resourceVersion = event.object.metadata.resourceVersion ?? resourceVersion;
          if (event.type === 'BOOKMARK') continue;
          if (event.type === 'ERROR') throw new ApiError(Number((event.object as { code?: number }).code ?? 500), 'WatchError', JSON.stringify(event.object));
          const key = keyString(keyOf(event.object));
          if (event.type === 'DELETED') { known.delete(key); await handle('remove', event.object); }
          else { known.set(key, event.object); await handle('apply', event.object); }
          delay = BACKOFF_INITIAL_MS;
        }
      } catch (error) {
        if (signal.aborted) break;
        if (first && error instanceof ApiError && !error.transient) { rejectListed(new Error(`cannot list ${kind.plural}: ${error.message}`)); return; }
        // 410 Gone or a broken connection: list again (what changed meanwhile is applied then).
        resourceVersion = undefined;
        log.debug({ kind: kind.kind, reason: (error as Error).message }, `watch of ${kind.plural} failed; listing again`);
        await sleep(delay, signal);
        delay = Math.min(delay * 2, BACKOFF_MAX_MS);
      }
    }
  })();
  return { listed, done };
}
