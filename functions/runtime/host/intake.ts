// Intake: what a delivered event asks of the function, by its kind. A change event (an object
// was added, updated or deleted) maps to the keys it concerns, unless it can be skipped; a
// reconcile event names its keys, each with the time it is due; a resync or poll lists the
// reconciled kind, through a gate that lets pings arriving together share one run.
import type { Logger } from 'pino';
import { quote } from '../bounded-messages.ts';
import { statusForError } from '../errors.ts';
import type { FunctionEvent } from '../events.ts';
import {
  groupKind,
  isValidNamespace,
  keyOf,
  kindKey,
  parseKindKey,
  pathSegmentProblem,
  splitKindKey,
  type KindKey,
  type KubeObject,
} from '../kinds.ts';
import type { Outcome } from './answers.ts';
import { FanOutGate } from './fan-out-gate.ts';
import type { HostSettings } from './host-options.ts';
import type { ReconcileLoop } from './reconcile-loop.ts';
import { keysForEvent, uniqueKeys } from './routing.ts';
import { isUnchangedSinceReconcile, skipReason, type SeenObjects } from './skips.ts';

/** The answer when a delivery fails before any key is reconciled: statusForError's code, but 500 for a TerminalError (no key to record it on). */
function failedBeforeReconcile(error: unknown, log: Logger, what: string): Outcome {
  const status = statusForError(error);
  log[status === 400 ? 'warn' : 'error']({ err: (error as Error).message }, what);
  return { status: status === 200 ? 500 : status, body: { error: (error as Error).message } };
}

/** Is `namespace` (of a namespaced object; '' for a cluster-scoped one) outside an install limited to `installNamespace`? */
const outsideInstall = (installNamespace: string | undefined, namespace: string): boolean =>
  installNamespace !== undefined && namespace !== '' && namespace !== installNamespace;

export class Intake {
  readonly #settings: HostSettings;
  readonly #loop: ReconcileLoop;
  readonly #seen: SeenObjects;
  /** Resyncs and polls, each through its own gate (#fanOut). */
  readonly #fanOuts: Record<'resync' | 'poll', FanOutGate<Outcome>>;

  constructor(settings: HostSettings, loop: ReconcileLoop, seen: SeenObjects) {
    this.#settings = settings;
    this.#loop = loop;
    this.#seen = seen;
    const gate = () => new FanOutGate<Outcome>(settings.fanOutSpacingMs, settings.sleep, () => settings.now().getTime());
    this.#fanOuts = { resync: gate(), poll: gate() };
  }

