// Knative ApiServerSources (sources.knative.dev/v1) on the local plane: each object runs as its
// own local ApiServerSource (eventing/source/) with the spec's resources, label selectors,
// mode and ceOverrides, sending to the broker; an update restarts it with the new spec (its
// initial list then emits `add` for what exists, which level-triggered functions treat as a
// resync), a delete stops it.
//
// As Knative's controller and adapter do (knative/eventing pkg/reconciler/apiserversource,
// pkg/adapter/apiserver): it authenticates as `spec.serviceAccountName` when the plane can issue
// that account a token (the local control plane can), so a source missing list/watch on a kind
// fails here as on a cluster. Namespaces: without `namespaceSelector` a source watches its own
// namespace (cluster-scoped kinds everywhere), so a namespace Role suffices as on a cluster; an
// empty selector (`{}`) watches every namespace through one cluster-wide watch per kind; a
// selector with labels watches each namespace it selects (one watch per namespaced kind and
// namespace, cluster-scoped kinds once), and when the selected set changes (a namespace created,
// relabelled or deleted: namespacesChanged) the source restarts on the new set, as Knative's
// global resync rolls the adapter. `status.namespaces` lists the watched namespaces, sorted
// (every namespace for `{}`). Conditions: SinkProvided, SufficientPermissions, Deployed, Ready
// (apiserver_lifecycle.go); `status.sinkUri`. `owner` keeps only objects controlled by that
// apiVersion/kind, as the adapter's controllerFilter does. Refused (Ready=False with the reason)
// what the local source does not implement: `filters` (the NewAPIServerFilters feature, off by
// default in Knative 1.23, whose webhook then refuses the field too).
//
// A source that cannot run for a reason the world outside it may mend (a kind not served yet: its
// CRD applied later; a watch refused: a Role bound later; namespaces not listed) is applied
// again with backoff until it runs, as Knative's reconciler returns the error and its workqueue
// requeues the key (RETRY_BASE_MS doubling up to RETRY_MAX_MS): no touch of the source needed.
import type { CloudEventV1 } from 'cloudevents';
import type { Logger } from 'pino';
import {
  apiVersionOf,
  isValidGroupVersion,
  keyOf,
  keyString,
  Namespace,
  parseApiVersion,
  type KubeObject,
  type LabelSelector,
  type ResourceKind,
  type KubeClient,
  guessedResource,
  compileSelector,
} from '../../functions/runtime/index.ts';
import { formatLabelSelector } from '../manifests/index.ts';
import { ApiServerSource as LocalSource, type SourceSpec, type SourceStats } from '../source/index.ts';
import type { BrokerDirectory } from './brokers.ts';
import { ceOverridesProblem, overrideExtensions } from './ce-overrides.ts';
import { ApiServerSource } from './kinds.ts';
import { cleared, notReady, ready, type StatusWriter, type Verdict } from './status.ts';

interface SourceObjectSpec {
  mode?: 'Reference' | 'Resource';
  resources?: { apiVersion?: string; kind?: string; selector?: LabelSelector }[];
  namespaceSelector?: LabelSelector;
  owner?: { apiVersion?: unknown; kind?: unknown };
  filters?: unknown[];
  serviceAccountName?: string;
  ceOverrides?: { extensions?: Record<string, string> };
  sink?: { ref?: { kind?: string; name?: string; namespace?: string }; uri?: string };
}

/**
 * Finds what an ApiServerSource's resource watches, as Knative's adapter does: the resource it
 * guesses from the kind (guessedResource), if discovery serves one of that name, with the kind
 * and scope discovery gives it (one discovery call per API version, cached). A kind name is thus
 * only a way to name the resource: `Copyrator` watches CopyratorRules (served as `copyrators`),
 * and `CopyratorRule` watches nothing (sourceKindName).
 */
export class KindResolver {
  readonly #kube: KubeClient;
  readonly #versions = new Map<string, Promise<{ name: string; kind: string; namespaced: boolean }[]>>();
  readonly #known: ResourceKind[];

