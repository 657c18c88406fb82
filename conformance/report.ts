// The kit's table: one line per check, its result, and the reason (for a failure, what was
// wrong; for a pass, what was seen), cut to the terminal's width by the reader, never here.
import type { CheckRow } from './checks.ts';

const MARK: Record<CheckRow['result'], string> = { pass: 'PASS', fail: 'FAIL', 'not checked': '----' };

export function formatTable(rows: CheckRow[]): string {
  const width = Math.max(...rows.map((row) => row.check.length));
  const lines = rows.map((row) => `${MARK[row.result]}  ${row.check.padEnd(width)}${row.reason ? `  ${row.reason}` : ''}`.trimEnd());
  const failed = rows.filter((row) => row.result === 'fail').length;
  const skipped = rows.filter((row) => row.result === 'not checked').length;
  lines.push(
    '',
    `${rows.length - failed - skipped} passed, ${failed} failed${skipped ? `, ${skipped} not checked` : ''}: ${failed ? 'does NOT conform' : 'conforms'}.`,
  );
  return lines.join('\n');
}
