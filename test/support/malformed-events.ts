// The malformed-event corpus lives with the contract kit, which runs it against any endpoint;
// the unit tests hold the runtime's own reasons to it here.
export { binaryHeaders, malformedEvents, referenceData, structuredEvent, type Malformed } from '../../conformance/index.ts';
