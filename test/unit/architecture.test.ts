// The rules of docs/architecture.md, checked on every relative import of the project's
// TypeScript files (static imports and re-exports, and `import('…')` of a literal):
//   faces   a folder with a face is entered from outside only through its index.ts; a test may
//           import the one module it tests
//   arrows  a part imports only the parts its row of ARROWS names
// To change a rule, change the tables below and docs/architecture.md together.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Folders whose index.ts is their face. */
const FACES = [
  'functions/runtime',
  'functions/runtime/host',
  'functions/composite/metacontroller',
  'eventing/activator',
  'eventing/broker',
  'eventing/source',
  'eventing/knative',
  'eventing/manifests',
  'build',
  'processes',
  'cluster',
  'conformance',
];

/** The parts, by folder or file; a file belongs to the first entry that holds it. */
const PARTS = [
  ['host', 'functions/runtime/host/'],
  ['runtime', 'functions/runtime/'],
  ['metacontroller', 'functions/composite/metacontroller/'],
  ['registry', 'functions/index.ts'],
  ['function program', 'functions/main.ts'],
  ['function', 'functions/'], // functions/<name>/: each function is a part of its own
  ['eventing', 'eventing/'],
  ['build', 'build/'],
  ['bin', 'bin/'],
  ['conformance', 'conformance/'],
  ['cluster', 'cluster/'],
  ['processes', 'processes/'],
  ['examples', 'examples/'],
  ['bench', 'bench/'],
  ['test', 'test/'],
] as const;

type Part = (typeof PARTS)[number][0];

/** 'own subfolders': folders inside the part's own folder that are parts of their own (composite's metacontroller/). */
type Arrow = Part | 'own subfolders';

const BELOW_BIN: Part[] = [
  'conformance',
  'build',
  'eventing',
  'registry',
  'function program',
  'function',
  'metacontroller',
  'runtime',
  'host',
  'cluster',
  'processes',
];

/** What each part may import besides itself: parts below it in docs/architecture.md's drawing. */
const ARROWS: Record<Part, readonly Arrow[]> = {
  runtime: [],
  host: ['runtime'],
  function: ['runtime', 'own subfolders'],
  metacontroller: ['runtime'],
  registry: ['function', 'runtime'],
  'function program': ['registry', 'runtime', 'host'],
  eventing: ['registry', 'runtime', 'host', 'cluster', 'processes'],
  build: ['registry', 'function program', 'runtime', 'host', 'processes'],
  bin: BELOW_BIN,
  // The contract kit plays ApiServerSource and PingSource with the plane's own event builders.
  conformance: ['eventing', 'runtime'],
  cluster: ['processes'],
  processes: [],
  // The seed's hook serves Metacontroller's hook contract with the core's helpers.
  examples: ['runtime', 'metacontroller'],
  // Benchmarks run against the tests' control plane and helpers (test/support/).
  bench: [...BELOW_BIN, 'bin', 'examples', 'test'],
  test: [...BELOW_BIN, 'bin', 'examples', 'bench', 'test'],
};

interface Import {
  file: string;
  target: string;
}

/** A file's part and its own folder (for a function, functions/<name>/). */
function partOf(file: string): { part: Part | undefined; home: string } {
  const entry = PARTS.find(([, place]) => (place.endsWith('/') ? file.startsWith(place) : file === place));
  if (!entry) return { part: undefined, home: dirname(file) + '/' };
  const [part, place] = entry;
  return { part, home: part === 'function' ? file.split('/').slice(0, 2).join('/') + '/' : place };
}

/** The relative imports of one file, resolved against the repository's root. */
function importsOf(file: string): Import[] {
  const source = readFileSync(join(ROOT, file), 'utf8');
  const specifiers = [
    ...source.matchAll(/(?:^|;)\s*(?:import|export)\b(?:[^'"`;]*?\bfrom)?\s*['"]([^'"]+)['"]/gm),
    ...source.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g),
  ].map((match) => match[1]);
  return specifiers
    .filter((specifier) => specifier.startsWith('.'))
    .map((specifier) => ({ file, target: posix.normalize(posix.join(posix.dirname(file), specifier)) }));
}

/** The face a target lies behind, for an importer outside its folder; undefined when none. */
function faceCrossed({ file, target }: Import): string | undefined {
  if (file.startsWith('test/')) return undefined;
  const face = FACES.filter((folder) => target.startsWith(`${folder}/`)).sort((a, b) => b.length - a.length)[0];
  if (!face || file.startsWith(`${face}/`) || target === `${face}/index.ts`) return undefined;
  return `${face}/ is entered only through ${face}/index.ts`;
}

/** Why an import runs against the arrows; undefined when it follows one. */
function arrowBroken({ file, target }: Import): string | undefined {
  const from = partOf(file);
  const to = partOf(target);
  if (!from.part) return `${file} belongs to no part of docs/architecture.md`;
  if (!to.part) return `${target} belongs to no part of docs/architecture.md`;
  if (from.part === to.part && (from.part !== 'function' || from.home === to.home)) return undefined;
  const allowed = ARROWS[from.part];
  if (allowed.includes(to.part) || (allowed.includes('own subfolders') && target.startsWith(from.home))) return undefined;
  return `${from.part} may not import ${to.part === 'function' ? `another function (${to.home})` : to.part}`;
}

const files = execFileSync('git', ['ls-files', '*.ts'], { cwd: ROOT, encoding: 'utf8' }).split('\n').filter(Boolean);
const imports = files.flatMap(importsOf);

function report(rule: (entry: Import) => string | undefined): string[] {
  return imports.flatMap((entry) => {
    const broken = rule(entry);
    return broken ? [`${entry.file} → ${entry.target}: ${broken}`] : [];
  });
}

test('the imports are found', () => {
  assert.ok(imports.length > files.length, `only ${imports.length} relative imports in ${files.length} files`);
});

test('a folder with a face is entered only through its index.ts', () => {
  const violations = report(faceCrossed);
  assert.equal(violations.length, 0, `${violations.length} imports past a face:\n${violations.join('\n')}`);
});

test('imports follow the arrows of docs/architecture.md', () => {
  const violations = report(arrowBroken);
  assert.equal(violations.length, 0, `${violations.length} imports against the arrows:\n${violations.join('\n')}`);
});
