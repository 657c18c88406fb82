// How the kit talks to the endpoint under test: CloudEvents built as ApiServerSource and
// PingSource send them (binary mode, as Knative's broker delivers), raw requests for the
// malformed corpus, and a record of every answer, so the kit can judge the answers as a whole
// (how long the slowest took, whether every reply was a CloudEvent).
import { CloudEvent, HTTP, type CloudEventV1 } from 'cloudevents';
import { apiServerSourceAttributes, type ChangeAction, type SourceMode } from '../eventing/apiserver-events.ts';
import { resyncEvent } from '../eventing/plane.ts';
import {
  decodeCloudEvent,
  FUNCTION_EXTENSION,
  type FunctionDeclaration,
  type KubeObject,
  type ResourceKind,
} from '../functions/runtime/index.ts';

export interface Answer {
  status: number;
  /** The answer's body as text ('' for none). */
  body: string;
  headers: Record<string, string>;
  ms: number;
}

/** One request the kit sent and what came back (or why nothing did). */
export interface Sent {
  what: string;
  /** A CloudEvent POSTed (not a health probe): its 2xx body is a reply. */
  event: boolean;
  answer?: Answer;
  /** The request failed without an answer: a timeout, a connection closed. */
  error?: string;
}

export interface EndpointOptions {
  /** The endpoint's base URL: events are POSTed to it, health paths are relative to it. */
  url: string;
  /** The function whose events these are: its resync ping, and the `opfnfunction` extension its Trigger filters on. */
  declaration: FunctionDeclaration;
  /** The API server the endpoint reads from: the events' `source`, as ApiServerSource sets it. */
  apiServer: string;
  /** How long an answer may take: a delivery's timeout. */
  timeoutMs: number;
}

export class Endpoint {
  readonly options: EndpointOptions;
  /** Every request sent, in order. */
  readonly sent: Sent[] = [];
  /** Extensions of the change events besides the function's (the composite function's sources name their CompositeController). */
  extensions: Record<string, string> = {};

  constructor(options: EndpointOptions) {
    this.options = options;
  }

  /** Sends a request and records its answer; never throws (a failed request is recorded with its error). */
  async send(what: string, init: { method?: string; path?: string; headers?: Record<string, string>; body?: string }): Promise<Sent> {
    const started = performance.now();
    const entry: Sent = { what, event: (init.method ?? 'POST') === 'POST' };
    this.sent.push(entry);
    try {
      const response = await fetch(new URL(init.path ?? '', this.options.url), {
        method: init.method ?? 'POST',
        headers: init.headers,
        body: init.body,
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
      const body = await response.text();
      entry.answer = { status: response.status, body, headers: Object.fromEntries(response.headers), ms: performance.now() - started };
    } catch (error) {
      const cause = (error as { cause?: Error }).cause;
      entry.error =
        (error as Error).name === 'TimeoutError'
          ? `no answer within ${this.options.timeoutMs / 1000} s`
          : `${(error as Error).message}${cause ? ` (${cause.message})` : ''}`;
    }
    return entry;
  }

  /** An ApiServerSource change event for `object` (in Resource mode the object is the data), with a given id to repeat a delivery. */
  change(kind: ResourceKind, action: ChangeAction, object: KubeObject, id?: string, mode: SourceMode = 'Resource'): Promise<Sent> {
    return this.send(
      `${action} ${kind.kind} ${object.metadata.namespace ?? ''}/${object.metadata.name}`,
      binary(this.changeEvent(kind, action, object, id, mode)),
    );
  }

  /** The event ApiServerSource sends for a Resource-mode change of `object`, with its function's extension. */
  changeEvent(
    kind: ResourceKind,
    action: ChangeAction,
    object: KubeObject,
    id?: string,
    mode: SourceMode = 'Resource',
  ): CloudEventV1<unknown> {
    const event = apiServerSourceAttributes({
      server: this.options.apiServer,
      kind,
      object,
      action,
      mode,
      extensions: { ...this.extensions, [FUNCTION_EXTENSION]: this.options.declaration.name },
    });
    return id ? { ...event, id } : event;
  }

  /** The function's resync ping, as its generated PingSource sends it. */
  ping(): Promise<Sent> {
    return this.send('resync ping', binary(resyncEvent(this.options.declaration)));
  }
}

/** A CloudEvent as Knative's broker delivers it: binary mode. */
export function binary(event: CloudEventV1<unknown>): { headers: Record<string, string>; body: string } {
  const message = HTTP.binary(new CloudEvent(event, false));
  return { headers: message.headers as Record<string, string>, body: message.body as string };
}

/** Why a request did not get a 2xx answer, or undefined when it did. */
export function notSuccess(sent: Sent): string | undefined {
  if (!sent.answer) return `${sent.what}: ${sent.error}`;
  const { status, body } = sent.answer;
  return status >= 200 && status < 300 ? undefined : `${sent.what}: answered ${status}${body ? ` ${short(body)}` : ''}`;
}

/**
 * Why a 2xx answer's body is not a reply the broker can route back to the function, or undefined
 * when it is (or there is no body). Knative's broker takes a 2xx body as a reply CloudEvent: one
 * that is not a CloudEvent fails the delivery.
 */
export function replyProblem(answer: Answer, functionName: string): string | undefined {
  if (answer.status < 200 || answer.status >= 300 || answer.body === '') return undefined;
  let reply: Record<string, unknown>;
  try {
    reply = decodeCloudEvent(answer.headers, answer.body) as unknown as Record<string, unknown>;
  } catch (error) {
    return `a 2xx answer with a body that is not a CloudEvent (${(error as Error).message}); answer success with an empty body, or a reply event`;
  }
  if (reply[FUNCTION_EXTENSION] !== functionName)
    return `reply ${String(reply.type)} carries ${FUNCTION_EXTENSION}=${JSON.stringify(reply[FUNCTION_EXTENSION] ?? null)}, not "${functionName}": its Trigger would not route it back`;
  return undefined;
}

/** A body or reason, cut to one short line. */
export const short = (text: string, max = 160): string => {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max)}…` : line;
};
