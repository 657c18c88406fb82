// The pieces of the dev loop that need no cluster: which state folder `opfn` uses from a folder
// of the project, which functions a changed file concerns, and a saved source reaching a running
// function (a real file watch, real processes behind the activator).
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { functionsOfChange, reloader, watchFunctionSources } from '../../bin/dev-loop.ts';
import { Activator } from '../../eventing/activator/index.ts';
import { findStateDir } from '../../eventing/state-files.ts';
import { tempDir } from '../support/temp.ts';

test('the state folder is found from any folder of the project: the nearest .opfn, else the project root, else the folder itself', () => {
  const root = tempDir('opfn-find-');
  const project = join(root, 'project');
  mkdirSync(join(project, 'functions', 'greeting', 'src'), { recursive: true });
  writeFileSync(join(project, 'package.json'), '{}');
  const deep = join(project, 'functions', 'greeting', 'src');
  assert.equal(findStateDir(deep, {}), join(project, '.opfn'), 'the project root, before any plane ran');
  mkdirSync(join(project, '.opfn'));
  assert.equal(findStateDir(deep, {}), join(project, '.opfn'));
  assert.equal(findStateDir(project, {}), join(project, '.opfn'));
  assert.equal(findStateDir(deep, { OPFN_STATE_DIR: 'elsewhere' }), join(process.cwd(), 'elsewhere'), '$OPFN_STATE_DIR wins');
  const outside = join(root, 'loose');
  mkdirSync(outside);
  // No package.json above `root` in a temporary folder: the folder itself.
  assert.equal(findStateDir(outside, {}), join(outside, '.opfn'));
});

test("a change in a function's folder concerns that function; anywhere else (the runtime), every function", () => {
  const folders = { a: '/p/functions/a', b: '/p/functions/b' };
  assert.deepEqual(functionsOfChange('/p/functions/a/reconcile.ts', folders), ['a']);
  assert.deepEqual(functionsOfChange('/p/functions/b/deep/x.ts', folders), ['b']);
  assert.deepEqual(functionsOfChange('/p/functions/ab.ts', folders), ['a', 'b'], 'a prefix of the name is not the folder');
  assert.deepEqual(functionsOfChange('/p/functions/runtime/kube/client.ts', folders), ['a', 'b']);
});

test('a saved function source rolls its instances: the next request is served by the new code', async (t) => {
  const folder = tempDir('opfn-watch-');
  const source = join(folder, 'fn.ts');
  const program = (version: string) =>
    `import http from 'node:http';\n` +
    `http.createServer((req, res) => res.end(JSON.stringify({ version: '${version}', pid: process.pid }))).listen(Number(process.env.PORT), '127.0.0.1');\n` +
    `process.on('SIGTERM', () => process.exit(0));\n`;
  writeFileSync(source, program('one'));
  const activator = new Activator({
    functions: [
      { name: 'fn', command: process.execPath, args: [source], scaling: { minScale: 1, maxScale: 1, target: 10, containerConcurrency: 0 } },
    ],
    log: pino({ level: 'silent' }),
    childOutput: 'log',
  });
  t.after(() => activator.close());
  const url = `${await activator.listen()}/fn`;
  await activator.start();
  const answer = async () => (await (await fetch(url)).json()) as { version: string; pid: number };
  const first = await answer();
  assert.equal(first.version, 'one');
  const said: string[] = [];
  const { reload } = reloader({ activator }, undefined, (line) => said.push(line));
  const stop = watchFunctionSources(folder, { fn: folder }, (names) => void reload(names, 'saved'), 50);
  t.after(stop);
  writeFileSync(source, program('two'));
  const deadline = Date.now() + 20_000;
  let latest = first;
  while (latest.version !== 'two' && Date.now() < deadline) {
    await sleep(100);
    latest = await answer();
  }
  assert.equal(latest.version, 'two', `the new code answers (${said.join('; ')})`);
  assert.notEqual(latest.pid, first.pid, 'from a new instance');
  assert.match(said.join('\n'), /Reloaded fn \(saved\).*1 running instance\(s\) replaced/);
});
