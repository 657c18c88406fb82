// Convergence of a set of objects detected by a WATCH on their namespace, as a user's
// `kubectl get -w` sees it: no LIST polling that competes with the system measured for the CPU
// and the API server. By default the objects are ImmortalContainers, converged when the status
// names the pod and counts exactly the one creation (startTimes 1) for the current generation;
// another kind brings its own test (bench/composite.ts).
import { setTimeout as sleep } from 'node:timers/promises';
import type { ImmortalContainer } from '../functions/immortal-container/desired.ts';
import { ImmortalContainerKind, podNameFor } from '../functions/immortal-container/desired.ts';
import type { KubeObject, ResourceKind, KubeClient } from '../functions/runtime/index.ts';

export const converged = (ic: ImmortalContainer): boolean =>
  ic.status?.currentPod === podNameFor(ic) && ic.status.startTimes === 1 && ic.status.observedGeneration === ic.metadata.generation;

export class ConvergenceWatch {
  readonly #kube: KubeClient;
  readonly #namespace: string;
  readonly #kind: ResourceKind;
  readonly #converged: (object: KubeObject) => boolean;
  readonly #abort = new AbortController();
  readonly #done = new Set<string>();
  /** startTimes above 1 seen on any object: a double count, never expected. */
  readonly overCounted = new Set<string>();
  #want = Infinity;
  #resolve?: () => void;
  #running: Promise<void>;
  /** performance.now() when the first and the last object converged. */
  firstAt = 0;
  lastAt = 0;
  errors: string[] = [];

  constructor(
    kube: KubeClient,
    namespace: string,
    watched: { kind: ResourceKind; converged: (object: KubeObject) => boolean } = {
      kind: ImmortalContainerKind,
      converged: converged as (object: KubeObject) => boolean,
    },
  ) {
    this.#kube = kube;
    this.#namespace = namespace;
    this.#kind = watched.kind;
    this.#converged = watched.converged;
    this.#running = this.#run();
  }

  get count(): number {
    return this.#done.size;
  }

  /** Resolves once `count` objects have converged (or rejects after `timeoutMs`, naming how many had). */
  until(count: number, timeoutMs: number): Promise<void> {
    this.#want = count;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(
              `${this.#done.size}/${count} ${this.#kind.kind}s of ${this.#namespace} converged after ${timeoutMs / 1000}s; watch errors: ${this.errors.slice(-3).join(' | ') || 'none'}`,
            ),
          ),
        timeoutMs,
      );
      this.#resolve = () => {
        clearTimeout(timer);
        resolve();
      };
      if (this.#done.size >= count) this.#resolve();
    });
  }

  async stop(): Promise<void> {
    this.#abort.abort();
    await this.#running;
  }

  async #run(): Promise<void> {
    let resourceVersion: string | undefined;
    while (!this.#abort.signal.aborted) {
      try {
        for await (const event of this.#kube.watch<ImmortalContainer>(this.#kind, {
          namespace: this.#namespace,
          resourceVersion,
          signal: this.#abort.signal,
        })) {
          resourceVersion = event.object.metadata.resourceVersion ?? resourceVersion;
          if (event.type !== 'ADDED' && event.type !== 'MODIFIED') continue;
          const ic = event.object;
          if ((ic.status?.startTimes ?? 0) > 1) this.overCounted.add(ic.metadata.name!);
          if (!this.#converged(ic) || this.#done.has(ic.metadata.name!)) continue;
          this.#done.add(ic.metadata.name!);
          this.lastAt = performance.now();
          this.firstAt ||= this.lastAt;
          if (this.#done.size >= this.#want) this.#resolve?.();
        }
      } catch (error) {
        if (this.#abort.signal.aborted) return;
        this.errors.push((error as Error).message);
        if ((error as { code?: number }).code === 410) resourceVersion = undefined;
        await sleep(200);
      }
    }
  }
}

/**
 * Every object of a kind as a watch shows it, cluster-wide (by `labelSelector` if given): what
 * `valueOf` makes of each, per namespace/name, until it is deleted or `valueOf` gives undefined.
 * A bench's "done?" then reads memory, not LISTs that would cost the API server more than the
 * work measured. The watch starts with the current state (a watch without a resourceVersion) and
 * resumes where it was after an error; a 410 (it fell behind) fails the bench.
 */
export class WatchedObjects<T extends KubeObject, V> {
  readonly values = new Map<string, V>();
  readonly #abort = new AbortController();
  readonly #running: Promise<void>;

  constructor(kube: KubeClient, kind: ResourceKind, valueOf: (object: T) => V | undefined, labelSelector?: string) {
    this.#running = this.#run(kube, kind, valueOf, labelSelector);
  }

  async stop(): Promise<void> {
    this.#abort.abort();
    await this.#running;
  }

  async #run(kube: KubeClient, kind: ResourceKind, valueOf: (object: T) => V | undefined, labelSelector?: string): Promise<void> {
    let resourceVersion: string | undefined;
    while (!this.#abort.signal.aborted) {
      try {
        for await (const { type, object } of kube.watch<T>(kind, { labelSelector, resourceVersion, signal: this.#abort.signal })) {
          resourceVersion = object.metadata.resourceVersion ?? resourceVersion;
          if (type === 'BOOKMARK') continue;
          const key = `${object.metadata.namespace ?? ''}/${object.metadata.name}`;
          const value = type === 'DELETED' ? undefined : valueOf(object);
          if (value === undefined) this.values.delete(key);
          else this.values.set(key, value);
        }
      } catch (error) {
        if (this.#abort.signal.aborted) return;
        if ((error as { code?: number }).code === 410) throw new Error(`the watch of ${kind.plural} fell behind (410)`, { cause: error });
        await sleep(200);
      }
    }
  }
}
