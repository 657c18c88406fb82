// Validates the five-field cron expressions of a resync schedule as Knative's PingSource reads
// them (robfig/cron's standard parser: minute hour day-of-month month day-of-week, with
// "*", ranges "a-b", steps "/n", lists "a,b", month and weekday names, and the @-descriptors).
// The schedule is acted on by the PingSource (or the local plane); here it is only checked, so
// a typo fails at definition instead of in the cluster.

export interface CronField {
  name: string;
  min: number;
  max: number;
  names?: string[];
}

/** The five fields, in order (eventing/knative/cron.ts evaluates them with these bounds and names). */
export const CRON_FIELDS: readonly CronField[] = [
  { name: 'minute', min: 0, max: 59 },
  { name: 'hour', min: 0, max: 23 },
  { name: 'day of month', min: 1, max: 31 },
  { name: 'month', min: 1, max: 12, names: ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'] },
  { name: 'day of week', min: 0, max: 6, names: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] },
];
/** The @-descriptors and the five fields each stands for. */
export const CRON_DESCRIPTORS: Readonly<Record<string, string>> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
};

/** Why `expression` is not a valid schedule, or undefined when it is. */
export function cronProblem(expression: string): string | undefined {
  const text = expression.trim().replace(/^(CRON_TZ|TZ)=\S+\s+/, '');
  if (Object.hasOwn(CRON_DESCRIPTORS, text) || /^@every\s+\d+(ms|s|m|h)(\d+(ms|s|m|h))*$/.test(text)) return undefined;
  const parts = text.split(/\s+/);
  if (parts.length !== 5)
    return `is not a cron expression: expected 5 fields (minute hour day-of-month month day-of-week), got ${parts.length}`;
  for (const [index, part] of parts.entries()) {
    const field = CRON_FIELDS[index];
    for (const item of part.split(',')) {
      const problem = itemProblem(item, field);
      if (problem) return `has an invalid ${field.name} field "${part}": ${problem}`;
    }
  }
  return undefined;
}

function itemProblem(item: string, field: CronField): string | undefined {
  const [range, step, extra] = item.split('/');
  if (extra !== undefined) return 'more than one "/"';
  if (step !== undefined && !/^[1-9]\d*$/.test(step)) return `step "${step}" is not a positive number`;
  if (range === '*' || range === '?') return undefined;
  const bounds = range.split('-');
  if (bounds.length > 2) return `"${range}" is not a value or range`;
  const values = bounds.map((bound) => cronFieldValue(bound, field));
  if (values.some((v) => v === undefined)) return `"${range}" is outside ${field.min}-${field.max}`;
  if (values.length === 2 && values[0]! > values[1]!) return `range "${range}" runs backwards`;
  return undefined;
}

/** The number a field's value stands for (a name counts from the field's minimum), or undefined when it is out of range. */
export function cronFieldValue(text: string, field: CronField): number | undefined {
  const named = field.names?.indexOf(text.toLowerCase()) ?? -1;
  if (named >= 0) return named + field.min;
  if (!/^\d+$/.test(text)) return undefined;
  const number = Number(text);
  // No 7 for Sunday: robfig/cron bounds the day of week to 0-6 and refuses 7.
  return number >= field.min && number <= field.max ? number : undefined;
}
