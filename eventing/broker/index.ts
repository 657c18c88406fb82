// The local broker: a stand-in for a Knative Broker (MT channel-based) outside a cluster. The
// implementation is one file per concern (see broker.ts for the map); Knative's delivery and
// filter rules (../delivery.ts, ../filters.ts) are part of its face.
export { Broker, type BrokerOptions, type BrokerCloseOptions, type TriggerStats } from './broker.ts';
export { parseMessage, toBinaryMessage, headerValueProblem } from './cloudevent-http.ts';
export { MAX_EVENT_BYTES } from './ingress.ts';
export { DEFAULT_TTL, TTL_ATTRIBUTE } from './ttl.ts';
export { NOT_BEFORE_EXTENSION } from './requeue-hold.ts';
export type { DirectRoute, Lease } from './dispatcher.ts';
export {
  appendJsonLine,
  clearDeadLetterFile,
  DEFAULT_DEAD_LETTER_MAX_BYTES,
  originalEvent,
  readDeadLetterFile,
  refusedLettersFile,
  replayDeadLetterFile,
  toStructuredJson,
  type ReplayResult,
} from './dead-letters.ts';
export * from '../delivery.ts';
export * from '../filters.ts';
