// The functions a command works on (bin/function-set.ts over the registry's loadFunctionSet):
// this project's own, or a user's folder or module, picked with --only, with the CRDs beside them.
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { commandFunctions } from '../../bin/function-set.ts';
import { functionNames } from '../../functions/index.ts';
import { tempDir } from '../support/temp.ts';

const FACE = pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'functions', 'runtime', 'index.ts')).href;

/** A module declaring functions of these names, each reconciling its own kind of example.com. */
const declaring = (...names: string[]) =>
  `import { defineFunction } from '${FACE}';
const declare = (name) => defineFunction({ name, description: name, reconciles: { group: 'example.com', version: 'v1', kind: name, plural: name + 's', namespaced: true }, rbac: [], reconcile: async () => {} });
export default ${names.length === 1 ? `declare('${names[0]}')` : `[${names.map((name) => `declare('${name}')`).join(', ')}]`};
`;

const crd = (plural: string) =>
  `apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: ${plural}.example.com\nspec:\n  group: example.com\n  names: { plural: ${plural} }\n`;

/** Writes `files` (path → text) under a new folder and returns it. */
function project(files: Record<string, string>): string {
  const root = tempDir('opfn-function-set-');
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

describe("this project's own functions", () => {
  test('all of them by default, with the CRDs of crds/; --only picks some', async () => {
    const all = await commandFunctions({});
    assert.deepEqual(
      all.declarations.map((declaration) => declaration.name),
      functionNames,
    );
    assert.ok(all.crds.length >= functionNames.length - 1 && all.from === undefined);
    const one = await commandFunctions({ only: ['copyrator'] });
    assert.deepEqual(
      one.declarations.map((declaration) => declaration.name),
      ['copyrator'],
    );
  });

  test('an unknown name is refused with the known ones', async () => {
    await assert.rejects(commandFunctions({ only: ['copyratr'] }), /unknown function "copyratr"; known: immortal-container, copyrator/);
  });
});

describe('a folder of functions', () => {
  const root = project({
    'functions/greeting/index.ts': declaring('greeting'),
    'functions/greeting/crd.yaml': crd('greetings'),
    'functions/greeting/example.yaml': 'apiVersion: example.com/v1\nkind: greeting\nmetadata: { name: x }\n',
    'functions/farewell/index.js': declaring('farewell'),
    'functions/shared/helpers.ts': 'export const helper = 1;\n',
    'crds/farewells.yaml': crd('farewells'),
  });

  test('each subfolder with an index module is a function; its CRDs are beside it or in crds/ next to the folder', async () => {
    const set = await commandFunctions({ functions: join(root, 'functions') });
    assert.deepEqual(
      set.declarations.map((declaration) => declaration.name),
      ['farewell', 'greeting'],
    );
    assert.equal(set.functions[1].module, join(root, 'functions', 'greeting', 'index.ts'));
    assert.deepEqual(set.crds.map((object) => object.metadata.name).sort(), ['farewells.example.com', 'greetings.example.com']);
  });

  test('--only picks among them, and names one it does not hold', async () => {
    const set = await commandFunctions({ functions: join(root, 'functions'), only: ['greeting'] });
    assert.deepEqual(
      set.declarations.map((declaration) => declaration.name),
      ['greeting'],
    );
    await assert.rejects(
      commandFunctions({ functions: join(root, 'functions'), only: ['copyrator'] }),
      /unknown function "copyrator" in .*functions; known: farewell, greeting/,
    );
  });

  test('a folder without functions, or a missing path, is refused', async () => {
    await assert.rejects(commandFunctions({ functions: join(root, 'crds') }), /no function in .*crds: each function is a folder there/);
    await assert.rejects(commandFunctions({ functions: join(root, 'nowhere') }), /--functions .*nowhere: no folder or module/);
  });
});

describe('one module of functions', () => {
  test('its default export may be an array of declarations', async () => {
    const root = project({ 'operators.ts': declaring('one', 'two') });
    const set = await commandFunctions({ functions: join(root, 'operators.ts') });
    assert.deepEqual(
      set.declarations.map((declaration) => declaration.name),
      ['one', 'two'],
    );
  });

  test('a module without a declaration, or two functions of one name, are refused', async () => {
    const root = project({ 'nothing.ts': 'export default { name: "x" };\n', 'twice.ts': declaring('same', 'same') });
    await assert.rejects(commandFunctions({ functions: join(root, 'nothing.ts') }), /must default-export a function declaration/);
    await assert.rejects(commandFunctions({ functions: join(root, 'twice.ts') }), /two functions are named "same"/);
  });
});

test('names given to --functions, as it once took, point to --only', async () => {
  await assert.rejects(
    commandFunctions({ functions: 'immortal-container,copyrator' }),
    /--functions takes a folder or a module of functions, and there is no "immortal-container,copyrator" here; to choose functions by name, use --only immortal-container,copyrator/,
  );
});
