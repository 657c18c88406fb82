// Log lines: JSON when piped, human-readable on a terminal, one `component` key per line.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { Broker } from '../../eventing/broker/index.ts';
import { logFormat, prettyLine } from '../../functions/runtime/host/index.ts';

describe('logs', () => {
  it('format: LOG_FORMAT wins, else pretty on a terminal and JSON when piped', () => {
    assert.equal(logFormat({}, true), 'pretty');
    assert.equal(logFormat({}, false), 'json');
    assert.equal(logFormat({ LOG_FORMAT: 'json' }, true), 'json');
    assert.equal(logFormat({ LOG_FORMAT: 'pretty' }, false), 'pretty');
  });

  it('a pretty line: time, level, component, message, then the fields', () => {
    const line = prettyLine(
      JSON.stringify({
        level: 40,
        time: '2026-11-23T04:57:20.876Z',
        component: 'broker',
        msg: 'event dead-lettered',
        status: 400,
        reason: 'not retryable',
        trigger: 'ic',
      }),
    );
    assert.equal(line, '04:57:20.876 WARN  broker     event dead-lettered  status=400 reason="not retryable" trigger=ic');
    assert.equal(prettyLine('not json'), 'not json');
  });

  it('one component key per line, even when the broker gets a logger that names it already', () => {
    const lines: string[] = [];
    const root = pino({ level: 'info' }, { write: (l: string) => void lines.push(l) });
    const broker = new Broker({
      deadLetterFile: '/tmp/never-written.jsonl',
      log: root.child({ component: 'broker' }),
      triggers: [{ name: 't', subscriber: 'http://127.0.0.1:1/' }],
    });
    void broker.close();
    assert.ok(lines.length > 0);
    for (const line of lines) assert.equal(line.match(/"component":/g)?.length, 1, line);
    const own: string[] = [];
    const bare = new Broker({
      deadLetterFile: '/tmp/never-written.jsonl',
      log: pino({ level: 'info' }, { write: (l: string) => void own.push(l) }),
      triggers: [{ name: 't', subscriber: 'http://127.0.0.1:1/' }],
    });
    void bare.close();
    assert.match(own[0] ?? '', /"component":"broker"/);
  });
  it('pretty lines logged just before process.exit() are written (the summary a Ctrl-C of opfn dev prints)', () => {
    const log = new URL('../../functions/runtime/host/log.ts', import.meta.url).pathname;
    const program = `import { createLogger } from ${JSON.stringify(log)}; const log = createLogger('t', 'info', 'pretty'); for (let i = 0; i < 20; i++) log.info('line ' + i); process.exit(0);`;
    const { stdout, status } = spawnSync(process.execPath, ['--input-type=module', '-e', program], { encoding: 'utf8' });
    assert.equal(status, 0);
    assert.equal(stdout.trim().split('\n').length, 20, stdout);
    assert.match(stdout, /INFO  t +line 19$/m);
  });
});