  /** `known`: kinds resolved without discovery (the functions' own, which the plane knows). */
  constructor(kube: KubeClient, known: ResourceKind[] = []) {
    this.#kube = kube;
    this.#known = known;
  }

  async resolve(apiVersion: string, kind: string): Promise<ResourceKind | undefined> {
    const resource = guessedResource(kind);
    const known = this.#known.find((k) => apiVersionOf(k) === apiVersion && k.plural === resource);
    if (known) return known;
    const { group, version } = parseApiVersion(apiVersion);
    if (!isValidGroupVersion({ group, version })) return undefined; // it would go into a URL
    // A miss in a list read earlier reads it again, once: a CRD may have added the kind to that
    // group-version since (client-go's DeferredDiscoveryRESTMapper resets on a miss too).
    const cached = this.#versions.has(apiVersion);
    let found = await this.#find(apiVersion, group, version, resource);
    if (!found && cached) {
      this.#versions.delete(apiVersion);
      found = await this.#find(apiVersion, group, version, resource);
    }
    return found && { group, version, kind: found.kind, plural: found.name, namespaced: found.namespaced };
  }

  async #find(
    apiVersion: string,
    group: string,
    version: string,
    resource: string,
  ): Promise<{ name: string; kind: string; namespaced: boolean } | undefined> {
    let resources = this.#versions.get(apiVersion);
    if (!resources) {
      resources = this.#kube
        .request<{ resources: { name: string; kind: string; namespaced: boolean }[] }>(
          'GET',
          group ? `/apis/${group}/${version}` : `/api/${version}`,
        )
        .then((list) => list.resources ?? []);
      this.#versions.set(apiVersion, resources);
      resources.catch(() => this.#versions.delete(apiVersion));
    }
    return (await resources.catch(() => [])).find((served) => served.name === resource);
  }
}

/** The namespaces a namespaceSelector selects, sorted by name (an empty selector: every namespace). */
export type NamespaceLister = (selector: LabelSelector) => Promise<string[]>;

/** Lists namespaces through the API server (what Knative's controller reads from its namespace informer). */
export const namespacesFrom =
  (kube: KubeClient): NamespaceLister =>
  async (selector) => {
    const labelSelector = formatLabelSelector(selector);
    const list = await kube.list(Namespace, { ...(labelSelector ? { labelSelector } : {}), metadataOnly: true });
    return list.items.map((item) => item.metadata.name!).sort();
  };

/**
 * One Namespace list (metadata only, made on first use) shared by every selector asked: each is
 * matched locally (compileSelector, the API server's semantics). It does not check label keys and
 * values as the API server does, so it serves only selectors the API server accepted before.
 */
export function namespacesListedOnce(kube: KubeClient): NamespaceLister {
  let listed: Promise<KubeObject[]> | undefined;
  return async (selector) => {
    const compiled = compileSelector(selector);
    if (!compiled.ok) throw new Error(compiled.reason);
    listed ??= kube.list(Namespace, { metadataOnly: true }).then((list) => list.items);
    return (await listed)
      .filter((item) => compiled.selector.matches(item.metadata.labels))
      .map((item) => item.metadata.name!)
      .sort();
  };
}

/** Does the selector name any label (`{}` and absent select every namespace)? */
export const hasLabels = (selector: LabelSelector | undefined): boolean =>
  Boolean(selector && (Object.keys(selector.matchLabels ?? {}).length || selector.matchExpressions?.length));

