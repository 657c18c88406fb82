// When a PingSource fires: the next time a cron schedule matches, in UTC. What a valid schedule
// is (5 fields, ranges, lists, steps, month and weekday names, @-descriptors, @every) is decided
// once, by cronProblem in functions/runtime/cron.ts (robfig/cron's standard parser, as Knative's
// PingSource uses); this module only evaluates. As in cron, when both day fields are restricted
// a day matching either one fires.
import { CRON_DESCRIPTORS, CRON_FIELDS, cronFieldValue, cronProblem } from '../../functions/runtime/index.ts';

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

export type Schedule = { sets: Set<number>[]; eitherDay: boolean } | { everyMs: number };

/** Parses a schedule or throws an Error saying what is wrong with it. */
export function parseSchedule(text: string): Schedule {
  const problem = cronProblem(text);
  if (problem) throw new Error(`schedule "${text}" ${problem}`);
  const zone = /^(?:CRON_TZ|TZ)=(\S+)\s+/.exec(text.trim());
  if (zone && zone[1] !== 'UTC' && zone[1] !== 'Etc/UTC')
    throw new Error(`schedule "${text}": the local plane evaluates schedules in UTC, not ${zone[1]}`);
  const body = text.trim().replace(/^(CRON_TZ|TZ)=\S+\s+/, '');
  if (body.startsWith('@every')) {
    const everyMs = [...body.matchAll(/(\d+)(ms|s|m|h)/g)].reduce((sum, [, n, unit]) => sum + Number(n) * UNIT_MS[unit], 0);
    return { everyMs: Math.max(everyMs, 1000) };
  }
  const parts = (CRON_DESCRIPTORS[body] ?? body).split(/\s+/);
  const sets = parts.map((part, index) => {
    const field = CRON_FIELDS[index];
    // cronProblem has checked every value.
    const value = (token: string) => cronFieldValue(token, field)!;
    const set = new Set<number>();
    for (const item of part.split(',')) {
      const [range, step] = item.split('/');
      const [from, to] =
        range === '*' || range === '?'
          ? [field.min, field.max]
          : range.includes('-')
            ? range.split('-').map(value)
            : [value(range), step ? field.max : value(range)];
      for (let v = from; v <= to; v += step ? Number(step) : 1) set.add(v);
    }
    return set;
  });
  return { sets, eitherDay: parts[2] !== '*' && parts[2] !== '?' && parts[4] !== '*' && parts[4] !== '?' };
}

/** The first time strictly after `after` that the schedule fires (UTC, whole minutes for cron). */
export function nextFire(schedule: Schedule, after: Date): Date {
  if ('everyMs' in schedule) return new Date(after.getTime() + schedule.everyMs);
  const [minutes, hours, days, months, weekdays] = schedule.sets;
  const at = new Date(after.getTime());
  at.setUTCSeconds(0, 0);
  at.setUTCMinutes(at.getUTCMinutes() + 1);
  // A little over four years of days (29 February); days and hours are skipped whole.
  for (let guard = 0; guard < 5 * 366 * 24 * 60; guard++) {
    const dayOk = schedule.eitherDay
      ? days.has(at.getUTCDate()) || weekdays.has(at.getUTCDay())
      : days.has(at.getUTCDate()) && weekdays.has(at.getUTCDay());
    if (!months.has(at.getUTCMonth() + 1) || !dayOk) {
      at.setUTCHours(0, 0, 0, 0);
      at.setUTCDate(at.getUTCDate() + 1);
    } else if (!hours.has(at.getUTCHours())) {
      at.setUTCMinutes(0, 0, 0);
      at.setUTCHours(at.getUTCHours() + 1);
    } else if (!minutes.has(at.getUTCMinutes())) {
      at.setUTCMinutes(at.getUTCMinutes() + 1);
    } else {
      return at;
    }
  }
  throw new Error('schedule never fires');
}
