// `opfn new <name> --kind <Kind>.<group>/<version>`: writes a working function into the current
// project from bin/templates/, a tree of files whose paths and contents hold __placeholders__:
// the function's folder (declaration, pure desired state, reconcile), its CRD and an example
// object, a unit test and an integration test. Everything is checked before anything is written;
// a refusal is one line and exit code 2, and leaves the project as it was.
//
// Inside this repository (a project with functions/runtime/index.ts) the code imports the runtime
// by relative path and the function joins the registry (functions/index.ts), so `npm start` runs
// it. In any other project it imports the `operator-functions` package.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, posix, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { readManifests } from '../eventing/crds.ts';
import { guessedResource } from '../functions/runtime/index.ts';
import { say } from './terminal.ts';

const TEMPLATES = join(dirname(fileURLToPath(import.meta.url)), 'templates');
const TEMPLATE_SUFFIX = '.tmpl';

/** Where the generated code finds the runtime's face and the tests' helpers, in this repository or as a package. */
const RUNTIME_FACE = 'functions/runtime/index.ts';
const TESTING_FACE = 'test/support/function-tests.ts';
const PACKAGE = 'operator-functions';
const REGISTRY = 'functions/index.ts';

/** A reason `opfn new` will not write: printed as one line, exit code 2. */
export class Refusal extends Error {}

export interface NewKind {
  kind: string;
  group: string;
  version: string;
  plural: string;
}

const FUNCTION_NAME = /^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/;
const UPPER_CAMEL = /^[A-Z][A-Za-z0-9]{0,62}$/;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
/** Kubernetes' version form for CRDs: v1, v2beta1, v1alpha3. */
const VERSION = /^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$/;
/** Groups the API server accepts only with an api-approved.kubernetes.io annotation. */
const RESERVED_GROUP = /(^|\.)(k8s\.io|kubernetes\.io)$/;
/** TypeScript's global types, which globalThis does not hold. */
const TYPESCRIPT_GLOBALS = new Set(['Record', 'Partial', 'Readonly', 'Required', 'Pick', 'Omit', 'Exclude', 'Extract', 'Awaited']);

export function checkName(name: string): void {
  if (!FUNCTION_NAME.test(name))
    throw new Refusal(`invalid function name "${name}": a DNS-1123 label starting with a letter (a-z, 0-9, '-'; at most 63)`);
}

/**
 * `<Kind>.<group>/<version>`, with the plural given or the one Knative's ApiServerSource guesses
 * from the kind (lower case + 's'; 'es' after an 's', 'ies' for a final 'y'), so that it can watch
 * the kind without a poll.
 */
export function parseKind(value: string, givenPlural?: string): NewKind {
  const parts = /^([^./]+)\.([^/]+)\/([^/]+)$/.exec(value);
  if (!parts) throw new Refusal(`invalid kind "${value}": write it as <Kind>.<group>/<version>, e.g. Widget.example.com/v1alpha1`);
  const [, kind, group, version] = parts;
  if (!UPPER_CAMEL.test(kind)) throw new Refusal(`invalid kind "${kind}": UpperCamelCase letters and digits, at most 63 (e.g. Widget)`);
  if (group.length > 253 || !group.includes('.') || !group.split('.').every((label) => DNS_LABEL.test(label)))
    throw new Refusal(`invalid group "${group}": a DNS subdomain with at least one dot (e.g. example.com)`);
  if (RESERVED_GROUP.test(group)) throw new Refusal(`invalid group "${group}": groups under k8s.io and kubernetes.io are Kubernetes' own`);
  if (!VERSION.test(version)) throw new Refusal(`invalid version "${version}": v<N>, v<N>alpha<M> or v<N>beta<M> (e.g. v1alpha1)`);
  const plural = givenPlural ?? guessedResource(kind);
  if (!DNS_LABEL.test(plural)) throw new Refusal(`invalid plural "${plural}": a DNS-1123 label (a-z, 0-9, '-'; at most 63)`);
  const clash = [kind, `${kind}Kind`, `${kind}Status`, `${kind}ConfigMap`].find((name) => namesInUse().has(name));
  if (clash) throw new Refusal(`kind "${kind}": the generated code already uses the name ${clash}; choose another kind`);
  return { kind, group, version, plural };
}

/**
 * The names the generated code uses besides its own, which a name made from the kind must not
 * repeat: what the templates import, and the globals they name (a `Date` kind would hide the
 * global Date from them).
 */
