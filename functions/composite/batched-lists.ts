// The candidates of parents synced at the same time, listed together. Each sync of one parent
// lists its child kind by its child selector; kube-apiserver answers such a list from its watch
// cache by testing every object of the namespace against the selector, so a burst of N parents in
// one namespace costs N lists of every child there: work that grows as N².
//
// A selector that is one label's value (generateSelector's `controller-uid=<uid>`, or matchLabels
// with one label) is listed in a lane of its kind, namespace and label. The first request of a
// lane is listed at once, alone. Requests that arrive while a list of the lane waits for its
// first page wait for it, and are then listed together, by one `label in (v1,…,vK)` list; each
// gets the objects its own selector matches, exactly what its own list would have answered. Each
// list starts after its requests were made and is read as of now, as their own lists would have
// been: none is answered from an older list.
import type { Selector } from './metacontroller/index.ts';
import type { KubeClient, KubeObject, ResourceKind } from '../runtime/index.ts';
import { sharedParts, typed, type CandidateLists } from './children.ts';

/** Values in one list at most: each adds up to 64 characters to the query, and the answer holds the children of all. */
export const MAX_BATCH = 32;

/** `key=value`, as Selector.toQuery writes a selector of one label's value (keys and values never hold `=`, `,`, ` ` or `!`). */
const ONE_VALUE = /^([^=,!() ]+)=([^=,!() ]+)$/;

interface Request {
  value: string;
  selector: Selector;
  resolve: (items: KubeObject[]) => void;
  reject: (error: unknown) => void;
}

/** The lists of one child kind, namespace and label. */
class Lane {
  readonly #kube: KubeClient;
  readonly #kind: ResourceKind;
  readonly #namespace: string | undefined;
  readonly #key: string;
  #queued: Request[] = [];
  /** A list of the lane is waiting for its first page. */
  #starting = false;

  constructor(kube: KubeClient, kind: ResourceKind, namespace: string | undefined, key: string) {
    this.#kube = kube;
    this.#kind = kind;
    this.#namespace = namespace;
    this.#key = key;
  }

  get idle(): boolean {
    return !this.#starting && this.#queued.length === 0;
  }

  list(value: string, selector: Selector): Promise<KubeObject[]> {
    return new Promise((resolve, reject) => {
      this.#queued.push({ value, selector, resolve, reject });
      this.#next();
    });
  }

  #next(): void {
    if (this.#starting || this.#queued.length === 0) return;
    const batch = this.#queued.splice(0, MAX_BATCH);
    this.#starting = true;
    void this.#read(batch);
  }

  async #read(batch: Request[]): Promise<void> {
    const values = [...new Set(batch.map((request) => request.value))].sort();
    const labelSelector = values.length === 1 ? `${this.#key}=${values[0]}` : `${this.#key} in (${values.join(',')})`;
    const found: KubeObject[][] = batch.map(() => []);
    const shared = sharedParts();
    const started = () => {
      if (!this.#starting) return;
      this.#starting = false;
      this.#next();
    };
    try {
      // Page by page, as of now (selectedLists in children.ts says why).
      for await (const page of this.#kube.pages(this.#kind, { namespace: this.#namespace, labelSelector })) {
        started();
        for (const item of page.items) {
          const labels = item.metadata.labels;
          let child: KubeObject | undefined;
          for (const [index, request] of batch.entries())
            if (request.selector.matches(labels)) found[index]!.push((child ??= typed(this.#kind, item, shared)));
        }
      }
      for (const [index, request] of batch.entries()) request.resolve(found[index]!);
    } catch (error) {
      for (const request of batch) request.reject(error);
    } finally {
      started();
    }
  }
}

const lanesOf = new WeakMap<KubeClient, Map<string, Lane>>();

/**
 * The candidate lists of one parent's sync, listed with other parents' (above) when its selector
 * is one label's value; undefined for any other selector (selectedLists lists those alone).
 */
export function batchedLists(kube: KubeClient, selector: Selector): CandidateLists | undefined {
  const match = ONE_VALUE.exec(selector.toQuery());
  if (!match) return undefined;
  const [, key, value] = match as unknown as [string, string, string];
  let lanes = lanesOf.get(kube);
  if (!lanes) lanesOf.set(kube, (lanes = new Map()));
  return (kind, namespace) => {
    const id = `${kind.group}/${kind.plural}/${namespace ?? ''}/${key}`;
    let lane = lanes.get(id);
    if (!lane) lanes.set(id, (lane = new Lane(kube, kind, namespace, key)));
    const listed = lane.list(value, selector);
    // A lane with nothing to do is forgotten: one lane per namespace ever seen would grow with the cluster.
    const forget = () => {
      if (lane.idle && lanes.get(id) === lane) lanes.delete(id);
    };
    listed.then(forget, forget);
    return listed;
  };
}
