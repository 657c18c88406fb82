// The local broker's public API; the implementation lives in broker/ (one file per concern, see
// broker/broker.ts for the map). Other code and the tests import from here.
export { Broker, type BrokerOptions, type BrokerCloseOptions, type TriggerStats } from './broker/broker.ts';
export { parseMessage, toBinaryMessage } from './broker/cloudevent-http.ts';
export { MAX_EVENT_BYTES } from './broker/ingress.ts';
export { DEFAULT_TTL, TTL_ATTRIBUTE } from './broker/ttl.ts';
export { NOT_BEFORE_EXTENSION } from './broker/hold.ts';
export type { DirectRoute, Lease } from './broker/dispatcher.ts';
export { appendJsonLine, clearDeadLetterFile, DEFAULT_DEAD_LETTER_MAX_BYTES, originalEvent, readDeadLetterFile, refusedLettersFile, replayDeadLetterFile, toStructuredJson, type ReplayResult } from './broker/dead-letters.ts';
export * from './delivery.ts';
export * from './filters.ts';