  /** Reconciles what the event concerns. Never throws. */
  async handle(event: FunctionEvent): Promise<Outcome> {
    const { declaration, kube, log, installNamespace } = this.#settings;
    const deadline = this.#loop.deadline();
    // Made on first use: most events are skipped below without a line logged.
    let child: Logger | undefined;
    const eventLog = () => (child ??= log.child({ ceId: event.id }));
    const reconciled = declaration.reconciles;
    let keys: KindKey[];
    let eventObject: KubeObject | undefined;
    /** When each key may start (ms since the epoch), for keys a reconcile event names ahead of their time. */
    let dueAt: number[] | undefined;
    if (event.type === 'resync' || event.type === 'poll') return this.#fanOut(event.type, eventLog());
    try {
      if (event.type === 'reconcile') {
        const parsed = await Promise.all(event.keys.map((text) => this.#parseKey(text, eventLog())));
        const bad = parsed.find((key): key is string => typeof key === 'string');
        if (bad) return { status: 400, body: { error: `reconcile event: ${bad}` } };
        // Keys not yet due come from a broker that does not hold requeues (Knative's sends a
        // reply at once). One due within this delivery's budget is waited for here, so a short
        // requeue (a 10 s CrashLoopBackOff) keeps its time on Knative too; one due later is
        // dropped, neither done nor failed: the function keeps its due time and its resync
        // catches up.
        const dueTimes = event.keys.map((text) => (event.keyNotBefore?.get(text) ?? event.notBefore)?.getTime() ?? 0);
        const waited = (parsed as KindKey[]).map((key, index) => ({ key, at: dueTimes[index]! })).filter(({ at }) => at <= deadline);
        if (waited.length === 0) {
          const earliest = new Date(Math.min(...dueTimes));
          return {
            status: 200,
            body: { ignored: `not due until ${earliest.toISOString()}; the function keeps its due time and its resync catches up` },
          };
        }
        if (waited.length < parsed.length)
          eventLog().info(
            { dropped: parsed.length - waited.length },
            "keys due after this delivery's budget dropped; the resync catches up",
          );
        // Soonest first (a key named twice counts at its earliest time): each waits for its own time.
        waited.sort((a, b) => a.at - b.at);
        keys = uniqueKeys(waited.map(({ key }) => key));
        const dueOf = new Map(waited.map(({ key, at }) => [key, at]));
        dueAt = keys.map((key) => dueOf.get(key)!);
      } else {
        if (outsideInstall(installNamespace, event.ref.namespace))
          return {
            status: 200,
            body: {
              ignored: `${event.ref.kind} ${event.ref.namespace}/${event.ref.name} is outside the install's namespace ${installNamespace}`,
            },
          };
        const skip = skipReason(declaration, event, kube.ownWrites, this.#seen);
        if (skip) return { status: 200, body: { ignored: skip } };
        keys = uniqueKeys(await keysForEvent(declaration, event, kube, eventLog(), installNamespace));
        if (keys.length === 0) {
          const what = `${event.ref.kind} ${event.ref.namespace}/${event.ref.name}`;
          // A kind known only at run time: the function's routing leaves out the echo of its own write (RuntimeKinds).
          const object = event.action === 'delete' ? undefined : event.object;
          const echo = declaration.runtimeKinds && object && kube.ownWrites.isOwnOf(event.ref, object);
          return {
            status: 200,
            body: {
              ignored: echo
                ? `${what} is at the version this function wrote (resourceVersion ${object.metadata.resourceVersion}), which the reconcile that wrote it saw`
                : `${what} concerns ${declaration.runtimeKinds ? `nothing ${declaration.name} reconciles` : `no ${reconciled.kind}`}`,
            },
          };
        }
        // The body is an event object for the one object it maps to (its own key, or its owner's); a
        // delete's body is the object's last state, not its present one.
        if (event.object && event.action !== 'delete' && keys.length === 1)
          eventObject = { apiVersion: event.ref.apiVersion, kind: event.ref.kind, ...event.object };
      }
    } catch (error) {
      return failedBeforeReconcile(error, eventLog(), 'could not work out what the event concerns');
    }
    if (installNamespace !== undefined) {
      const inside = keys.map((key) => !outsideInstall(installNamespace, key.namespace));
      if (!inside.every(Boolean)) {
        eventLog().warn({ dropped: inside.filter((x) => !x).length, installNamespace }, "keys outside the install's namespace dropped");
        keys = keys.filter((_key, index) => inside[index]);
        dueAt = dueAt?.filter((_at, index) => inside[index]);
        if (keys.length === 0)
          return { status: 200, body: { ignored: `every key is outside the install's namespace ${installNamespace}` } };
      }
    }
    return this.#loop.reconcileAll(keys, eventLog(), deadline, eventObject, dueAt);
  }

  /**
   * A resync or poll through its gate (fan-out-gate.ts): pings arriving together share one run,
   * and runs are spaced. The run's answer goes to every ping it served; its reply CloudEvent
   * (failed, requeued or deferred keys) to the first only, so the keys are sent back once.
   */
  async #fanOut(type: 'resync' | 'poll', log: Logger): Promise<Outcome> {
    const run = await this.#fanOuts[type].run(() => this.#listAndReconcile(type, log, this.#loop.deadline()));
    if (run.claim()) return run.value;
    const { reply: _reply, ...rest } = run.value;
    return rest.status < 300
      ? { ...rest, body: { ...rest.body, coalesced: `${type} run shared with another delivery, which carries its reply` } }
      : rest;
  }

  /** Lists the reconciled kind and reconciles every object (a resync, after the declaration's sweep) or those not settled (a poll). */
  async #listAndReconcile(type: 'resync' | 'poll', log: Logger, deadline: number): Promise<Outcome> {
    const { declaration, kube, installNamespace } = this.#settings;
    const reconciled = declaration.reconciles;
    const keys: KindKey[] = [];
    /** Each key's object as the listing read it (ReconcileContext.listed). */
    const objects: KubeObject[] = [];
    try {
      if (type === 'resync' && declaration.sweep) await this.#loop.sweep(log, deadline);
      let listed = 0;
      for await (const page of kube.pages(reconciled, { namespace: reconciled.namespaced ? installNamespace : undefined })) {
        listed += page.items.length;
        for (const item of page.items) {
          const key = kindKey(reconciled, keyOf(item));
          if (type === 'resync' || !isUnchangedSinceReconcile(declaration, key, item, this.#seen)) {
            keys.push(key);
            objects.push(item);
          }
        }
      }
      if (keys.length === 0 && type === 'poll')
        return { status: 200, body: { ignored: `poll: all ${listed} ${reconciled.kind} objects settled` } };
    } catch (error) {
      return failedBeforeReconcile(error, log, `could not list for the ${type}`);
    }
    return this.#loop.reconcileAll(keys, log, deadline, undefined, undefined, objects);
  }

  /** The key a reconcile event names: of the reconciled kind, or of a kind the function resolves at run time; else why not. */
  async #parseKey(text: string, log: Logger): Promise<KindKey | string> {
    const { declaration, kube } = this.#settings;
    const parsed = parseKindKey(text, [declaration.reconciles]);
    const parts = splitKindKey(text);
    if (
      typeof parsed !== 'string' ||
      !declaration.runtimeKinds ||
      typeof parts === 'string' ||
      parts.groupKind === groupKind(declaration.reconciles)
    )
      return parsed;
    // Another kind: refuse what no kind could make a valid key (a name that is not one path
    // segment, a namespace that is not a DNS-1123 label) before asking the function (an API
    // read); the kind's own rule decides afterwards.
    const nameProblem = pathSegmentProblem(parts.key.name);
    if (nameProblem) return `invalid object name ${quote(parts.key.name)}: ${nameProblem}`;
    if (parts.key.namespace !== '' && !isValidNamespace(parts.key.namespace))
      return `invalid namespace ${quote(parts.key.namespace)} (a DNS-1123 label)`;
    const kind = await declaration.runtimeKinds.kindOf(parts.groupKind, { kube, log });
    return kind ? parseKindKey(text, [kind]) : parsed;
  }
}