/** The local source for an ApiServerSource object (with the namespaces it watches), or the conditions saying why there is none. */
export async function localSourceFor(
  object: KubeObject,
  kinds: Pick<KindResolver, 'resolve'>,
  brokers: Pick<BrokerDirectory, 'has'>,
  namespaces: NamespaceLister,
): Promise<{ specs?: SourceSpec[]; namespaces?: string[]; verdict?: Verdict }> {
  const spec = (object.spec ?? {}) as SourceObjectSpec;
  const namespace = object.metadata.namespace ?? '';
  const fail = (type: string, reason: string, message: string) => ({
    verdict: {
      conditions: [{ type, status: 'False' as const, reason, message }, notReady(reason, message)],
      fields: cleared('sinkUri', 'namespaces'),
    },
  });
  const ref = spec.sink?.ref;
  if (ref?.kind !== 'Broker' || !ref.name) return fail('SinkProvided', 'NotFound', 'locally an ApiServerSource can only send to a Broker');
  if (!brokers.has(ref.namespace ?? namespace, ref.name)) return fail('SinkProvided', 'NotFound', `Broker "${ref.name}" does not exist`);
  if (spec.mode !== undefined && spec.mode !== 'Reference' && spec.mode !== 'Resource')
    return fail('Deployed', 'InvalidMode', `mode "${String(spec.mode)}" is neither Reference nor Resource`);
  const { owner } = spec;
  if (
    owner !== undefined &&
    (owner === null ||
      typeof owner !== 'object' ||
      [owner.apiVersion, owner.kind].some((field) => field !== undefined && typeof field !== 'string'))
  ) {
    return fail('Deployed', 'InvalidOwner', 'spec.owner must be an object with a string apiVersion and kind');
  }
  if (spec.filters?.length)
    return fail(
      'Deployed',
      'FiltersUnsupported',
      "the local source does not implement spec.filters (Knative's NewAPIServerFilters feature)",
    );
  const overridesProblem = ceOverridesProblem(spec.ceOverrides);
  if (overridesProblem) return fail('Deployed', 'InvalidCEOverrides', overridesProblem);
  const resources = [];
  for (const resource of spec.resources ?? []) {
    const kind = resource.apiVersion && resource.kind ? await kinds.resolve(resource.apiVersion, resource.kind) : undefined;
    if (!kind)
      return fail(
        'Deployed',
        'UnknownKind',
        `${resource.apiVersion ?? '?'} ${resource.kind ?? '?'} is not served by the API server as "${guessedResource(resource.kind ?? '')}", the resource an ApiServerSource watches for that kind`,
      );
    resources.push({ kind, ...(resource.selector ? { labelSelector: formatLabelSelector(resource.selector) } : {}) });
  }
  if (!resources.length) return fail('Deployed', 'NoResources', 'spec.resources is empty');
  const selector = spec.namespaceSelector;
  let watched: string[];
  try {
    watched = selector ? await namespaces(selector) : [namespace];
  } catch (error) {
    return fail('Deployed', 'NamespacesNotListed', `cannot list the namespaces namespaceSelector selects: ${(error as Error).message}`);
  }
  const base = {
    name: keyString(keyOf(object)),
    mode: spec.mode ?? 'Reference',
    ...(owner ? { owner: owner as { apiVersion?: string; kind?: string } } : {}),
    ...(spec.ceOverrides?.extensions ? { extensions: overrideExtensions(spec.ceOverrides) } : {}),
  };
  if (!selector) return { specs: [{ ...base, resources, namespace }], namespaces: watched };
  if (!hasLabels(selector)) return { specs: [{ ...base, resources }], namespaces: watched };
  // Namespaced kinds once per selected namespace, cluster-scoped ones once (adapter.go collectResourceMatches).
  const clusterScoped = resources.filter((resource) => !resource.kind.namespaced);
  const namespaced = resources.filter((resource) => resource.kind.namespaced);
  return {
    specs: [
      ...(clusterScoped.length ? [{ ...base, resources: clusterScoped }] : []),
      ...(namespaced.length
        ? watched.map((name) => ({ ...base, name: `${base.name}@${name}`, resources: namespaced, namespace: name }))
        : []),
    ],
    namespaces: watched,
  };
}

/** The first wait before a source that could not run is applied again; it doubles up to RETRY_MAX_MS. */
export const RETRY_BASE_MS = 1000;
export const RETRY_MAX_MS = 60_000;
/** The Ready reasons of a source that may run later with no change of its own (see the top of this file). */
const RETRIED_REASONS = new Set(['UnknownKind', 'NamespacesNotListed', 'InsufficientPermissions', 'StartFailed']);

