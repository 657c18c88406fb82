// The fields of an object that its CRD's schema does not name. Server-side strict field
// validation (`fieldValidation=Strict`) refuses an unknown field only where the schema is closed;
// Knative's schemas leave large parts open (`x-kubernetes-preserve-unknown-fields` on a Trigger's
// and a source's whole spec, on delivery), where a misspelled field is stored and then ignored by
// Knative. This walk finds those too: under a schema with `properties`, every key must be one of
// them (or fit `additionalProperties`); only a schema with neither (a free-form map: annotations,
// a filter's `exact`, ceOverrides extensions) takes any key.
//
// Knative's Go types have a few fields its CRD schemas do not list but keep (the open delivery
// schema "is necessary to enable the experimental feature delivery-timeout"): GO_TYPE_FIELDS
// names them, from knative/eventing pkg/apis/duck/v1 delivery_types.go (DeliverySpec.Timeout,
// DeliverySpec.RetryAfterMax).
import { parseApiVersion, type KubeObject } from '../../functions/runtime/index.ts';

interface Schema {
  properties?: Record<string, Schema>;
  additionalProperties?: Schema | boolean;
  items?: Schema;
  'x-kubernetes-preserve-unknown-fields'?: boolean;
}

/** Paths (by kind) of fields Knative's Go types declare and its CRD schemas leave to preserve-unknown-fields. */
export const GO_TYPE_FIELDS: Record<string, string[]> = {
  Broker: ['.spec.delivery.timeout', '.spec.delivery.retryAfterMax'],
  Trigger: ['.spec.delivery.timeout', '.spec.delivery.retryAfterMax'],
};

/** The openAPIV3Schema of the CRD among `crds` that serves `object` (by group, kind and version). */
function schemaFor(object: KubeObject, crds: KubeObject[]): Schema | undefined {
  const { group, version } = parseApiVersion(object.apiVersion!);
  const crd = crds.find((candidate) => {
    const spec = candidate.spec as { group: string; names: { kind: string } };
    return spec.group === group && spec.names.kind === object.kind;
  });
  const versions = (crd?.spec as { versions?: { name: string; schema?: { openAPIV3Schema?: Schema } }[] } | undefined)?.versions;
  return versions?.find((candidate) => candidate.name === version)?.schema?.openAPIV3Schema;
}

function walk(value: unknown, schema: Schema | undefined, path: string): string[] {
  if (!schema || value === null || typeof value !== 'object') return [];
  if (Array.isArray(value)) return value.flatMap((item, index) => walk(item, schema.items, `${path}[${index}]`));
  const extra = typeof schema.additionalProperties === 'object' ? schema.additionalProperties : undefined;
  if (!schema.properties) return extra ? Object.entries(value).flatMap(([key, item]) => walk(item, extra, `${path}.${key}`)) : [];
  return Object.entries(value).flatMap(([key, item]) => {
    const here = `${path}.${key}`;
    const declared = schema.properties![key] ?? extra;
    return declared ? walk(item, declared, here) : [here];
  });
}

/**
 * Paths of the fields of `object` its CRD schema (`crds`) does not name, leaving out
 * GO_TYPE_FIELDS; metadata is the API server's to check. Throws when no CRD serves the object.
 */
export function undeclaredFields(object: KubeObject, crds: KubeObject[]): string[] {
  const schema = schemaFor(object, crds);
  if (!schema) throw new Error(`no CRD among those given serves ${object.apiVersion} ${object.kind}`);
  const { apiVersion: _, kind: __, metadata: ___, ...rest } = object;
  const allowed = new Set(GO_TYPE_FIELDS[object.kind!] ?? []);
  return walk(rest, schema, '').filter((path) => !allowed.has(path));
}
