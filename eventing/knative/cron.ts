// PingSource schedules: standard 5-field cron (minute hour day-of-month month day-of-week; `*`,
// `a`, `a-b`, lists, `/step`; names not supported) and the descriptors @yearly @monthly @weekly
// @daily @hourly, as Knative's PingSource accepts (robfig/cron's standard parser). As in cron,
// when both day fields are restricted a day matching either one fires. Evaluated in UTC.

const FIELDS = [
  { name: 'minute', min: 0, max: 59 },
  { name: 'hour', min: 0, max: 23 },
  { name: 'day of month', min: 1, max: 31 },
  { name: 'month', min: 1, max: 12 },
  { name: 'day of week', min: 0, max: 7 },
] as const;

const DESCRIPTORS: Record<string, string> = { '@yearly': '0 0 1 1 *', '@annually': '0 0 1 1 *', '@monthly': '0 0 1 * *', '@weekly': '0 0 * * 0', '@daily': '0 0 * * *', '@midnight': '0 0 * * *', '@hourly': '0 * * * *' };

export interface Schedule {
  sets: Set<number>[];
  /** Day-of-month and day-of-week were both restricted (either may match). */
  eitherDay: boolean;
}

/** Parses a schedule or throws an Error naming the field that is wrong. */
export function parseSchedule(text: string): Schedule {
  const expanded = DESCRIPTORS[text.trim()] ?? text.trim();
  const parts = expanded.split(/\s+/);
  if (parts.length !== 5) throw new Error(`schedule "${text}": expected 5 fields (minute hour day-of-month month day-of-week) or @hourly/@daily/…`);
  const sets = parts.map((part, index) => {
    const { name, min, max } = FIELDS[index];
    const set = new Set<number>();
    for (const item of part.split(',')) {
      const match = /^(\*|(\d+)(?:-(\d+))?)(?:\/(\d+))?$/.exec(item);
      if (!match) throw new Error(`schedule "${text}": ${name} "${item}" is not a number, range, list or step`);
      const from = match[1] === '*' ? min : Number(match[2]);
      const to = match[1] === '*' ? max : match[3] !== undefined ? Number(match[3]) : match[4] !== undefined ? max : from;
      const step = match[4] !== undefined ? Number(match[4]) : 1;
      if (from < min || to > max || from > to || step < 1) throw new Error(`schedule "${text}": ${name} "${item}" is outside ${min}-${max}`);
      for (let value = from; value <= to; value += step) set.add(index === 4 && value === 7 ? 0 : value);
    }
    return set;
  });
  return { sets, eitherDay: parts[2] !== '*' && parts[4] !== '*' };
}

/** The first minute strictly after `after` that the schedule fires at (UTC). */
export function nextFire(schedule: Schedule, after: Date): Date {
  const [minutes, hours, days, months, weekdays] = schedule.sets;
  const at = new Date(after.getTime());
  at.setUTCSeconds(0, 0);
  at.setUTCMinutes(at.getUTCMinutes() + 1);
  // At most a little over four years of minutes (29 February); days and hours are skipped whole.
  for (let guard = 0; guard < 5 * 366 * 24 * 60; guard++) {
    const dayOk = schedule.eitherDay ? days.has(at.getUTCDate()) || weekdays.has(at.getUTCDay()) : days.has(at.getUTCDate()) && weekdays.has(at.getUTCDay());
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
