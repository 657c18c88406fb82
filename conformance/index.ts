// The contract kit's face: docs/function-contract.md as checks run against any HTTP endpoint
// (`opfn conformance`), and the malformed-event corpus the runtime's own tests hold it to.
export { runConformance, LARGE_BODY_BYTES, type CheckRow, type ConformanceOptions } from './checks.ts';
export { contractFor, FORGED_IMAGE, type FunctionContract } from './contracts.ts';
export { formatTable } from './report.ts';
export { binaryHeaders, malformedEvents, referenceData, structuredEvent, type Malformed } from './malformed-events.ts';
