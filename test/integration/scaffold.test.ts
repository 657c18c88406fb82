// `opfn new` in a scratch copy of this repository (its own functions/, crds/ and test/unit|integration,
// everything else linked), removed however the test ends: the function it writes typechecks, is
// formatted as Prettier would, and its unit and integration tests pass as generated, the
// integration test against a real control plane. Refusals (an existing name, invalid kinds) exit
// with 2 and one line, and write nothing. Outside this repository the code imports the package.
// `opfn new` runs as a command where its exit matters, else in this process.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, cpSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { check as prettierCheck, resolveConfig } from 'prettier';
import { type NewFunctionOptions, Refusal, writeNewFunction } from '../../bin/new.ts';
import { tempFolder } from '../support/temp.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const OPFN = join(ROOT, 'bin', 'opfn.ts');
/** Without the outer test runner's marker, so that a nested `node --test` reports as a runner of its own. */
const { NODE_TEST_CONTEXT: _marker, ...env } = process.env;

const run = async (command: string, args: string[], cwd: string) => {
  try {
    const { stdout, stderr } = await promisify(execFile)(command, args, { cwd, env, timeout: 180_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string };
    return { code: failed.code ?? -1, stdout: failed.stdout ?? '', stderr: failed.stderr ?? '' };
  }
};
const opfnNew = (cwd: string, ...args: string[]) => run(process.execPath, [OPFN, 'new', ...args], cwd);

/**
 * A copy of this repository in which `opfn new` may write: its own functions/index.ts, crds/,
 * test/unit/, test/integration/ and tsconfig.json, the rest linked. Whatever the test writes must
 * be one of those: a write to a linked path would change this repository.
 */
function scratchProject(): string {
  const { dir } = tempFolder('opfn-new-');
  const link = (path: string) => symlinkSync(join(ROOT, path), join(dir, path));
  for (const entry of readdirSync(ROOT)) if (!['functions', 'crds', 'test', 'tsconfig.json', '.git'].includes(entry)) link(entry);
  mkdirSync(join(dir, 'functions'));
  for (const entry of readdirSync(join(ROOT, 'functions')))
    entry === 'index.ts' ? copyFileSync(join(ROOT, 'functions', entry), join(dir, 'functions', entry)) : link(join('functions', entry));
  cpSync(join(ROOT, 'crds'), join(dir, 'crds'), { recursive: true });
  mkdirSync(join(dir, 'test', 'unit'), { recursive: true });
  mkdirSync(join(dir, 'test', 'integration'));
  for (const entry of readdirSync(join(ROOT, 'test'))) if (!['unit', 'integration'].includes(entry)) link(join('test', entry));
  return dir;
}

/** Every file and link under `dir` with its size, links not followed: what a refusal must leave as it was. */
function snapshot(dir: string, folder = dir): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name);
    return entry.isDirectory() ? [`${relative(dir, path)}/`, ...snapshot(dir, path)] : [`${relative(dir, path)} ${statSync(path).size}`];
  });
}

