// Trigger filtering with Knative Eventing's semantics (knative/eventing pkg/eventfilter):
//
// `filter.attributes` (attributes/filter.go)
//   - every listed attribute must match exactly (case-sensitive values);
//   - a value of "" means "present and non-empty";
//   - the CloudEvents context attributes (specversion, type, source, subject, id, time,
//     dataschema/schemaurl, datacontenttype, datamediatype, datacontentencoding) always "exist"
//     (an absent optional one reads as ""), anything else is an extension that may be missing;
//   - a missing extension fails the filter.
// `filters` (subscriptionsapi/*.go) replaces `filter` when non-empty. Each entry has one dialect:
//   - exact / prefix / suffix: the attribute must exist and its string form must equal / start
//     with / end with the value; an empty attribute name or value makes the expression invalid,
//     and Knative skips invalid expressions (they match everything);
//   - all: fails as soon as one child fails; any: passes as soon as one child passes;
//     not: inverts pass/fail. Results are three-valued (pass, fail, no filter): an expression
//     with nothing to evaluate (empty all/any, invalid children) is "no filter", which is neutral
//     inside all/any/not and lets the event through at the top.
//   - a filter object with no dialect is skipped; the webhook rejects several dialects in one
//     object, one key per exact/prefix/suffix map, and attribute names outside ^[a-z][a-z0-9]*$.
import type { CloudEventV1 } from 'cloudevents';
import type { DeliverySpec } from './delivery.ts';

export type SubscriptionsApiFilter =
  | { exact: Record<string, string> }
  | { prefix: Record<string, string> }
  | { suffix: Record<string, string> }
  | { all: SubscriptionsApiFilter[] }
  | { any: SubscriptionsApiFilter[] }
  | { not: SubscriptionsApiFilter };

export interface Trigger {
  name: string;
  /** Knative Trigger spec.filter. */
  filter?: { attributes: Record<string, string> };
  /** Knative Trigger spec.filters; replaces `filter` when non-empty. */
  filters?: SubscriptionsApiFilter[];
  /** URL events are POSTed to. */
  subscriber: string;
  /** Replaces the broker's delivery when set. */
  delivery?: DeliverySpec;
  /**
   * Local only (not a Knative Trigger field): deliveries in flight at once for this trigger. The
   * plane sets it from the function's scaling (target or containerConcurrency × maxScale), so a
   * burst can scale the function out; unset = the broker's maxInFlight.
   */
  maxInFlight?: number;
}

export type FilterResult = 'pass' | 'fail' | 'none';

const CONTEXT_ATTRIBUTES = new Set([
  'specversion',
  'type',
  'source',
  'subject',
  'id',
  'time',
  'dataschema',
  'schemaurl',
  'datacontenttype',
  'datamediatype',
  'datacontentencoding',
]);

/** Knative's attribute name rule (trigger_validation.go). */
export const ATTRIBUTE_NAME = /^[a-z][a-z0-9]*$/;

/**
 * Looks an attribute up the way Knative's LookupAttribute does: context attributes always
 * exist (""), extensions exist only when set. Values are compared in their string form, which is
 * what they are after the binary-mode hop Knative makes between its ingress and its filter.
 */
export function lookupAttribute(event: CloudEventV1<unknown>, name: string): { found: boolean; value: string } {
  const record = event as unknown as Record<string, unknown>;
  if (CONTEXT_ATTRIBUTES.has(name)) {
    switch (name) {
      case 'dataschema':
      case 'schemaurl':
        return { found: true, value: stringForm(record.dataschema ?? record.schemaurl) };
      case 'datamediatype': {
        const contentType = stringForm(record.datacontenttype);
        return { found: true, value: contentType.split(';')[0]?.trim().toLowerCase() ?? '' };
      }
      default:
        return { found: true, value: stringForm(record[name]) };
    }
  }
  if (name === 'data' || name === 'data_base64') return { found: false, value: '' };
  if (!Object.hasOwn(record, name)) return { found: false, value: '' };
  const value = record[name];
  if (value === undefined || value === null) return { found: false, value: '' };
  return { found: true, value: stringForm(value) };
}

function stringForm(value: unknown): string {
  if (value === undefined || value === null) return '';
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? '' : value.toISOString();
  if (ArrayBuffer.isView(value)) return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64');
  try {
    return JSON.stringify(value) ?? '';
  } catch {
    return String(value);
  }
}