export interface SourceControllerOptions {
  kube: KubeClient;
  brokers: Pick<BrokerDirectory, 'has' | 'url'>;
  publish: (event: CloudEventV1<unknown>) => Promise<void>;
  log: Logger;
  status: StatusWriter;
  /** Kinds known without discovery (see KindResolver). */
  knownKinds?: ResourceKind[];
  /** A client authenticated as a ServiceAccount (undefined: the plane's own client is used). */
  clientFor?: (namespace: string, serviceAccount: string) => Promise<KubeClient>;
  /** Where a namespaceSelector's namespaces come from (default: namespacesFrom(kube)). */
  namespaces?: NamespaceLister;
  /** How a source that could not run is applied again (default: apply); the plane passes its serialized handler. */
  reapply?: (object: KubeObject) => Promise<void>;
}

export class ApiServerSourceController {
  readonly #running = new Map<string, { source: LocalSource; fingerprint: string }>();
  readonly #objects = new Map<string, KubeObject>();
  readonly #options: SourceControllerOptions;
  readonly #kinds: KindResolver;
  /** Counters of the sources stopped so far (an update restarts a source), so totals never go back. */
  readonly #retired = { emitted: 0, relists: 0, watchRestarts: 0, sinkRetries: 0 };
  /** Sources waiting to be applied again, with the attempts so far. */
  readonly #retries = new Map<string, { attempts: number; timer?: NodeJS.Timeout }>();
  #stopped = false;

  constructor(options: SourceControllerOptions) {
    this.#options = options;
    this.#kinds = new KindResolver(options.kube, options.knownKinds);
  }

