// Decoding a watch: the JSON lines of its stream, one WatchEvent each; an ERROR event ends it.
import type { KubeObject } from '../kinds.ts';
import { boundedMessage } from '../bounded-messages.ts';
import { ApiError, type KubeStatus } from './errors.ts';

export interface WatchEvent<T = KubeObject> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T;
  /** The event as the API server sent it, one line of JSON (set by watchEvents). */
  line?: string;
}

/**
 * The non-empty lines of a byte stream, decoded as UTF-8 with a streaming decoder: a character
 * whose bytes are split across two chunks is decoded once both have arrived (chunk.toString()
 * would turn each half into U+FFFD).
 */
export async function* jsonLines(chunks: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder('utf-8');
  let buffered = '';
  for await (const chunk of chunks) {
    buffered += decoder.decode(chunk, { stream: true });
    let newline: number;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline).trim();
      buffered = buffered.slice(newline + 1);
      if (line) yield line;
    }
  }
  const rest = (buffered + decoder.decode()).trim();
  if (rest) yield rest;
}

/** The events of a watch's response body; throws ApiError on an ERROR event (410 when the resourceVersion is too old). */
export async function* watchEvents<T = KubeObject>(body: AsyncIterable<Uint8Array>, plural: string): AsyncGenerator<WatchEvent<T>> {
  for await (const line of jsonLines(body)) {
    const event = JSON.parse(line) as WatchEvent<T>;
    event.line = line;
    if (event.type === 'ERROR') {
      const status = event.object as unknown as KubeStatus;
      throw new ApiError(
        status.code ?? 500,
        status.reason ?? 'WatchError',
        `watch ${plural}: ${boundedMessage(status.message ?? 'error')}`,
        status,
      );
    }
    yield event;
  }
}