function namesInUse(): Set<string> {
  const globals = new Set([...Object.getOwnPropertyNames(globalThis), ...TYPESCRIPT_GLOBALS]);
  const names = new Set<string>();
  for (const { content } of templateFiles()) {
    for (const [, list] of content.matchAll(/^import\s*\{([^}]*)\}/gm))
      for (const entry of list.split(',')) names.add(entry.replace(/^\s*type\s+/, '').trim());
    for (const [word] of content.matchAll(/\b[A-Z][A-Za-z0-9]*\b/g)) if (globals.has(word)) names.add(word);
  }
  return names;
}

/** The templates, by their path inside bin/templates/ (placeholders and .tmpl included). */
function templateFiles(folder = ''): { path: string; content: string }[] {
  return readdirSync(join(TEMPLATES, folder), { withFileTypes: true }).flatMap((entry) => {
    const path = posix.join(folder, entry.name);
    return entry.isDirectory() ? templateFiles(path) : [{ path, content: readFileSync(join(TEMPLATES, path), 'utf8') }];
  });
}

export interface Project {
  root: string;
  /** This repository (or a copy of it): the runtime is a folder of the project, and functions/index.ts registers every function. */
  inRepository: boolean;
}

/** The project `from` lies in: the nearest folder upwards with a package.json. */
export function findProject(from: string): Project {
  for (let folder = resolve(from); ; folder = dirname(folder)) {
    if (existsSync(join(folder, 'package.json')))
      return { root: folder, inRepository: existsSync(join(folder, RUNTIME_FACE)) && existsSync(join(folder, REGISTRY)) };
    if (dirname(folder) === folder) throw new Refusal(`no package.json in ${resolve(from)} or above: run opfn new inside a project`);
  }
}

/** An import specifier of `target` (a path of the project) from the file at `from`. */
function importOf(from: string, target: string): string {
  const path = posix.relative(posix.dirname(from), target);
  return path.startsWith('.') ? path : `./${path}`;
}

export interface PlannedFile {
  /** Relative to the project's root. */
  path: string;
  content: string;
  /** What it is, for the list `opfn new` prints. */
  what: string;
}

/** What each template is, by its path in bin/templates/. */
const WHAT: Record<string, (kind: NewKind) => string> = {
  'functions/__name__/index.ts.tmpl': () => 'the declaration',
  'functions/__name__/desired.ts.tmpl': () => 'pure desired state',
  'functions/__name__/reconcile.ts.tmpl': () => 'the API calls',
  'crds/__kind__.yaml.tmpl': (kind) => `the CRD ${kind.plural}.${kind.group}`,
  'crds/examples/__kind__.yaml.tmpl': (kind) => `an example ${kind.kind}`,
  'test/unit/__name__.test.ts.tmpl': () => 'unit test of desired.ts',
  'test/integration/__name__.test.ts.tmpl': () => 'integration test against a real control plane',
};

/** The files `opfn new` writes, with every placeholder filled in. */
export function plannedFiles(project: Project, name: string, kind: NewKind): PlannedFile[] {
  const values: Record<string, string> = {
    __name__: name,
    __Kind__: kind.kind,
    __kind__: kind.kind.toLowerCase(),
    __group__: kind.group,
    __version__: kind.version,
    __plural__: kind.plural,
  };
  const fill = (text: string) => text.replace(/__[A-Za-z]+__/g, (placeholder) => values[placeholder] ?? placeholder);
  // In WHAT's order; a template it does not name comes last.
  const rank = (path: string) => (path in WHAT ? Object.keys(WHAT).indexOf(path) : Number.MAX_SAFE_INTEGER);
  const templates = templateFiles().sort((a, b) => rank(a.path) - rank(b.path));
  return templates.map((template) => {
    const path = fill(template.path.slice(0, -TEMPLATE_SUFFIX.length));
    const imports: Record<string, string> = project.inRepository
      ? { __runtime__: importOf(path, RUNTIME_FACE), __testing__: importOf(path, TESTING_FACE) }
      : { __runtime__: PACKAGE, __testing__: `${PACKAGE}/testing` };
    const content = fill(template.content.replace(/__runtime__|__testing__/g, (placeholder) => imports[placeholder]));
    return { path, content, what: WHAT[template.path]?.(kind) ?? '' };
  });
}

/** The registry's source with `name` added as the last entry of functionModules. */
export function registryWithFunction(source: string, name: string): string {
  const start = source.indexOf('export const functionModules');
  const end = start < 0 ? -1 : source.indexOf('\n};', start);
  if (end < 0) throw new Refusal(`${REGISTRY} has no "export const functionModules = { … };" to add ${name} to`);
  const key = /^[a-z][a-z0-9]*$/.test(name) ? name : `'${name}'`;
  return `${source.slice(0, end)}\n  ${key}: './${name}/index.ts',${source.slice(end)}`;
}