  /** `namespaces`: where a namespaceSelector's namespaces come from this time (default: the options'). */
  async apply(object: KubeObject, namespaces?: NamespaceLister): Promise<void> {
    if (this.#stopped) return;
    const key = keyString(keyOf(object));
    this.#objects.set(key, object);
    const { kube, brokers, log, status } = this.#options;
    const retry = this.#retries.get(key);
    if (retry) clearTimeout(retry.timer);
    const planned = await localSourceFor(object, this.#kinds, brokers, namespaces ?? this.#options.namespaces ?? namespacesFrom(kube));
    if (!planned.specs) {
      await this.#stop(key);
      await status.write(ApiServerSource, object, planned.verdict!);
      this.#retryLater(key, planned.verdict!);
      return;
    }
    const account = (object.spec as SourceObjectSpec).serviceAccountName;
    const fingerprint = JSON.stringify([planned.specs, account]);
    if (this.#running.get(key)?.fingerprint !== fingerprint) {
      await this.#stop(key);
      const namespace = object.metadata.namespace ?? '';
      const client = account && this.#options.clientFor ? await this.#options.clientFor(namespace, account) : kube;
      // stop() may have run during the awaits above; a source started now would never be stopped.
      if (this.#stopped) return;
      const source = new LocalSource({
        kube: client,
        sources: planned.specs,
        sink: this.#options.publish,
        log: log.child({ apiserversource: key }),
        resyncIntervalMs: 0,
      });
      // Running from now on, so that stop() reaches it while it starts: start() resolves only
      // once the broker took the initial list's events, which may take as long as the broker waits.
      this.#running.set(key, { source, fingerprint });
      try {
        await source.start();
      } catch (error) {
        if (this.#running.get(key)?.source === source) this.#running.delete(key);
        if (this.#stopped) return;
        const message = (error as Error).message;
        const forbidden = /forbidden|403/i.test(message);
        const verdict: Verdict = {
          conditions: [
            {
              type: 'SufficientPermissions',
              status: forbidden ? 'False' : 'Unknown',
              reason: forbidden ? 'Forbidden' : 'Unknown',
              message,
            },
            notReady(forbidden ? 'InsufficientPermissions' : 'StartFailed', message),
          ],
          fields: { ...cleared('sinkUri'), namespaces: planned.namespaces },
        };
        await status.write(ApiServerSource, object, verdict);
        this.#retryLater(key, verdict);
        return;
      }
    }
    this.#retries.delete(key);
    await status.write(ApiServerSource, object, {
      conditions: [
        { type: 'SinkProvided', status: 'True', reason: 'SinkProvided' },
        { type: 'SufficientPermissions', status: 'True', reason: 'SufficientPermissions' },
        { type: 'Deployed', status: 'True', reason: 'Deployed' },
        ready(),
      ],
      fields: { sinkUri: brokers.url, namespaces: planned.namespaces },
    });
  }

  async remove(object: KubeObject): Promise<void> {
    const key = keyString(keyOf(object));
    this.#objects.delete(key);
    clearTimeout(this.#retries.get(key)?.timer);
    this.#retries.delete(key);
    await this.#stop(key);
  }

  /** Applies the source `key` again after a backoff when its verdict may change with no change of its own. */
  #retryLater(key: string, verdict: Verdict): void {
    const reason = verdict.conditions.find((condition) => condition.type === 'Ready')?.reason;
    if (this.#stopped || !reason || !RETRIED_REASONS.has(reason)) {
      this.#retries.delete(key);
      return;
    }
    const retry = this.#retries.get(key) ?? { attempts: 0 };
    const waitMs = Math.min(RETRY_BASE_MS * 2 ** retry.attempts, RETRY_MAX_MS);
    retry.attempts++;
    retry.timer = setTimeout(() => {
      const object = this.#objects.get(key);
      if (!object || this.#stopped) return;
      void (this.#options.reapply ?? ((again: KubeObject) => this.apply(again)))(object).catch((error: unknown) =>
        this.#options.log.warn({ apiserversource: key, reason: (error as Error).message }, 'applying the source again failed'),
      );
    }, waitMs).unref();
    this.#retries.set(key, retry);
    // Said once at warn (nothing flows through this source until then), then quietly.
    this.#options.log[retry.attempts === 1 ? 'warn' : 'debug'](
      { apiserversource: key, reason, retryInMs: waitMs },
      `source not ready (${reason}); applying it again later`,
    );
  }

  async refresh(): Promise<void> {
    for (const object of [...this.#objects.values()]) await this.apply(object);
  }

  /** A namespace was created, changed or deleted: each source with a namespaceSelector watches (and reports) the namespaces it selects now. */
  async namespacesChanged(): Promise<void> {
    // One Namespace list for the pass, not one per source: a running source's selector was
    // accepted by the API server when it started, so it is matched locally; any other is listed
    // through the API server, which checks it again.
    const listed = this.#options.namespaces ?? namespacesListedOnce(this.#options.kube);
    for (const [key, object] of [...this.#objects]) {
      if ((object.spec as SourceObjectSpec | undefined)?.namespaceSelector)
        await this.apply(object, this.#running.has(key) ? listed : undefined);
    }
  }

  /** The sources' counters, summed over running and stopped ones (the last error of any running one). */
  stats(): SourceStats {
    const total: SourceStats = { ...this.#retired, pending: 0 };
    for (const { source } of this.#running.values()) {
      const one = source.stats();
      total.emitted += one.emitted;
      total.relists += one.relists;
      total.watchRestarts += one.watchRestarts;
      total.pending += one.pending;
      total.sinkRetries += one.sinkRetries;
      if (one.lastError) total.lastError = one.lastError;
    }
    return total;
  }

  /** Stops every source, those still starting too; nothing starts after. */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const { timer } of this.#retries.values()) clearTimeout(timer);
    this.#retries.clear();
    for (const key of [...this.#running.keys()]) await this.#stop(key);
  }

  async #stop(key: string): Promise<void> {
    const running = this.#running.get(key);
    this.#running.delete(key);
    if (!running) return;
    await running.source.stop();
    const { emitted, relists, watchRestarts, sinkRetries } = running.source.stats();
    this.#retired.emitted += emitted;
    this.#retired.relists += relists;
    this.#retired.watchRestarts += watchRestarts;
    this.#retired.sinkRetries += sinkRetries;
  }
}
