// `spec.ceOverrides.extensions` of a source (ApiServerSource, PingSource), checked as Knative
// checks it and applied as its adapters apply it. Knative's webhook refuses a name that is not
// letters and digits (knative.dev/pkg apis/duck/v1 source_types.go, validateExtensionName); the
// adapters set each one with sdk-go's SetExtension, which lower-cases the name and refuses one
// that would replace a CloudEvents attribute. The local stand-in CRDs store any spec, so a bad
// override reaches the local controllers, which report it on the object instead of emitting
// events the broker must refuse.
import { headerValueProblem } from '../broker/index.ts';
import { quote } from '../../functions/runtime/index.ts';

/** The CloudEvents 1.0 context attributes and the data: an extension may not take their names. */
const RESERVED = new Set([
  'specversion',
  'id',
  'source',
  'type',
  'subject',
  'time',
  'datacontenttype',
  'dataschema',
  'data',
  'data_base64',
]);

/** Why a source's `ceOverrides` cannot be applied, if it cannot. */
export function ceOverridesProblem(ceOverrides: unknown): string | undefined {
  if (ceOverrides === undefined) return undefined;
  const extensions = (ceOverrides as { extensions?: unknown } | null)?.extensions;
  if (extensions === undefined) return undefined;
  if (extensions === null || typeof extensions !== 'object' || Array.isArray(extensions))
    return 'ceOverrides.extensions must map names to strings';
  for (const [name, value] of Object.entries(extensions)) {
    if (!/^[a-zA-Z0-9]+$/.test(name)) return `ceOverrides.extensions: ${quote(name)} is not an extension name (letters and digits only)`;
    if (RESERVED.has(name.toLowerCase()))
      return `ceOverrides.extensions: ${quote(name)} would replace the CloudEvents attribute ${name.toLowerCase()}`;
    if (typeof value !== 'string') return `ceOverrides.extensions.${name} must be a string`;
    const problem = headerValueProblem(value);
    if (problem) return `ceOverrides.extensions.${name} ${problem}`;
  }
  return undefined;
}

/** The extensions every event of the source carries: names lower-cased, as sdk-go sets them. Call after ceOverridesProblem found none. */
export function overrideExtensions(ceOverrides: { extensions?: Record<string, string> } | undefined): Record<string, string> | undefined {
  const extensions = ceOverrides?.extensions;
  return extensions && Object.fromEntries(Object.entries(extensions).map(([name, value]) => [name.toLowerCase(), value]));
}
