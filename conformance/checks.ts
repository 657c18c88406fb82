// The contract kit: docs/function-contract.md run against one HTTP endpoint, with a real API
// server behind it. Each check is a row (passed, failed with the reason, or not checked with
// why). The kit plays ApiServerSource and PingSource itself, so it decides exactly which event
// arrives when (twice, out of order, forged), and it judges by what the API server holds
// afterwards, never by what the endpoint says it did.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  apiVersionOf,
  isControlledBy,
  Namespace,
  type FunctionDeclaration,
  type KubeClient,
  type KubeObject,
  type ResourceKind,
} from '../functions/runtime/index.ts';
import type { Prerequisites } from './composite-hook.ts';
import { contractFor, type ChildContract, type FunctionContract } from './contracts.ts';
import { binary, Endpoint, notSuccess, replyProblem, short, type Sent } from './deliveries.ts';
import { malformedEvents } from './malformed-events.ts';

export interface CheckRow {
  check: string;
  result: 'pass' | 'fail' | 'not checked';
  /** Why it failed, or why it was not checked; for a pass, what was seen. */
  reason?: string;
}

export interface ConformanceOptions {
  /** The endpoint under test: CloudEvents are POSTed to it, /health/* are under it. */
  url: string;
  /** The declaration of the function whose contract the endpoint claims to implement. */
  declaration: FunctionDeclaration;
  /** For a function that is not built in: the objects beside it, among them its example object. */
  examples?: KubeObject[];
  /** An admin client of the API server the endpoint uses. */
  kube: KubeClient;
  /** How long one answer may take (the delivery timeout); default 30 s. */
  answerTimeoutMs?: number;
  /** How long objects may take to converge after the event that should converge them; default 20 s. */
  convergeTimeoutMs?: number;
}

/** Bodies past what any function must take: the plane's broker refuses above 4 MiB, a function may refuse above 3 MiB. */
export const LARGE_BODY_BYTES = 5 * 1024 * 1024;
const MALFORMED_AT_ONCE = 8;
/** How long the kit waits at the end for its objects to be deleted. */
const OBJECTS_GONE_MS = 60_000;

const pass = (check: string, reason?: string): CheckRow => ({ check, result: 'pass', ...(reason ? { reason } : {}) });
const fail = (check: string, reason: string): CheckRow => ({ check, result: 'fail', reason });
const notChecked = (check: string, reason: string): CheckRow => ({ check, result: 'not checked', reason });

/** Runs every check of the contract against the endpoint; the rows in the order of the contract. */
export async function runConformance(options: ConformanceOptions): Promise<CheckRow[]> {
  const { declaration, kube } = options;
  const contract = contractFor(declaration, options.examples);
  const endpoint = new Endpoint({
    url: options.url,
    declaration,
    apiServer: kube.server,
    timeoutMs: options.answerTimeoutMs ?? 30_000,
  });
  const run = new Run(endpoint, declaration, contract, kube, options.convergeTimeoutMs ?? 20_000);
  const rows: CheckRow[] = [...(await run.health()), ...(await run.malformed()), await run.largeBody(), await run.resyncPing()];
  rows.push(...(await run.objects()));
  rows.push(run.timeouts(), run.replies());
  return rows;
}

class Run {
  readonly #endpoint: Endpoint;
  readonly #declaration: FunctionDeclaration;
  readonly #contract: FunctionContract;
  readonly #kube: KubeClient;
  readonly #convergeTimeoutMs: number;
  /** The kind of the objects checked: the reconciled kind, or the contract's (the composite function's parents). */
  readonly #kind: ResourceKind;
  /** The kinds of their children. */
  readonly #owned: ResourceKind[];
  readonly #suffix = randomBytes(3).toString('hex');
  /** The namespace of this run's objects: the run's own, so nothing else of the cluster is touched. */
  readonly #namespace: string;

