// The malformed-event corpus: requests a function must refuse with 400 and a one-line reason
// naming the problem, before any API request (an event may make a function do less, never more).
// Built for a function's own kind, so every registered function runs the same corpus
// (test/unit/malformed-events.test.ts holds the runtime to each `reason`; the contract kit sends
// it to any endpoint and asks only for a 400 with a reason): the shared intake (CloudEvents binding, specversion,
// attribute names), the event types the runtime knows (ApiServerSource Reference/Resource,
// PingSource, the runtime's reconcile), and the names an event may carry into a URL.
import { type FunctionDeclaration, PING_TYPE, apiVersionOf, kindKeyString, type ResourceKind } from '../functions/runtime/index.ts';

export interface Malformed {
  name: string;
  headers: Record<string, string>;
  body?: string;
  /** What the reason must say: it names the problem, not just "bad request". */
  reason: RegExp;
}

/** The data of a Reference-mode ApiServerSource event for `kind` default/web. */
export const referenceData = (kind: ResourceKind) => ({
  kind: kind.kind,
  namespace: 'default',
  name: 'web',
  apiVersion: apiVersionOf(kind),
});

/** A well-formed binary-mode Reference event for `kind` default/web; `overrides` break one thing (undefined removes a header). */
export function binaryHeaders(kind: ResourceKind, overrides: Record<string, string | undefined> = {}): Record<string, string> {
  const headers: Record<string, string | undefined> = {
    'content-type': 'application/json',
    'ce-specversion': '1.0',
    'ce-id': 'b1c2d3',
    'ce-source': 'https://10.96.0.1:443',
    'ce-type': 'dev.knative.apiserver.ref.add',
    'ce-subject': `/apis/${apiVersionOf(kind)}/namespaces/default/${kind.plural}/web`,
    'ce-kind': kind.kind,
    'ce-apiversion': apiVersionOf(kind),
    'ce-name': 'web',
    'ce-namespace': 'default',
    ...overrides,
  };
  return Object.fromEntries(Object.entries(headers).filter((entry): entry is [string, string] => entry[1] !== undefined));
}

/** A well-formed structured-mode ping; `overrides` break one thing (undefined removes an attribute). */
export function structuredEvent(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const event: Record<string, unknown> = { specversion: '1.0', id: 's1', source: 'https://10.96.0.1:443', type: PING_TYPE, ...overrides };
  for (const [name, value] of Object.entries(event)) if (value === undefined) delete event[name];
  return event;
}

const STRUCTURED = { 'content-type': 'application/cloudevents+json' };

/**
 * `text` as raw UTF-8 bytes in a header: one character per byte, which is how both `fetch` and
 * Node's HTTP server carry header bytes (Latin-1). The CloudEvents binding percent-encodes such
 * characters; raw ones come only from a sender that ignores it (the broker's ingress refuses
 * them, a function refuses them where they name an object).
 */
const rawUtf8 = (text: string): string => Buffer.from(text, 'utf8').toString('latin1');
const escaped = (text: string): string => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