/** Knative Trigger spec.filter.attributes. */
export function evaluateAttributesFilter(
  attributes: Record<string, string> | undefined | null,
  event: CloudEventV1<unknown>,
): FilterResult {
  if (attributes === undefined || attributes === null || typeof attributes !== 'object') return 'none';
  for (const [name, expected] of Object.entries(attributes)) {
    const { found, value } = lookupAttribute(event, name);
    if (!found) return 'fail';
    if (expected === '') {
      if (value === '') return 'fail';
      continue;
    }
    if (value !== String(expected)) return 'fail';
  }
  return 'pass';
}

function and(a: FilterResult, b: FilterResult): FilterResult {
  if (a === 'none') return b;
  if (b === 'none') return a;
  return a === 'pass' && b === 'pass' ? 'pass' : 'fail';
}

function or(a: FilterResult, b: FilterResult): FilterResult {
  if (a === 'none') return b;
  if (b === 'none') return a;
  return a === 'pass' || b === 'pass' ? 'pass' : 'fail';
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function nonEmptyMap(value: unknown): value is Record<string, unknown> {
  return isRecord(value) && Object.keys(value).length > 0;
}

/** The map is invalid for Knative (empty name or value): the expression is skipped. */
function hasEmptyEntry(map: Record<string, unknown>): boolean {
  return Object.entries(map).some(([name, value]) => name === '' || value === '' || value === undefined || value === null);
}

function matchMap(
  map: Record<string, unknown>,
  event: CloudEventV1<unknown>,
  test: (actual: string, expected: string) => boolean,
): FilterResult {
  if (hasEmptyEntry(map)) return 'none';
  for (const [name, expected] of Object.entries(map)) {
    const { found, value } = lookupAttribute(event, name);
    if (!found || !test(value, String(expected))) return 'fail';
  }
  return 'pass';
}

/**
 * Evaluates one SubscriptionsAPI filter expression. Dialects are tried in Knative's order
 * (exact, prefix, suffix, all, any, not); an object with none of them, or with only empty ones,
 * evaluates to 'none'.
 */
export function evaluateSubscriptionsApiFilter(filter: unknown, event: CloudEventV1<unknown>): FilterResult {
  if (!isRecord(filter)) return 'none';
  if (nonEmptyMap(filter.exact)) return matchMap(filter.exact, event, (actual, expected) => actual === expected);
  if (nonEmptyMap(filter.prefix)) return matchMap(filter.prefix, event, (actual, expected) => actual.startsWith(expected));
  if (nonEmptyMap(filter.suffix)) return matchMap(filter.suffix, event, (actual, expected) => actual.endsWith(expected));
  if (Array.isArray(filter.all) && filter.all.length > 0) return evaluateAll(filter.all, event);
  if (Array.isArray(filter.any) && filter.any.length > 0) return evaluateAny(filter.any, event);
  if (filter.not !== undefined && filter.not !== null) {
    const inner = evaluateSubscriptionsApiFilter(filter.not, event);
    return inner === 'pass' ? 'fail' : inner === 'fail' ? 'pass' : 'none';
  }
  return 'none';
}

function evaluateAll(filters: readonly unknown[], event: CloudEventV1<unknown>): FilterResult {
  let result: FilterResult = 'none';
  for (const child of filters) {
    result = and(result, evaluateSubscriptionsApiFilter(child, event));
    if (result === 'fail') return 'fail';
  }
  return result;
}

function evaluateAny(filters: readonly unknown[], event: CloudEventV1<unknown>): FilterResult {
  let result: FilterResult = 'none';
  for (const child of filters) {
    result = or(result, evaluateSubscriptionsApiFilter(child, event));
    if (result === 'pass') return 'pass';
  }
  return result;
}

/** Three-valued result of a Trigger's filtering, as Knative's broker filter computes it. */
export function evaluateTrigger(trigger: Pick<Trigger, 'filter' | 'filters'>, event: CloudEventV1<unknown>): FilterResult {
  if (Array.isArray(trigger.filters) && trigger.filters.length > 0) return evaluateAll(trigger.filters, event);
  if (trigger.filter !== undefined && trigger.filter !== null) {
    return evaluateAttributesFilter(isRecord(trigger.filter) ? (trigger.filter.attributes as Record<string, string>) : undefined, event);
  }
  return 'none';
}

/** True when the event is delivered to this Trigger (anything but an explicit filter failure). */
export function matchesTrigger(trigger: Trigger, event: CloudEventV1<unknown>): boolean {
  try {
    return evaluateTrigger(trigger, event) !== 'fail';
  } catch {
    return false;
  }
}

export interface FilterValidation {
  /** What Knative's webhook would reject. */
  errors: string[];
  /** Accepted by Knative but probably not what was meant. */
  warnings: string[];
}

/**
 * Checks a Trigger's filter/filters the way Knative's admission webhook does. `names`, when given,
 * receives every attribute name they compare (filter.attributes, and exact/prefix/suffix keys,
 * nested ones too), for checks of the caller's own.
 */
export function validateTriggerFilters(
  trigger: Pick<Trigger, 'filter' | 'filters'>,
  where = 'trigger',
  names: string[] = [],
): FilterValidation {
  const result: FilterValidation = { errors: [], warnings: [] };
  if (trigger.filter !== undefined && trigger.filter !== null) {
    if (!isRecord(trigger.filter)) {
      result.errors.push(`${where}.filter must be an object like { attributes: { type: "..." } }`);
    } else {
      for (const key of Object.keys(trigger.filter)) {
        if (key !== 'attributes') result.errors.push(`${where}.filter.${key} is not supported (only filter.attributes)`);
      }
      const attributes = trigger.filter.attributes;
      if (attributes !== undefined && attributes !== null) {
        if (!isRecord(attributes)) {
          result.errors.push(`${where}.filter.attributes must be a map of attribute name to value`);
        } else {
          for (const [name, value] of Object.entries(attributes)) {
            names.push(name);
            if (!ATTRIBUTE_NAME.test(name))
              result.errors.push(
                `${where}.filter.attributes[${JSON.stringify(name)}]: attribute name must start with a letter and contain only lowercase letters and digits`,
              );
            if (typeof value !== 'string') result.errors.push(`${where}.filter.attributes.${name} must be a string`);
          }
        }
      }
    }
  }
  if (trigger.filters !== undefined && trigger.filters !== null) {
    if (!Array.isArray(trigger.filters)) {
      result.errors.push(`${where}.filters must be a list of filter expressions`);
    } else {
      trigger.filters.forEach((f, i) => validateExpression(f, `${where}.filters[${i}]`, result, names));
      if (trigger.filters.length > 0 && trigger.filter !== undefined && trigger.filter !== null) {
        result.warnings.push(`${where} sets both filter and filters; Knative applies only filters`);
      }
    }
  }
  return result;
}

const DIALECTS = ['exact', 'prefix', 'suffix', 'all', 'any', 'not'] as const;

function validateExpression(filter: unknown, where: string, result: FilterValidation, names: string[]): void {
  if (!isRecord(filter)) {
    result.errors.push(`${where} must be an object with one of ${DIALECTS.join(', ')}`);
    return;
  }
  for (const key of Object.keys(filter)) {
    if (key === 'sql' || key === 'cesql') {
      result.errors.push(`${where}.${key}: CESQL filters are not supported by the local broker; use exact/prefix/suffix/all/any/not`);
    } else if (!(DIALECTS as readonly string[]).includes(key)) {
      result.errors.push(`${where}.${key} is not a filter dialect (expected one of ${DIALECTS.join(', ')})`);
    }
  }
  const present = DIALECTS.filter((d) => {
    const v = filter[d];
    if (d === 'not') return v !== undefined && v !== null;
    if (d === 'all' || d === 'any') return Array.isArray(v) ? v.length > 0 : v !== undefined && v !== null;
    return isRecord(v) ? Object.keys(v).length > 0 : v !== undefined && v !== null;
  });
  if (present.length > 1)
    result.errors.push(`${where}: multiple dialects found (${present.join(', ')}); a filter can have only one dialect set`);
  if (present.length === 0) result.warnings.push(`${where} has no dialect set; Knative skips it`);
  for (const d of ['exact', 'prefix', 'suffix'] as const) {
    const map = filter[d];
    if (map === undefined || map === null) continue;
    if (!isRecord(map)) {
      result.errors.push(`${where}.${d} must be a map of attribute name to value`);
      continue;
    }
    for (const [name, value] of Object.entries(map)) {
      names.push(name);
      if (!ATTRIBUTE_NAME.test(name))
        result.errors.push(
          `${where}.${d}[${JSON.stringify(name)}]: attribute name must start with a letter and contain only lowercase letters and digits`,
        );
      if (typeof value !== 'string') result.errors.push(`${where}.${d}.${name} must be a string`);
      else if (value === '')
        result.warnings.push(
          `${where}.${d}.${name} is empty; Knative treats the expression as invalid and skips it, so it matches every event`,
        );
    }
  }
  for (const d of ['all', 'any'] as const) {
    const list = filter[d];
    if (list === undefined || list === null) continue;
    if (!Array.isArray(list)) {
      result.errors.push(`${where}.${d} must be a list of filter expressions`);
      continue;
    }
    if (list.length === 0) result.warnings.push(`${where}.${d} is empty; Knative skips it`);
    list.forEach((child, i) => validateExpression(child, `${where}.${d}[${i}]`, result, names));
  }
  if (filter.not !== undefined && filter.not !== null) validateExpression(filter.not, `${where}.not`, result, names);
}