/** What stops `opfn new` from writing these files into the project; undefined when nothing does. */
async function problemOf(project: Project, name: string, kind: NewKind, files: PlannedFile[]): Promise<string | undefined> {
  if (existsSync(join(project.root, 'functions', name))) return `functions/${name} already exists: choose another name`;
  if (project.inRepository) {
    const registry = (await import(pathToFileURL(join(project.root, REGISTRY)).href)) as { functionNames: string[] };
    if (registry.functionNames.includes(name)) return `a function named ${name} is already registered in ${REGISTRY}`;
  }
  const existing = files.find((file) => existsSync(join(project.root, file.path)));
  if (existing) return `${existing.path} already exists`;
  const crdName = `${kind.plural}.${kind.group}`;
  const crdFolder = join(project.root, 'crds');
  if (
    existsSync(crdFolder) &&
    readManifests(crdFolder).some((object) => object.kind === 'CustomResourceDefinition' && object.metadata.name === crdName)
  )
    return `crds/ already defines ${crdName}`;
  return undefined;
}

/**
 * The files as the project's Prettier would write them, so that its format check passes whatever
 * the lengths of the names; as they are in a project without a Prettier configuration, or where
 * Prettier is not installed.
 */
async function formatted(project: Project, files: PlannedFile[]): Promise<PlannedFile[]> {
  let prettier: typeof import('prettier');
  try {
    prettier = await import('prettier');
  } catch {
    return files;
  }
  return Promise.all(
    files.map(async (file) => {
      const filepath = join(project.root, file.path);
      if (!file.path.endsWith('.ts')) return file;
      const options = await prettier.resolveConfig(filepath);
      return options ? { ...file, content: await prettier.format(file.content, { ...options, filepath }) } : file;
    }),
  );
}

/** Writes every file, or none: a write that fails removes the files and folders made before it. */
function writeAll(root: string, files: PlannedFile[]): void {
  const made: string[] = [];
  try {
    for (const file of files) {
      const path = join(root, file.path);
      const folder = mkdirSync(dirname(path), { recursive: true });
      if (folder) made.push(folder);
      writeFileSync(path, file.content, { flag: file.path === REGISTRY ? 'w' : 'wx' });
      made.push(path);
    }
  } catch (error) {
    for (const path of made.reverse()) rmSync(path, { recursive: true, force: true });
    throw error;
  }
}

export interface NewFunctionOptions {
  kind?: string;
  plural?: string;
}

/**
 * Writes the function `name` into the project `from` lies in, and answers what it wrote; throws a
 * Refusal, having written nothing, when it may not.
 */
export async function writeNewFunction(
  from: string,
  name: string,
  options: NewFunctionOptions,
): Promise<{ project: Project; kind: NewKind; files: PlannedFile[] }> {
  checkName(name);
  if (!options.kind) throw new Refusal('--kind <Kind>.<group>/<version> is required, e.g. --kind Widget.example.com/v1alpha1');
  const kind = parseKind(options.kind, options.plural);
  const project = findProject(from);
  let files = plannedFiles(project, name, kind);
  const problem = await problemOf(project, name, kind, files);
  if (problem) throw new Refusal(problem);
  if (project.inRepository)
    files.push({
      path: REGISTRY,
      content: registryWithFunction(readFileSync(join(project.root, REGISTRY), 'utf8'), name),
      what: 'registered, so npm start runs it',
    });
  files = await formatted(project, files);
  writeAll(project.root, files);
  return { project, kind, files };
}

export async function newCommand(name: string, options: NewFunctionOptions): Promise<void> {
  const from = process.cwd();
  try {
    const { project, kind, files } = await writeNewFunction(from, name, options);
    const width = Math.max(...files.map((file) => file.path.length));
    say(`Wrote the function ${name}, reconciling ${kind.kind} (${kind.group}/${kind.version}) in ${relative(from, project.root) || '.'}:`);
    for (const { path, what } of files) say(`  ${path.padEnd(width)}  ${what}`);
    const tests = files.filter((file) => file.path.startsWith('test/')).map((file) => file.path);
    say(`Next: npx node --test ${tests.join(' ')}`);
    const run = project.inRepository ? 'npm start' : 'npx opfn dev --functions ./functions';
    say(`      ${run}, then: kubectl apply -f crds/examples/${kind.kind.toLowerCase()}.yaml && kubectl get ${kind.plural},configmaps`);
  } catch (error) {
    if (!(error instanceof Refusal)) throw error;
    say(`opfn new: ${error.message}`);
    process.exit(2);
  }
}