/** The corpus for the function's own kind (`declaration.reconciles`). */
export function malformedEvents(declaration: FunctionDeclaration): Malformed[] {
  const kind = declaration.reconciles;
  const refData = referenceData(kind);
  const headers = (overrides: Record<string, string | undefined> = {}) => binaryHeaders(kind, overrides);
  const ref = JSON.stringify(refData);
  const key = (name: string) => kindKeyString({ kind, namespace: kind.namespaced ? 'default' : '', name });
  const reconcile = (overrides: Record<string, string> = {}) => headers({ 'ce-type': 'dev.opfn.reconcile', ...overrides });
  return [
    { name: 'missing ce-id', headers: headers({ 'ce-id': undefined }), body: ref, reason: /\bce-id\b/ },
    { name: 'empty ce-id', headers: headers({ 'ce-id': '' }), body: ref, reason: /\bce-id\b/ },
    { name: 'missing ce-source', headers: headers({ 'ce-source': undefined }), body: ref, reason: /\bce-source\b/ },
    { name: 'missing ce-type', headers: headers({ 'ce-type': undefined }), body: ref, reason: /\bce-type\b/ },
    { name: 'missing ce-specversion', headers: headers({ 'ce-specversion': undefined }), body: ref, reason: /\bce-specversion\b/ },
    { name: 'specversion 0.3', headers: headers({ 'ce-specversion': '0.3' }), body: ref, reason: /specversion "0\.3".*only 1\.0/ },
    { name: 'specversion 2.0', headers: headers({ 'ce-specversion': '2.0' }), body: ref, reason: /specversion "2\.0".*only 1\.0/ },
    { name: 'non-JSON body sent as application/json', headers: headers(), body: `kind=${kind.kind}&name=web`, reason: /not valid JSON/ },
    { name: 'truncated JSON body', headers: headers(), body: `{"kind":"${kind.kind}",`, reason: /not valid JSON/ },
    {
      name: 'empty body for an apiserver event',
      headers: headers(),
      body: '',
      reason: /dev\.knative\.apiserver\.ref\.add event has no data/,
    },
    { name: 'data is a JSON array', headers: headers(), body: JSON.stringify([refData]), reason: /data must be a JSON object/ },
    { name: 'data is a JSON string', headers: headers(), body: JSON.stringify('web'), reason: /data must be a JSON object/ },
    { name: 'data is JSON null', headers: headers(), body: 'null', reason: /data must be a JSON object/ },
    {
      name: 'reconcile event without keys',
      headers: reconcile(),
      body: JSON.stringify({}),
      reason: /dev\.opfn\.reconcile event data must be \{"keys": \[\.\.\.\]\}/,
    },
    {
      name: 'reconcile event with an empty key list',
      headers: reconcile(),
      body: JSON.stringify({ keys: [] }),
      reason: /at least one key/,
    },
    {
      name: 'reconcile event naming a dot-dot object',
      headers: reconcile(),
      body: JSON.stringify({ keys: [key('..')] }),
      reason: /invalid object name "\.\."/,
    },
    // A function with kinds known only at run time must ask the API whether it serves a kind
    // (test/unit/runtime-kinds.test.ts: refused with 400 once it knows it does not).
    ...(declaration.runtimeKinds
      ? []
      : [
          {
            name: 'reconcile event naming a kind the function does not reconcile',
            headers: reconcile(),
            body: JSON.stringify({ keys: ['Node:/x'] }),
            reason: /"Node" is not a kind this function reconciles/,
          },
        ]),
    {
      name: 'reconcile event naming an invalid object of another kind',
      headers: reconcile(),
      body: JSON.stringify({ keys: ['example.com/Gadget:default/..'] }),
      reason: /invalid object name "\.\."|"example\.com\/Gadget" is not a kind this function reconciles/,
    },
    {
      name: 'reconcile event with an invalid opfnnotbefore',
      headers: reconcile({ 'ce-opfnnotbefore': 'tomorrow' }),
      body: JSON.stringify({ keys: [key('web')] }),
      reason: /opfnnotbefore "tomorrow" is not an RFC 3339 time/,
    },
    {
      name: 'reconcile event whose notBefore is not an object',
      headers: reconcile(),
      body: JSON.stringify({ keys: [key('web')], notBefore: ['2026-01-01T00:00:00Z'] }),
      reason: /notBefore must be an object/,
    },
    {
      name: 'reconcile event whose notBefore names a key it does not carry',
      headers: reconcile(),
      body: JSON.stringify({ keys: [key('web')], notBefore: { [key('other')]: '2026-01-01T00:00:00Z' } }),
      reason: /notBefore names .*other.*which is not one of its keys/,
    },
    {
      name: "reconcile event with a key's invalid notBefore",
      headers: reconcile(),
      body: JSON.stringify({ keys: [key('web')], notBefore: { [key('web')]: 'tomorrow' } }),
      reason: /notBefore of ".*web" "tomorrow" is not an RFC 3339 time/,
    },
    {
      name: 'reconcile event with too many keys',
      headers: reconcile(),
      body: JSON.stringify({ keys: Array.from({ length: 1001 }, (_, i) => key(`k${i}`)) }),
      reason: /carries 1001 keys; at most 1000/,
    },
    {
      name: 'structured event sent as text/plain',
      headers: { 'content-type': 'text/plain' },
      body: JSON.stringify(structuredEvent()),
      reason: /not a CloudEvent.*application\/cloudevents\+json/,
    },
    {
      name: 'structured event with an unsupported format',
      headers: { 'content-type': 'application/cloudevents+xml' },
      body: JSON.stringify(structuredEvent()),
      reason: /content type application\/cloudevents\+xml/,
    },
    {
      name: 'structured mode with invalid JSON',
      headers: STRUCTURED,
      body: '{"specversion": "1.0", "id": ',
      reason: /structured CloudEvent is not valid JSON/,
    },
    { name: 'structured mode with an empty body', headers: STRUCTURED, body: '', reason: /structured CloudEvent is not valid JSON/ },
    {
      name: 'structured mode with a JSON array',
      headers: STRUCTURED,
      body: JSON.stringify([structuredEvent()]),
      reason: /structured CloudEvent must be a JSON object/,
    },
    {
      name: 'structured mode without id',
      headers: STRUCTURED,
      body: JSON.stringify(structuredEvent({ id: undefined })),
      reason: /no "id" attribute/,
    },
    {
      name: 'structured mode without source',
      headers: STRUCTURED,
      body: JSON.stringify(structuredEvent({ source: undefined })),
      reason: /no "source" attribute/,
    },
    {
      name: 'structured mode without specversion',
      headers: STRUCTURED,
      body: JSON.stringify(structuredEvent({ specversion: undefined })),
      reason: /no "specversion" attribute/,
    },
    {
      name: 'batch mode',
      headers: { 'content-type': 'application/cloudevents-batch+json' },
      body: JSON.stringify([structuredEvent()]),
      reason: /batched CloudEvents are not accepted/,
    },
    {
      name: 'unknown event type',
      headers: headers({ 'ce-type': 'com.example.object.changed' }),
      body: ref,
      reason: /unknown event type "com\.example\.object\.changed"/,
    },
    {
      name: 'apiserver event without kind',
      headers: headers({ 'ce-kind': undefined }),
      body: JSON.stringify({ ...refData, kind: undefined }),
      reason: /names no apiVersion\/kind/,
    },
    {
      name: 'apiserver event without apiversion',
      headers: headers({ 'ce-apiversion': undefined }),
      body: JSON.stringify({ ...refData, apiVersion: undefined }),
      reason: /names no apiVersion\/kind/,
    },
    {
      name: 'apiserver event without name',
      headers: headers({ 'ce-name': undefined }),
      body: JSON.stringify({ ...refData, name: undefined }),
      reason: /no valid object name \(got ""\)/,
    },
    { name: 'upper-case name', headers: headers({ 'ce-name': 'Web' }), body: ref, reason: /no valid object name \(got "Web"\)/ },
    {
      name: 'raw UTF-8 bytes (non-ASCII) in ce-name',
      headers: headers({ 'ce-name': rawUtf8('wéb') }),
      body: ref,
      reason: new RegExp(`no valid object name \\(got "${escaped(rawUtf8('wéb'))}"\\)`),
    },
    {
      name: 'name longer than 253 characters',
      headers: headers({ 'ce-name': 'a'.repeat(254) }),
      body: ref,
      reason: /no valid object name \(got "a{64}"… \(254 characters\)\)/,
    },
    // A forged body may carry megabytes where a name goes: the reason quotes a few dozen characters.
    {
      name: 'Resource-mode object named with a megabyte',
      headers: headers({ 'ce-type': 'dev.knative.apiserver.resource.update', 'ce-name': undefined }),
      body: JSON.stringify({
        apiVersion: apiVersionOf(kind),
        kind: kind.kind,
        metadata: { name: 'a'.repeat(1_000_000), namespace: 'default' },
      }),
      reason: /no valid object name \(got "a{64}"… \(1000000 characters\)\)/,
    },
    {
      name: 'name with path traversal',
      headers: headers({ 'ce-name': '../x' }),
      body: ref,
      reason: /no valid object name \(got "\.\.\/x"\)/,
    },
    {
      name: 'name with an empty DNS label',
      headers: headers({ 'ce-name': 'a..b' }),
      body: ref,
      reason: /no valid object name \(got "a\.\.b"\)/,
    },
    // Kind and apiVersion go into answers, logs and keys: a forged header or body of 20 000 characters would not fit an answer's header.
    {
      name: 'kind of 20 000 characters',
      headers: headers({ 'ce-type': 'dev.knative.apiserver.resource.update', 'ce-kind': undefined }),
      body: JSON.stringify({ apiVersion: apiVersionOf(kind), kind: 'K'.repeat(20_000), metadata: { name: 'web', namespace: 'default' } }),
      reason: /invalid kind "K{64}"… \(20000 characters\)/,
    },
    {
      name: 'apiVersion with a path in it',
      headers: headers({ 'ce-apiversion': 'example.com/v1/../../api/v1' }),
      body: JSON.stringify({ ...refData, apiVersion: undefined }),
      reason: /invalid apiVersion "example\.com\/v1\/\.\.\/\.\.\/api\/v1"/,
    },
    ...(kind.namespaced
      ? [
          {
            name: 'namespaced object without a namespace',
            headers: headers({ 'ce-namespace': undefined }),
            body: JSON.stringify({ ...refData, namespace: undefined }),
            reason: /invalid namespace ""/,
          },
        ]
      : []),
    { name: 'upper-case namespace', headers: headers({ 'ce-namespace': 'Default' }), body: ref, reason: /invalid namespace "Default"/ },
    {
      name: 'namespace longer than 63 characters',
      headers: headers({ 'ce-namespace': 'n'.repeat(64) }),
      body: ref,
      reason: /invalid namespace "n{64}"/,
    },
    {
      name: 'namespace with path traversal',
      headers: headers({ 'ce-namespace': '../kube-system' }),
      body: ref,
      reason: /invalid namespace "\.\.\/kube-system"/,
    },
    { name: 'namespace with a dot', headers: headers({ 'ce-namespace': 'team.a' }), body: ref, reason: /invalid namespace "team\.a"/ },
    {
      name: 'raw UTF-8 bytes (non-ASCII) in ce-namespace',
      headers: headers({ 'ce-namespace': rawUtf8('défaut') }),
      body: ref,
      reason: new RegExp(`invalid namespace "${escaped(rawUtf8('défaut'))}"`),
    },
    {
      name: 'Resource-mode data without metadata',
      headers: headers({ 'ce-type': 'dev.knative.apiserver.resource.update' }),
      body: JSON.stringify({ apiVersion: apiVersionOf(kind), kind: kind.kind, spec: {} }),
      reason: /resource\.update event data is not a Kubernetes object \(no metadata\)/,
    },
    // Mappers and routing read a body's owners and labels: shapes no API server sends are malformed, not a TypeError (500).
    ...(
      [
        ['ownerReferences that are not a list', { ownerReferences: {} }, /metadata\.ownerReferences must be a list, got \{\}/],
        ['an ownerReference that is null', { ownerReferences: [null] }, /metadata\.ownerReferences\[0\] must be an object, got null/],
        ['labels that are not strings', { labels: { app: 1 } }, /metadata\.labels\["app"\] must be a string/],
      ] as const
    ).map(([what, metadata, reason]) => ({
      name: `Resource-mode object with ${what}`,
      headers: headers({ 'ce-type': 'dev.knative.apiserver.resource.update' }),
      body: JSON.stringify({
        apiVersion: apiVersionOf(kind),
        kind: kind.kind,
        metadata: { name: 'web', namespace: 'default', ...metadata },
      }),
      reason,
    })),
    {
      name: 'extension name with an underscore',
      headers: headers({ 'ce-my_ext': 'x' }),
      body: ref,
      reason: /invalid attribute name: "my_ext"/,
    },
    { name: 'extension name with a dash', headers: headers({ 'ce-my-ext': 'x' }), body: ref, reason: /invalid attribute name: "my-ext"/ },
    {
      name: 'structured extension name with upper case',
      headers: STRUCTURED,
      body: JSON.stringify(structuredEvent({ Tenant: 'a' })),
      reason: /invalid attribute name: "Tenant"/,
    },
    { name: 'empty POST', headers: {}, reason: /not a CloudEvent/ },
  ];
}