describe('inside this repository', () => {
  let project: string;
  const generated = [
    'functions/widget/index.ts',
    'functions/widget/desired.ts',
    'functions/widget/reconcile.ts',
    'test/unit/widget.test.ts',
    'test/integration/widget.test.ts',
  ];

  before(() => {
    project = scratchProject();
  });

  test('writes a function that is registered, typechecks and is formatted', async () => {
    await writeNewFunction(project, 'widget', { kind: 'Widget.example.com/v1alpha1' });
    for (const file of [...generated, 'crds/widget.yaml', 'crds/examples/widget.yaml'])
      assert.ok(statSync(join(project, file)).isFile(), `${file} is written`);
    assert.match(readFileSync(join(project, 'functions/index.ts'), 'utf8'), /^ {2}widget: '\.\/widget\/index\.ts',$/m);
    assert.match(readFileSync(join(project, 'functions/widget/index.ts'), 'utf8'), /from '\.\.\/runtime\/index\.ts'/);

    for (const file of [...generated, 'functions/index.ts']) {
      const filepath = join(project, file);
      const options = { ...(await resolveConfig(join(ROOT, file))), filepath };
      assert.ok(await prettierCheck(readFileSync(filepath, 'utf8'), options), `${file} is formatted as Prettier would`);
    }
    writeFileSync(join(project, 'tsconfig.json'), JSON.stringify({ extends: join(ROOT, 'tsconfig.json'), include: generated }));
    const typecheck = await run(join(ROOT, 'node_modules', '.bin', 'tsc'), ['--noEmit', '-p', '.'], project);
    assert.equal(typecheck.code, 0, typecheck.stdout + typecheck.stderr);
  });

  test('its unit and integration tests pass as generated, the latter against a real control plane', async () => {
    const tests = await run(process.execPath, ['--test', 'test/unit/widget.test.ts', 'test/integration/widget.test.ts'], project);
    assert.equal(tests.code, 0, tests.stdout + tests.stderr);
    assert.match(tests.stdout, /^ℹ pass 5$/m);
    assert.match(tests.stdout, /^ℹ fail 0$/m);
  });

  test('refuses an existing name, an invalid name or kind, and a kind already defined, writing nothing', async () => {
    const before = snapshot(project);
    const refused = await opfnNew(project, 'widget', '--kind', 'Gadget.example.com/v1');
    assert.equal(refused.code, 2, refused.stderr);
    assert.equal(refused.stderr, 'opfn new: functions/widget already exists: choose another name\n');
    const refusals: [string, NewFunctionOptions, RegExp][] = [
      ['copyrator', { kind: 'Gadget.example.com/v1' }, /^functions\/copyrator already exists/],
      ['gadget', { kind: 'Widget.example.com/v1alpha1' }, /^crds\/widget\.yaml already exists$/],
      ['gadget', { kind: 'Gizmo.example.com/v1', plural: 'widgets' }, /^crds\/ already defines widgets\.example\.com$/],
      ['Gadget', { kind: 'Gadget.example.com/v1' }, /^invalid function name "Gadget"/],
      ['gadget', {}, /^--kind <Kind>\.<group>\/<version> is required/],
      ['gadget', { kind: 'gadget.example.com/v1' }, /^invalid kind "gadget"/],
      ['gadget', { kind: 'Gadget.example/v1' }, /^invalid group "example"/],
      ['gadget', { kind: 'Gadget.example.com/1' }, /^invalid version "1"/],
      ['gadget', { kind: 'Gadget.example.com' }, /^invalid kind "Gadget\.example\.com"/],
      ['gadget', { kind: 'ConfigMap.example.com/v1' }, /the generated code already uses the name ConfigMap;/],
      ['gadget', { kind: 'Date.example.com/v1' }, /the generated code already uses the name Date;/],
    ];
    for (const [name, options, reason] of refusals)
      await assert.rejects(writeNewFunction(project, name, options), (error) => error instanceof Refusal && reason.test(error.message));
    assert.deepEqual(snapshot(project), before, 'nothing is written');
  });
});

test('outside this repository the function imports the operator-functions package, and nothing is registered', async () => {
  const { dir } = tempFolder('opfn-new-package-');
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'my-operators', type: 'module' }));
  await writeNewFunction(dir, 'gateway-policy', { kind: 'GatewayPolicy.example.com/v1' });
  assert.match(readFileSync(join(dir, 'functions/gateway-policy/reconcile.ts'), 'utf8'), /from 'operator-functions';/);
  assert.match(readFileSync(join(dir, 'test/integration/gateway-policy.test.ts'), 'utf8'), /from 'operator-functions\/testing';/);
  assert.deepEqual(readdirSync(join(dir, 'functions')), ['gateway-policy']);
  // The plural Knative's ApiServerSource guesses from the kind, so that it watches the kind.
  assert.match(readFileSync(join(dir, 'crds/gatewaypolicy.yaml'), 'utf8'), /^ {4}plural: gatewaypolicies$/m);
});
