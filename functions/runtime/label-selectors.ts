// Label selectors as the API server reads them: validated, matched locally, and written back
// as the labelSelector query parameter.
//
// Upstream: k8s.io/apimachinery pkg/apis/meta/v1/helpers.go (LabelSelectorAsSelector) and
// pkg/labels/selector.go (Requirement.Matches).
import { quote } from './bounded-messages.ts';
import type { LabelSelector } from './kinds.ts';

/** A validated selector: match with `matches`, send to the API server with `toQuery`. */
export interface Selector {
  matches(labels: Record<string, string> | undefined): boolean;
  /** The labelSelector query parameter ("a=b,c in (x,y),!d"); "" selects everything. */
  toQuery(): string;
}

export type SelectorResult = { ok: true; selector: Selector } | { ok: false; reason: string };

interface Requirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
  values: string[];
}

/** LabelSelectorAsSelector: matchLabels become `key In (value)`; every requirement must hold. */
export function compileSelector(selector: LabelSelector): SelectorResult {
  const requirements: Requirement[] = [];
  if (
    selector.matchLabels !== undefined &&
    (typeof selector.matchLabels !== 'object' || selector.matchLabels === null || Array.isArray(selector.matchLabels))
  ) {
    return { ok: false, reason: 'matchLabels must be a map of strings' };
  }
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    if (typeof value !== 'string') return { ok: false, reason: `matchLabels[${key}] must be a string` };
    requirements.push({ key, operator: 'In', values: [value] });
  }
  if (selector.matchExpressions !== undefined && !Array.isArray(selector.matchExpressions)) {
    return { ok: false, reason: 'matchExpressions must be a list' };
  }
  for (const expression of selector.matchExpressions ?? []) {
    const values = expression?.values ?? [];
    if (!Array.isArray(values) || values.some((value) => typeof value !== 'string'))
      return { ok: false, reason: `values of ${quote(expression?.key)} must be strings` };
    switch (expression?.operator) {
      case 'In':
      case 'NotIn':
        if (values.length === 0) return { ok: false, reason: `for '${expression.operator}' operator, values set can't be empty` };
        break;
      case 'Exists':
      case 'DoesNotExist':
        if (values.length > 0) return { ok: false, reason: `values set must be empty for exists and does not exist` };
        break;
      default:
        return { ok: false, reason: `${quote(String(expression?.operator))} is not a valid label selector operator` };
    }
    if (typeof expression.key !== 'string' || expression.key === '')
      return { ok: false, reason: 'a label selector key must be a non-empty string' };
    requirements.push({ key: expression.key, operator: expression.operator, values: [...values] });
  }
  requirements.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  return { ok: true, selector: selectorOf(requirements) };
}

function selectorOf(requirements: Requirement[]): Selector {
  return {
    matches(labels) {
      const present = labels ?? {};
      return requirements.every(({ key, operator, values }) => {
        const has = Object.hasOwn(present, key);
        switch (operator) {
          case 'In':
            return has && values.includes(present[key]!);
          case 'NotIn':
            return !has || !values.includes(present[key]!);
          case 'Exists':
            return has;
          case 'DoesNotExist':
            return !has;
        }
      });
    },
    toQuery() {
      return requirements
        .map(({ key, operator, values }) => {
          switch (operator) {
            case 'In':
              return values.length === 1 ? `${key}=${values[0]}` : `${key} in (${[...values].sort().join(',')})`;
            case 'NotIn':
              return `${key} notin (${[...values].sort().join(',')})`;
            case 'Exists':
              return key;
            case 'DoesNotExist':
              return `!${key}`;
          }
        })
        .join(',');
    },
  };
}

/** The empty selector: selects every object. */
export const SELECTS_EVERYTHING: Selector = selectorOf([]);
