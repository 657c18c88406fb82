// Reads of one kind at the version an event announced (getNoOlderThan), served from a watch of
// the kind while the events come in a burst. Otherwise each read is a GET: in a burst of hundreds
// of events a second, one watch down which the API server pushes each change once costs it and
// the function far less than a request per object, and answers without a round trip.
//
// The watch opens once BURST_READS reads come within a second, from the version announced to the
// read that tipped it: it lists nothing, and sees every change after that version. It closes
// IDLE_MS after the last read and forgets all it saw, so a function at rest holds no watch and no
// objects. An object is answered from it only when the watch has seen it at the announced version
// or later (deleted then: undefined), which is as fresh as a read from the API server's own watch
// cache; a forged announcement can only cost the GET, which is what every other read is.
import { isNoOlderThan, keyString, type KubeObject, type ObjectKey, type ResourceKind } from '../kinds.ts';
import type { WatchEvent } from './watch.ts';

/** What a burst watch watches through: KubeClient.watch. */
export interface Watcher {
  watch<T extends KubeObject>(
    kind: ResourceKind,
    options: { namespace?: string; resourceVersion?: string; signal?: AbortSignal },
  ): AsyncGenerator<WatchEvent<T>>;
}

/** Reads within BURST_WINDOW_MS that open the watch. */
const BURST_READS = 20;
const BURST_WINDOW_MS = 1000;
/** The watch closes this long after the last read. */
const IDLE_MS = 5000;
/** After a watch failed (refused, version too old, API unreachable), no other opens for this long: reads are GETs meanwhile. */
const REOPEN_AFTER_FAILURE_MS = 10_000;
/** What is kept of the objects seen, at most; the one seen longest ago is forgotten first. */
const MAX_OBJECTS = 10_000;
const MAX_BYTES = 16 * 1024 * 1024;

/**
 * An object as the watch last saw it: its version, and its event as the API server sent it (none
 * once deleted). The event is kept as bytes of its own: a line of the stream is a slice of the
 * string the stream was decoded into, and keeping it would keep that whole string.
 */
interface Seen {
  version: string;
  event?: Buffer;
}

const sizeOf = (id: string, seen: Seen) => id.length + seen.version.length + (seen.event?.byteLength ?? 0);

export class BurstWatch {
  readonly #watcher: Watcher;
  readonly #kind: ResourceKind;
  readonly #namespace: string | undefined;
  readonly #onRead: (answered: boolean) => void;
  /** By namespace/name, least recently seen first. */
  readonly #seen = new Map<string, Seen>();
  #bytes = 0;
  #windowStart = 0;
  #windowReads = 0;
  #lastRead = 0;
  #open?: AbortController;
  #notBefore = 0;

  /** `onRead` is told of each read while the watch is open: answered by it, or not (a GET then). */
  constructor(watcher: Watcher, kind: ResourceKind, namespace?: string, onRead: (answered: boolean) => void = () => {}) {
    this.#watcher = watcher;
    this.#kind = kind;
    this.#namespace = namespace;
    this.#onRead = onRead;
  }

  /** Whether the watch is open. */
  get watching(): boolean {
    return this.#open !== undefined;
  }

  /**
   * The object at `version` or later, as the watch saw it last (`object` undefined: deleted);
   * undefined when the watch has not seen it at that version, or is not open.
   */
  read<T extends KubeObject>(key: ObjectKey, version: string): { object: T | undefined } | undefined {
    const now = Date.now();
    this.#lastRead = now;
    if (!this.#open) {
      this.#countRead(now, version);
      return undefined;
    }
    const seen = this.#seen.get(keyString(key));
    const answered = seen !== undefined && isNoOlderThan(seen.version, version);
    this.#onRead(answered);
    if (!answered) return undefined;
    // Parsed for each read: the caller may change what it gets.
    return { object: seen.event && (JSON.parse(seen.event.toString()) as WatchEvent<T>).object };
  }

  /** Stops the watch now. */
  close(): void {
    this.#open?.abort();
  }

  #countRead(now: number, version: string): void {
    if (now < this.#notBefore) return;
    if (now - this.#windowStart > BURST_WINDOW_MS) {
      this.#windowStart = now;
      this.#windowReads = 0;
    }
    if (++this.#windowReads >= BURST_READS) void this.#watch(version);
  }

  async #watch(from: string): Promise<void> {
    const open = new AbortController();
    this.#open = open;
    const idle = setInterval(() => {
      if (Date.now() - this.#lastRead >= IDLE_MS) open.abort();
    }, IDLE_MS / 5);
    // The watch's connection keeps the process alive while it is open; the timer need not.
    idle.unref();
    try {
      for await (const event of this.#watcher.watch(this.#kind, { namespace: this.#namespace, resourceVersion: from, signal: open.signal }))
        this.#remember(event);
    } catch {
      if (!open.signal.aborted) this.#notBefore = Date.now() + REOPEN_AFTER_FAILURE_MS;
    } finally {
      clearInterval(idle);
      this.#open = undefined;
      this.#seen.clear();
      this.#bytes = 0;
      this.#windowReads = 0;
    }
  }

  #remember(event: WatchEvent): void {
    if (event.type !== 'ADDED' && event.type !== 'MODIFIED' && event.type !== 'DELETED') return;
    const { name, namespace, resourceVersion } = event.object.metadata ?? {};
    if (!name || !resourceVersion) return;
    const id = keyString({ namespace: namespace ?? '', name });
    const previous = this.#seen.get(id);
    if (previous) {
      this.#bytes -= sizeOf(id, previous);
      this.#seen.delete(id);
    }
    const seen: Seen = {
      version: resourceVersion,
      event: event.type === 'DELETED' ? undefined : Buffer.from(event.line ?? JSON.stringify(event)),
    };
    this.#seen.set(id, seen);
    this.#bytes += sizeOf(id, seen);
    while (this.#seen.size > MAX_OBJECTS || this.#bytes > MAX_BYTES) {
      const [oldestId, oldest] = this.#seen.entries().next().value!;
      this.#seen.delete(oldestId);
      this.#bytes -= sizeOf(oldestId, oldest);
    }
  }
}
