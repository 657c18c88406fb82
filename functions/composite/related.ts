// The customize hook and the related objects it asks for: one call per sync of a parent, its
// rules resolved through discovery and listed (by namespace, labels, names, or a
// namespaceSelector over Namespaces), handed to the sync hook as `related`.
//
// Upstream: metacontroller pkg/controller/common/customize/manager.go (GetRelatedObjects,
// getCustomizeHookResponse). Upstream caches the answer per parent uid and generation; this
// function is stateless between events, so it asks on every sync.
import {
  postJson,
  type HookResult,
  isStrict,
  parseCustomizeResponse,
  relatedQueries,
  selectRelated,
  webhookTarget,
  type CompositeController,
  type Hook,
  type ResolvedResource,
} from './metacontroller/index.ts';
import { type Discovery, apiVersionOf, Namespace, type KubeObject, type ResourceKind, type KubeClient } from '../runtime/index.ts';
import { rewriteUrl, type UrlRewrite } from './hooks.ts';

export interface Related {
  rules: ResolvedResource[];
  objects: KubeObject[];
}

const failure = (reason: string): HookResult<Related> => ({ ok: false, failure: { type: 'SyncError', cause: 'malformed', reason } });

export async function relatedFor(
  hook: Hook,
  controller: CompositeController,
  parent: KubeObject,
  parentKind: ResourceKind,
  env: { kube: KubeClient; discovery: Discovery; hookUrls: UrlRewrite[] },
): Promise<HookResult<Related>> {
  const target = webhookTarget(hook.webhook);
  if (!target.ok) return target;
  const version = hook.version ?? 'v1';
  const answer = await postJson(
    { ...target.value, url: rewriteUrl(target.value.url, env.hookUrls) },
    { controller, parent },
    { whole: true },
  );
  if (!answer.ok) return answer;
  const parsed = parseCustomizeResponse(answer.value, { version, strict: isStrict(version, hook.webhook) });
  if (!parsed.ok) return failure(parsed.reason);
  const kinds: ResourceKind[] = [];
  for (const rule of parsed.value.relatedResources) kinds.push(await env.discovery.resolve(rule.apiVersion, rule.resource));
  const resolved = kinds.map((kind) => ({
    apiVersion: apiVersionOf(kind),
    resource: kind.plural,
    kind: kind.kind,
    namespaced: kind.namespaced,
  }));
  const queries = relatedQueries(parsed.value.relatedResources, resolved, { version, parent, parentNamespaced: parentKind.namespaced });
  if (!queries.ok) return failure(queries.reason);
  const objects: KubeObject[] = [];
  for (const [index, query] of queries.value.entries()) {
    const kind = kinds[index]!;
    const namespaces =
      query.namespaceSelector !== undefined
        ? (await env.kube.list(Namespace, { labelSelector: query.namespaceSelector })).items.map((item) => item.metadata.name!)
        : [query.namespace];
    for (const namespace of namespaces) {
      const listed = (await env.kube.list(kind, { namespace, labelSelector: query.labelSelector || undefined })).items;
      objects.push(...selectRelated(query, listed).map((object) => ({ ...object, apiVersion: apiVersionOf(kind), kind: kind.kind })));
    }
  }
  return { ok: true, value: { rules: resolved, objects } };
}
