// The ApiServerSources of a function, from the declaration's wiring (wiring.ts); the local
// plane runs these very objects, so what runs locally and what a cluster runs cannot drift.
// The object itself (Knative's ApiServerSource, sources.knative.dev/v1; `namespaceSelector: {}`
// in 'cluster' scope) is built by apiServerSourceObject in functions/runtime/knative-objects.ts,
// shared with the sources the composite function manages per CompositeController.
import {
  type FunctionDeclaration,
  type KubeObject,
  type LabelSelector,
  apiServerSourceObject,
  sourceResource,
} from '../../functions/runtime/index.ts';
import { sourcesFor } from './wiring.ts';
import type { SourceSpec } from '../source/index.ts';
import { labels, sourceServiceAccountName, type ManifestOptions } from './options.ts';
import { clusterScopedResources, identity, sourceRules } from './rbac.ts';

/**
 * A label selector string as list/watch take it (`app`, `!app`, `app=x`, `app!=x`,
 * `app in (x,y)`, `app notin (x,y)`, comma-separated) as the LabelSelector object of a manifest.
 */
export function parseLabelSelector(text: string): LabelSelector {
  const selector: LabelSelector = {};
  // Commas inside "in (a,b)" do not separate requirements.
  const requirements =
    text
      .match(/[^,(]+(\([^)]*\))?/g)
      ?.map((part) => part.trim())
      .filter(Boolean) ?? [];
  for (const requirement of requirements) {
    let match: RegExpExecArray | null;
    const expression = (key: string, operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist', values?: string[]) =>
      (selector.matchExpressions ??= []).push(values ? { key, operator, values } : { key, operator });
    if ((match = /^([^\s=!]+)\s*(?:==|=)\s*([^\s=!]*)$/.exec(requirement))) (selector.matchLabels ??= {})[match[1]] = match[2];
    else if ((match = /^([^\s=!]+)\s*!=\s*([^\s=!]*)$/.exec(requirement))) expression(match[1], 'NotIn', [match[2]]);
    else if ((match = /^([^\s=!]+)\s+(in|notin)\s*\(([^)]*)\)$/.exec(requirement)))
      expression(
        match[1],
        match[2] === 'in' ? 'In' : 'NotIn',
        match[3].split(',').map((value) => value.trim()),
      );
    else if ((match = /^!\s*([^\s=!]+)$/.exec(requirement))) expression(match[1], 'DoesNotExist');
    else if ((match = /^([^\s=!()]+)$/.exec(requirement))) expression(match[1], 'Exists');
    else throw new Error(`label selector "${text}": cannot read "${requirement}"`);
  }
  return selector;
}

/** A LabelSelector object as the string list/watch take (the inverse of parseLabelSelector). */
export function formatLabelSelector(selector: LabelSelector): string {
  return [
    ...Object.entries(selector.matchLabels ?? {}).map(([key, value]) => `${key}=${value}`),
    ...(selector.matchExpressions ?? []).map(({ key, operator, values = [] }) =>
      operator === 'Exists'
        ? key
        : operator === 'DoesNotExist'
          ? `!${key}`
          : `${key} ${operator === 'In' ? 'in' : 'notin'} (${values.join(',')})`,
    ),
  ].join(',');
}

/** One ApiServerSource object from a plane SourceSpec. */
export function apiServerSource(declaration: FunctionDeclaration, source: SourceSpec, options: ManifestOptions): KubeObject {
  return apiServerSourceObject(
    {
      name: source.name,
      labels: labels('source', declaration),
      mode: source.mode,
      resources: source.resources.map((resource) => ({
        ...sourceResource(resource.kind),
        ...(resource.labelSelector ? { selector: parseLabelSelector(resource.labelSelector) } : {}),
      })),
      serviceAccountName: sourceServiceAccountName(source.name),
      extensions: source.extensions,
    },
    options,
  );
}

/** Every source of the function, each followed by its own identity (get/list/watch on what it sends). */
export function sourceObjects(declaration: FunctionDeclaration, options: ManifestOptions): KubeObject[] {
  const clusterScoped = clusterScopedResources(declaration);
  return sourcesFor(declaration).flatMap((source) => [
    ...identity(sourceServiceAccountName(source.name), sourceRules(source), clusterScoped, options, labels('source', declaration)),
    apiServerSource(declaration, source, options),
  ]);
}
