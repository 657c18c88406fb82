// ApiServerSource: one ResourceLoop per (source, resource), one Delivery to the sink, an
// optional periodic resync; see index.ts for the behaviour as a whole.
import { describe } from './backoff.ts';
import { Delivery, type Counters } from './delivery.ts';
import { ResourceLoop, type LoopContext, LIST_PAGE_SIZE } from './resource-loop.ts';
import type { SourceOptions, SourceStats } from './types.ts';

const DEFAULT_RESYNC_MS = 10 * 60_000;
const DEFAULT_WATCH_TIMEOUT_SECONDS = 300;
const DEFAULT_MAX_PENDING = 256;

export class ApiServerSource {
  readonly #options: SourceOptions;
  readonly #abort = new AbortController();
  readonly #delivery: Delivery;
  readonly #counters: Counters = { relists: 0, watchRestarts: 0 };
  readonly #loops: ResourceLoop[] = [];
  readonly #running: Promise<void>[] = [];
  #timer: ReturnType<typeof setInterval> | undefined;
  #started = false;

  constructor(options: SourceOptions) {
    for (const spec of options.sources) {
      if (spec.mode !== 'Reference' && spec.mode !== 'Resource')
        throw new Error(`source ${spec.name}: mode must be "Reference" or "Resource", not "${String(spec.mode)}"`);
      if (spec.resources.length === 0) throw new Error(`source ${spec.name}: no resources to watch`);
    }
    this.#options = options;
    this.#delivery = new Delivery(
      options.sink,
      options.log,
      this.#abort.signal,
      Math.max(1, options.maxPendingEvents ?? DEFAULT_MAX_PENDING),
      this.#counters,
    );
  }

  /**
   * Lists every resource, emits an `add` event for every existing object (Knative's
   * ApiServerSource does not), then watches. Resolves once the sink accepted the initial
   * events; rejects (and stops) when a list fails in a way only a user can fix (403, 404,
   * invalid selector). An unreachable API server is retried, logged, until it answers.
   */
  async start(): Promise<void> {
    if (this.#started) throw new Error('ApiServerSource already started');
    this.#started = true;
    const { kube, log } = this.#options;
    const ctx: LoopContext = {
      kube,
      server: kube.server,
      log,
      delivery: this.#delivery,
      signal: this.#abort.signal,
      watchTimeoutSeconds: this.#options.watchTimeoutSeconds ?? DEFAULT_WATCH_TIMEOUT_SECONDS,
      listPageSize: Math.max(1, this.#options.listPageSize ?? LIST_PAGE_SIZE),
      counters: this.#counters,
    };
    for (const spec of this.#options.sources) {
      for (const resource of spec.resources) {
        const loop = new ResourceLoop(spec, resource, ctx);
        this.#loops.push(loop);
        this.#running.push(
          loop.run().catch((error: unknown) => {
            // Not expected: run() handles its own failures. Say so loudly rather than stop silently.
            log.error(
              { source: spec.name, resource: resource.kind.plural, reason: describe(error) },
              `watch loop of ${resource.kind.plural} crashed: ${describe(error)}`,
            );
          }),
        );
      }
    }
    try {
      await Promise.all(this.#loops.map((loop) => loop.ready));
    } catch (error) {
      await this.stop();
      throw error;
    }
    const resyncMs = this.#options.resyncIntervalMs ?? DEFAULT_RESYNC_MS;
    if (resyncMs > 0 && !this.#abort.signal.aborted) {
      this.#timer = setInterval(() => {
        for (const loop of this.#loops) {
          loop.resync().catch((error: unknown) => log.warn({ reason: describe(error) }, `resync failed: ${describe(error)}`));
        }
      }, resyncMs);
      this.#timer.unref();
    }
  }

  /** Aborts the watches, lists and sink retries and clears the timer; a sink call already in flight is not awaited. */
  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    this.#abort.abort(new Error('ApiServerSource stopped'));
    await Promise.all(this.#running);
  }

  stats(): SourceStats {
    const { relists, watchRestarts, lastError } = this.#counters;
    return {
      emitted: this.#delivery.emitted,
      relists,
      watchRestarts,
      ...(lastError ? { lastError } : {}),
      pending: this.#delivery.pending,
      sinkRetries: this.#delivery.sinkRetries,
    };
  }
}
