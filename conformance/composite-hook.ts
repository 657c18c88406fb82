// What the composite function needs before its objects can converge: a CompositeController and
// the hook it calls. The kit serves that hook itself (Metacontroller's sync hook contract: the
// parent and its children in, the desired children and status out), installs a parent kind of
// its own, and a CompositeController whose sync hook is the kit's. A parent then converges
// through the function like any other object: one ConfigMap named after it, holding its
// `spec.message`, and `status.observedGeneration`, which the function sets after the hook.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { applyCrds } from '../eventing/crds.ts';
import {
  apiVersionOf,
  ConfigMap,
  type FunctionDeclaration,
  type KubeClient,
  type KubeObject,
  type ResourceKind,
} from '../functions/runtime/index.ts';

/** The kit's parent kind: namespaced, with the status subresource (so observedGeneration is written). */
export const ConformanceParent: ResourceKind = {
  group: 'conformance.opfn.dev',
  version: 'v1',
  kind: 'ConformanceParent',
  plural: 'conformanceparents',
  namespaced: true,
};

/** The CloudEvent extension the composite function's sources set: the controller's name (a hint the function may use, never trust). */
const CONTROLLER_EXTENSION = 'opfncontroller';
const MAX_HOOK_REQUEST_BYTES = 8 * 1024 * 1024;

export const PARENT_EXAMPLE: KubeObject = {
  apiVersion: apiVersionOf(ConformanceParent),
  kind: ConformanceParent.kind,
  metadata: { name: 'example-parent' },
  spec: { message: 'hello' },
} as KubeObject;

const PARENT_CRD: KubeObject = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: `${ConformanceParent.plural}.${ConformanceParent.group}` },
  spec: {
    group: ConformanceParent.group,
    scope: 'Namespaced',
    names: {
      kind: ConformanceParent.kind,
      plural: ConformanceParent.plural,
      singular: 'conformanceparent',
      listKind: 'ConformanceParentList',
    },
    versions: [
      {
        name: ConformanceParent.version,
        served: true,
        storage: true,
        subresources: { status: {} },
        schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } },
      },
    ],
  },
} as KubeObject;

/** The desired state the kit's hook answers for a parent: one ConfigMap named after it, holding its spec.message. */
function desiredChild(parent: KubeObject): KubeObject {
  const message = (parent as { spec?: { message?: unknown } }).spec?.message;
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: parent.metadata.name, namespace: parent.metadata.namespace },
    data: { message: typeof message === 'string' ? message : '' },
  } as KubeObject;
}

/** The sync hook: POST /sync with `{parent, children, …}`, answered `{status, children}`. */
async function answerHook(request: IncomingMessage, response: ServerResponse): Promise<void> {
  const reply = (status: number, body: unknown): void =>
    void response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  if (request.method !== 'POST' || request.url !== '/sync') return reply(404, { error: `no hook at ${request.method} ${request.url}` });
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_HOOK_REQUEST_BYTES) return reply(413, { error: 'request too large' });
    chunks.push(chunk);
  }
  let parent: KubeObject | undefined;
  try {
    parent = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { parent?: KubeObject }).parent;
  } catch (error) {
    return reply(400, { error: `the request is not JSON: ${(error as Error).message}` });
  }
  if (typeof parent?.metadata?.name !== 'string') return reply(400, { error: 'the request has no parent.metadata.name' });
  reply(200, { status: { child: parent.metadata.name }, children: [desiredChild(parent)] });
}

/** What the kit installed before a function's objects can converge. */
export interface Prerequisites {
  /** An object of the function's reconciled kind, as created: its add event is delivered before the object checks. */
  announce: KubeObject;
  /** Extensions of the events of the objects (as their sources set them). */
  extensions: Record<string, string>;
  /** What went wrong on the kit's side of a convergence that failed (its hook never called), if anything. */
  diagnose(): string | undefined;
  /** Removes what was installed (the parent CRD stays, as the function's own CRDs do). */
  tearDown(): Promise<void>;
}

/**
 * Serves the hook on loopback (the endpoint must reach it there: it runs on this machine),
 * installs the parent CRD and a CompositeController `conformance-<suffix>` whose sync hook it is.
 */
export async function setUpComposite(kube: KubeClient, declaration: FunctionDeclaration, suffix: string): Promise<Prerequisites> {
  let calls = 0;
  const server = createServer((request, response) => {
    calls++;
    answerHook(request, response).catch(() => response.destroy());
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', () => resolve()));
  const close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  try {
    await applyCrds(kube, [PARENT_CRD]);
    const hookUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/sync`;
    const name = `conformance-${suffix}`;
    const controller = await kube.create(declaration.reconciles, {
      apiVersion: apiVersionOf(declaration.reconciles),
      kind: declaration.reconciles.kind,
      metadata: { name },
      spec: {
        parentResource: { apiVersion: apiVersionOf(ConformanceParent), resource: ConformanceParent.plural },
        childResources: [{ apiVersion: 'v1', resource: ConfigMap.plural, updateStrategy: { method: 'InPlace' } }],
        hooks: { sync: { webhook: { url: hookUrl } } },
      },
    } as KubeObject);
    return {
      announce: controller,
      extensions: { [CONTROLLER_EXTENSION]: name },
      diagnose: () =>
        calls === 0 ? `the kit's sync hook (${hookUrl}) was never called: the endpoint must reach it, on this machine` : undefined,
      tearDown: async () => {
        await kube.delete(declaration.reconciles, { namespace: '', name }).catch(() => undefined);
        await close();
      },
    };
  } catch (error) {
    await close();
    throw error;
  }
}