  constructor(
    endpoint: Endpoint,
    declaration: FunctionDeclaration,
    contract: FunctionContract,
    kube: KubeClient,
    convergeTimeoutMs: number,
  ) {
    this.#endpoint = endpoint;
    this.#declaration = declaration;
    this.#contract = contract;
    this.#kube = kube;
    this.#convergeTimeoutMs = convergeTimeoutMs;
    this.#kind = contract.objectKind ?? declaration.reconciles;
    this.#owned = contract.objectKind ? (contract.child ? [contract.child.kind] : []) : declaration.owns.map(({ kind }) => kind);
    this.#namespace = `opfn-conformance-${this.#suffix}`;
  }

  async health(): Promise<CheckRow[]> {
    return Promise.all(
      ['liveness', 'readiness'].map(async (probe) => {
        const check = `health: GET /health/${probe} answers 200`;
        const sent = await this.#endpoint.send(`GET /health/${probe}`, { method: 'GET', path: `health/${probe}` });
        if (!sent.answer) return fail(check, sent.error!);
        return sent.answer.status === 200 ? pass(check) : fail(check, `answered ${sent.answer.status} ${short(sent.answer.body)}`);
      }),
    );
  }

  /** The corpus: each request refused with 400 (415 for a content type it cannot read) and a reason in the body. */
  async malformed(): Promise<CheckRow[]> {
    const corpus = malformedEvents(this.#declaration);
    const rows: CheckRow[] = new Array(corpus.length);
    let next = 0;
    const worker = async () => {
      while (next < corpus.length) {
        const index = next++;
        const { name, headers, body } = corpus[index];
        const check = `malformed: ${name} → 400 with a reason`;
        const sent = await this.#endpoint.send(`malformed: ${name}`, { headers: { ...headers }, body });
        if (!sent.answer) rows[index] = fail(check, sent.error!);
        else if (sent.answer.status !== 400 && sent.answer.status !== 415)
          rows[index] = fail(
            check,
            `answered ${sent.answer.status}${sent.answer.status < 300 ? ' (accepted an event that cannot mean anything)' : ''}${sent.answer.body ? `: ${short(sent.answer.body, 80)}` : ''}`,
          );
        else if (sent.answer.body.trim() === '') rows[index] = fail(check, `answered ${sent.answer.status} with no reason in the body`);
        else rows[index] = pass(check, short(sent.answer.body, 100));
      }
    };
    await Promise.all(Array.from({ length: MALFORMED_AT_ONCE }, worker));
    return rows;
  }

  async largeBody(): Promise<CheckRow> {
    const check = `large body: ${LARGE_BODY_BYTES / 1024 / 1024} MiB → 413`;
    const kind = this.#declaration.reconciles;
    const object = { apiVersion: apiVersionOf(kind), kind: kind.kind, metadata: { name: 'large', namespace: 'default' } };
    const sent = await this.#endpoint.send(
      'large body',
      binary(this.#endpoint.changeEvent(kind, 'update', { ...object, padding: 'x'.repeat(LARGE_BODY_BYTES) } as KubeObject)),
    );
    if (!sent.answer) return fail(check, `${sent.error}: read the body (or refuse it) and answer 413`);
    return sent.answer.status === 413 ? pass(check) : fail(check, `answered ${sent.answer.status} ${short(sent.answer.body, 80)}`);
  }

  async resyncPing(): Promise<CheckRow> {
    const check = 'resync ping (dev.knative.sources.ping) → 2xx';
    const problem = notSuccess(await this.#endpoint.ping());
    return problem ? fail(check, problem) : pass(check);
  }

  /** The checks on real objects, in the run's own namespace, removed afterwards. */
  async objects(): Promise<CheckRow[]> {
    const rows: CheckRow[] = [];
    await this.#kube.create(Namespace, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: this.#namespace } });
    let object: KubeObject | undefined;
    let prerequisites: Prerequisites | undefined;
    try {
      let announced: string | undefined;
      if (this.#contract.prerequisites) {
        prerequisites = await this.#contract.prerequisites(this.#kube, this.#declaration, this.#suffix);
        this.#endpoint.extensions = prerequisites.extensions;
        // Announced as its source would: the function learns of it from its event, not by waiting.
        announced = notSuccess(await this.#endpoint.change(this.#declaration.reconciles, 'add', prerequisites.announce));
      }
      rows.push(await this.#forgedAbsent());
      object = await this.#kube.create(this.#kind, this.#named(this.#contract.example));
      let converged = announced ? fail('converges: a new object (its add event)', announced) : await this.#converges(object);
      const unseen = converged.result === 'fail' ? prerequisites?.diagnose() : undefined;
      if (unseen) converged = fail(converged.check, `${converged.reason}; ${unseen}`);
      rows.push(converged);
      if (converged.result === 'fail') {
        for (const check of ['duplicate delivery', 'a deleted child', 'forged body', 'reordered deliveries', 'Reference mode'])
          rows.push(notChecked(check, 'the object never converged'));
      } else {
        rows.push(await this.#duplicates());
        const { child, specEdit } = this.#contract;
        rows.push(
          child ? await this.#childLost(child) : notChecked('a deleted child', `${this.#declaration.name} keeps no child per object`),
        );
        rows.push(child && specEdit ? await this.#forged(child, specEdit.forged) : notChecked('forged body', 'no spec edit a child shows'));
        rows.push(specEdit ? await this.#reordered(specEdit.edit) : notChecked('reordered deliveries', 'no spec edit to reorder'));
        rows.push(specEdit ? await this.#referenceMode() : notChecked('Reference mode', 'no spec edit a child shows'));
      }
      rows.push(await this.#deleted());
    } finally {
      await this.#cleanUp(object);
      await prerequisites?.tearDown();
    }
    return rows;
  }

  /** Every answer within the delivery timeout. */
  timeouts(): CheckRow {
    const check = `every answer within ${this.#endpoint.options.timeoutMs / 1000} s (the delivery timeout)`;
    const late = this.#endpoint.sent.filter((sent) => sent.error?.startsWith('no answer within'));
    if (late.length)
      return fail(
        check,
        `${late.length} request(s) unanswered: ${late
          .map((sent) => sent.what)
          .slice(0, 3)
          .join('; ')}`,
      );
    const slowest = Math.max(0, ...this.#endpoint.sent.map((sent) => sent.answer?.ms ?? 0));
    return pass(check, `slowest ${Math.round(slowest)} ms over ${this.#endpoint.sent.length} requests`);
  }

  /** A 2xx body is a reply CloudEvent the broker routes back to this function. */
  replies(): CheckRow {
    const check = 'a 2xx body is a reply CloudEvent for this function';
    const answered = this.#endpoint.sent.filter(
      (sent): sent is Sent & { answer: NonNullable<Sent['answer']> } => sent.event && !!sent.answer,
    );
    const problems = answered.flatMap((sent) => {
      const problem = replyProblem(sent.answer, this.#declaration.name);
      return problem ? [`${sent.what}: ${problem}`] : [];
    });
    if (problems.length) return fail(check, `${problems.length} answer(s): ${short(problems[0], 240)}`);
    const replies = answered.filter((sent) => sent.answer.status < 300 && sent.answer.body !== '').length;
    return pass(check, `${replies} repl${replies === 1 ? 'y' : 'ies'} seen`);
  }

  #named(object: KubeObject, name = `conformance-${this.#suffix}`): KubeObject {
    return {
      ...object,
      metadata: {
        ...object.metadata,
        name: this.#kind.namespaced ? object.metadata.name : name,
        ...(this.#kind.namespaced ? { namespace: this.#namespace } : {}),
      },
    };
  }

  #key(object: KubeObject) {
    return { namespace: object.metadata.namespace ?? '', name: object.metadata.name! };
  }

  async #current(object: KubeObject): Promise<KubeObject | undefined> {
    return this.#kube.get(this.#kind, this.#key(object));
  }

  /** Why the object (as the API server holds it now) has not converged (what its child shows first), or undefined once it has. */
  async #unconverged(object: KubeObject): Promise<string | undefined> {
    const current = await this.#current(object);
    if (!current) return `${this.#kind.kind} ${object.metadata.name} is gone`;
    const problems: string[] = [];
    const { child } = this.#contract;
    if (child) {
      const found = await this.#kube.get(child.kind, { namespace: current.metadata.namespace ?? '', name: child.nameFor(current) });
      const problem = found ? child.mismatch(current, found) : `no ${child.kind.kind} ${child.nameFor(current)}`;
      if (problem) problems.push(problem);
    }
    const observed = (current as { status?: { observedGeneration?: number } }).status?.observedGeneration;
    if (observed !== current.metadata.generation)
      problems.push(`status.observedGeneration is ${observed ?? 'not set'}, metadata.generation ${current.metadata.generation}`);
    return problems.length ? problems.join('; ') : undefined;
  }

  /** Waits for convergence; the row names what was still missing at the deadline. */
  async #untilConverged(check: string, object: KubeObject, extra?: () => Promise<string | undefined>): Promise<CheckRow> {
    const deadline = Date.now() + this.#convergeTimeoutMs;
    let problem: string | undefined;
    for (;;) {
      problem = (await this.#unconverged(object)) ?? (await extra?.());
      if (!problem) return pass(check);
      if (Date.now() > deadline) return fail(check, `not converged after ${this.#convergeTimeoutMs / 1000} s: ${problem}`);
      await sleep(100);
    }
  }

  async #converges(object: KubeObject): Promise<CheckRow> {
    const check = 'converges: a new object (its add event)';
    const problem = notSuccess(await this.#endpoint.change(this.#kind, 'add', object));
    if (problem) return fail(check, problem);
    return this.#untilConverged(check, object);
  }

  /** What a write would change: the object's and its children's resourceVersions. */
  async #snapshot(object: KubeObject): Promise<string> {
    const current = await this.#current(object);
    const children = await Promise.all(
      this.#owned
        .filter((kind) => kind.namespaced && this.#kind.namespaced)
        .map(async (kind) =>
          (await this.#kube.list(kind, { namespace: this.#namespace })).items
            .filter((item) => current && isControlledBy(item, current))
            .map((item) => `${kind.kind} ${item.metadata.name}@${item.metadata.resourceVersion}`),
        ),
    );
    return [`${this.#kind.kind} ${object.metadata.name}@${current?.metadata.resourceVersion}`, ...children.flat()].join(', ');
  }

  async #duplicates(): Promise<CheckRow> {
    const check = 'duplicate delivery (same id, twice at once) → 2xx, no extra write';
    const object = (await this.#current(this.#named(this.#contract.example)))!;
    const before = await this.#snapshot(object);
    const id = `duplicate-${this.#suffix}`;
    const answers = await Promise.all([1, 2].map(() => this.#endpoint.change(this.#kind, 'update', object, id)));
    const problem = answers.map(notSuccess).find(Boolean);
    if (problem) return fail(check, problem);
    // Writes belong before the answer; a moment for any that come after it anyway.
    await sleep(500);
    const after = await this.#snapshot(object);
    return before === after ? pass(check) : fail(check, `the converged state was written again: before ${before}; after ${after}`);
  }

  async #childLost(child: ChildContract): Promise<CheckRow> {
    const check = `a deleted child (${child.kind.kind}) comes back (its delete event)`;
    const owner = (await this.#current(this.#named(this.#contract.example)))!;
    const gone = await this.#removeChild(child, owner);
    if (!gone) return fail(check, `no ${child.kind.kind} ${child.nameFor(owner)} to delete`);
    const problem = notSuccess(await this.#endpoint.change(child.kind, 'delete', gone));
    if (problem) return fail(check, problem);
    return this.#untilConverged(check, owner, async () => {
      const again = await this.#kube.get(child.kind, this.#key(gone));
      return again?.metadata.uid === gone.metadata.uid ? `the deleted ${child.kind.kind} is still there` : undefined;
    });
  }

  /** The example's own spec back, by a real edit announced in Reference mode (no body to go by): converges to it. */
  async #referenceMode(): Promise<CheckRow> {
    const check = "Reference mode: an edit's event naming the object only → converges";
    const current = (await this.#current(this.#named(this.#contract.example)))!;
    const reverted = await this.#kube.replace(this.#kind, {
      ...current,
      spec: (this.#contract.example as { spec?: unknown }).spec,
    } as KubeObject);
    const problem = notSuccess(await this.#endpoint.change(this.#kind, 'update', reverted, undefined, 'Reference'));
    if (problem) return fail(check, problem);
    return this.#untilConverged(check, reverted);
  }

  /**
   * A Resource-mode event whose body claims a spec the API server does not hold (with a newer
   * generation, so it is not skipped as a status-only change), with the child deleted so there
   * is work to do: the child that comes back must be the API server's, never the body's.
   */
  async #forged(child: ChildContract, forge: (object: KubeObject) => KubeObject): Promise<CheckRow> {
    const check = "forged body: acts on the API server's object, never on the event's";
    const owner = (await this.#current(this.#named(this.#contract.example)))!;
    await this.#removeChild(child, owner);
    const forged = forge(owner);
    forged.metadata = { ...forged.metadata, generation: (owner.metadata.generation ?? 1) + 1 };
    const problem = notSuccess(await this.#endpoint.change(this.#kind, 'update', forged));
    if (problem) return fail(check, problem);
    const fromBody = async (): Promise<string | undefined> => {
      const found = await this.#kube.get(child.kind, { namespace: owner.metadata.namespace ?? '', name: child.nameFor(owner) });
      if (!found || child.mismatch(forged, found)) return undefined;
      return `${child.kind.kind} ${found.metadata.name} was written from the forged event body (${short(JSON.stringify((forged as { spec?: unknown }).spec), 80)}), not from the API server's object`;
    };
    const trusted = await fromBody();
    if (trusted) return fail(check, trusted);
    // Doing nothing for a body it cannot trust is allowed; the resync repairs the child.
    const pinged = notSuccess(await this.#endpoint.ping());
    if (pinged) return fail(check, pinged);
    const row = await this.#untilConverged(check, owner);
    if (row.result === 'fail') return row;
    const late = await fromBody();
    return late ? fail(check, late) : row;
  }

  /** A real edit, whose event arrives before the older event of the state before it: ends at the edit. */
  async #reordered(edit: (object: KubeObject) => KubeObject): Promise<CheckRow> {
    const check = 'reordered deliveries (the newer event, then an older one) → ends at the newer state';
    const older = (await this.#current(this.#named(this.#contract.example)))!;
    const newer = await this.#kube.replace(this.#kind, edit(older));
    for (const object of [newer, older]) {
      const problem = notSuccess(await this.#endpoint.change(this.#kind, 'update', object));
      if (problem) return fail(check, problem);
    }
    return this.#untilConverged(check, newer);
  }

  /** Deletes the object's child and waits until the API server no longer holds it; its last state, or undefined when there was none. */
  async #removeChild(child: ChildContract, owner: KubeObject): Promise<KubeObject | undefined> {
    const key = { namespace: owner.metadata.namespace ?? '', name: child.nameFor(owner) };
    const last = await this.#kube.get(child.kind, key);
    if (!last) return undefined;
    await this.#kube.delete(child.kind, key, { uid: last.metadata.uid });
    const deadline = Date.now() + this.#convergeTimeoutMs;
    while ((await this.#kube.get(child.kind, key))?.metadata.uid === last.metadata.uid && Date.now() < deadline) await sleep(50);
    return last;
  }

  /** An add event for an object the API server does not hold: nothing may be written for it. */
  async #forgedAbsent(): Promise<CheckRow> {
    const check = 'forged body of an object the API server does not hold → no write';
    const ghost = this.#named(this.#contract.example, `conformance-ghost-${this.#suffix}`);
    if (this.#kind.namespaced) ghost.metadata.name = `ghost-${this.#suffix}`;
    const forged = { ...ghost, metadata: { ...ghost.metadata, uid: `ghost-${this.#suffix}`, generation: 1 } };
    let problem: string | undefined;
    // Watched, not looked at afterwards: the garbage collector removes a child whose owner does not exist at once.
    const written = await this.#writesDuring(
      async () => {
        problem = notSuccess(await this.#endpoint.change(this.#kind, 'add', forged));
        await sleep(300);
      },
      (object) =>
        object.metadata.name === ghost.metadata.name ||
        !!object.metadata.ownerReferences?.some((reference) => reference.name === ghost.metadata.name),
    );
    if (problem) return fail(check, problem);
    return written.length ? fail(check, `written for it: ${written.join('; ')}`) : pass(check);
  }

  /** The writes of the reconciled and the owned kinds in the run's namespace during `action` that `concerns` picks, as "<kind> <name>". */
  async #writesDuring(action: () => Promise<void>, concerns: (object: KubeObject) => boolean): Promise<string[]> {
    const kinds = [this.#kind, ...this.#owned].filter((kind) => kind.namespaced || !this.#kind.namespaced);
    const abort = new AbortController();
    const written = new Map<string, string[]>();
    const watches = await Promise.all(
      kinds.map(async (kind) => {
        const namespace = kind.namespaced ? this.#namespace : undefined;
        const first = await this.#kube.pages(kind, { namespace, limit: 1 }).next();
        const resourceVersion = first.value?.metadata.resourceVersion;
        // Wrapped: an async function returning the loop's promise would wait for the loop to end.
        return {
          ended: (async () => {
            try {
              for await (const event of this.#kube.watch(kind, { namespace, resourceVersion, signal: abort.signal })) {
                if (event.type !== 'BOOKMARK' && event.type !== 'ERROR' && concerns(event.object))
                  written.set(`${kind.kind} ${event.object.metadata.name}`, [
                    ...(written.get(`${kind.kind} ${event.object.metadata.name}`) ?? []),
                    event.type.toLowerCase(),
                  ]);
              }
            } catch {
              // Aborted: the action is over.
            }
          })(),
        };
      }),
    );
    try {
      await action();
    } finally {
      abort.abort();
      await Promise.all(watches.map(({ ended }) => ended));
    }
    return [...written].map(([object, types]) => `${object} (${types.join(', ')})`);
  }

  async #deleted(): Promise<CheckRow> {
    const check = 'delete event of the object → 2xx';
    const object = await this.#current(this.#named(this.#contract.example));
    if (!object) return fail(check, `${this.#kind.kind} ${this.#named(this.#contract.example).metadata.name} was gone before its delete`);
    await this.#kube.delete(this.#kind, this.#key(object));
    const problem = notSuccess(await this.#endpoint.change(this.#kind, 'delete', object));
    return problem ? fail(check, problem) : pass(check);
  }

  async #cleanUp(object: KubeObject | undefined): Promise<void> {
    if (object && !this.#kind.namespaced) await this.#kube.delete(this.#kind, this.#key(object)).catch(() => undefined);
    await this.#kube.delete(Namespace, { namespace: '', name: this.#namespace }).catch(() => undefined);
    // Until no object of the kind is left (the namespace goes later): a resync of the next run
    // against this cluster must not meet this run's objects half deleted.
    const deadline = Date.now() + OBJECTS_GONE_MS;
    const left = async () =>
      (
        await this.#kube.list(this.#kind, this.#kind.namespaced ? { namespace: this.#namespace } : {}).catch(() => ({ items: [] }))
      ).items.some((item) => this.#kind.namespaced || item.metadata.name?.endsWith(this.#suffix));
    while (Date.now() < deadline && (await left())) await sleep(200);
  }
}
