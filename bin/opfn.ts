#!/usr/bin/env node
// opfn: the operator-functions command line. This file is the table of commands and their
// options; each command's program is a file of this folder, imported when it runs, so `opfn
// --help` answers at once.
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import { DEAD_LETTER_FILE, findStateDir } from '../eventing/state-files.ts';
import { functionNames, loadFunction } from '../functions/index.ts';
import { nameList } from './function-set.ts';
import { say } from './terminal.ts';

// The project's state folder, found from any of its folders ($OPFN_STATE_DIR, else the nearest .opfn up to the project root).
const STATE_DIR = findStateDir();
// By the package's own name: from the sources here, and from lib/ in an installed package.
const PACKAGE = createRequire(import.meta.url)('operator-functions/package.json') as {
  version: string;
};

/** The longest a Node timer waits (2^31 - 1 ms): a longer one fires at once. */
const MAX_TIMER_SECONDS = Math.floor((2 ** 31 - 1) / 1000);

const seconds = (value: string): number => {
  const parsed = Number(value);
  if (!Number.isFinite(parsed) || parsed < 0 || parsed > MAX_TIMER_SECONDS)
    throw new InvalidArgumentError(`must be a number of seconds from 0 to ${MAX_TIMER_SECONDS} (about 24 days)`);
  return parsed;
};

const logFormatOption = (value: string): 'json' | 'pretty' => {
  if (value !== 'json' && value !== 'pretty') throw new InvalidArgumentError('must be json or pretty');
  return value;
};

/** `--functions` and `--only`, the same for every command that works on a set of functions. */
const FUNCTIONS_OPTION = [
  '-f, --functions <folder or module>',
  "the functions of your project instead of this package's own: a folder with a subfolder per function (its index.ts default-exports the declaration; CRDs in YAML files beside it or in crds/ next to the folder), or one module default-exporting a declaration or an array of them",
] as const;
const ONLY_OPTION = [
  '--only <names>',
  `comma-separated: only these functions of the set (this package's own: ${functionNames.join(', ')})`,
  nameList,
] as const;

const program = new Command('opfn')
  .description('operator-functions: Kubernetes operators built from stateless reconcile functions that scale from zero')
  .version(PACKAGE.version, '-V, --version', 'print the version of operator-functions')
  .showHelpAfterError();

program
  .command('new')
  .description(
    'write a new function into the current project: functions/<name>/ (declaration, pure desired state, reconcile), its CRD and an example in crds/, and a unit and an integration test; inside this repository it is also registered in functions/index.ts',
  )
  .argument('<name>', 'the function name, a DNS-1123 label (e.g. widget)')
  .option('--kind <kind>', 'the kind it reconciles, as <Kind>.<group>/<version> (e.g. Widget.example.com/v1alpha1)')
  .option(
    '--plural <plural>',
    "the kind's plural resource name (default: the kind in lower case + 's', or 'es' after an 's' and 'ies' for a final 'y', as Knative's ApiServerSource guesses it)",
  )
  .action(async (name: string, options) => (await import('./new.ts')).newCommand(name, options));

program
  .command('dev')
  .description(
    'install the CRDs and run every function on the local event plane (source, broker, scale-from-zero activator) against the configured cluster ($KUBECONFIG, ~/.kube/config, in-cluster), or a new local control plane when none is configured',
  )
  .option(...FUNCTIONS_OPTION)
  .option(...ONLY_OPTION)
  .option('--idle <seconds>', 'idle time before a function scales to zero', seconds, 30)
  .option(
    '--resync <seconds>',
    "resync every object this often instead of on each PingSource's schedule (0 = never; default: the schedules, */5 * * * *)",
    seconds,
  )
  .option('--no-bundle', 'run the functions from their TypeScript sources instead of esbuild bundles (edits apply at the next cold start)')
  .option(
    '-t, --triggers <file...>',
    'YAML files of Knative Triggers (spec.subscriber.uri) to add to the broker, e.g. to route a kind to another implementation',
  )
  .option('--local', 'always start a new local control plane, even when a cluster is configured')
  .option(
    '--replace <function=url...>',
    "send a function's events to another implementation at this URL instead (as opfn manifests --replace); repeatable",
  )
  .option('--log-format <format>', 'json | pretty (default: pretty on a terminal, json when piped)', logFormatOption)
  .option('--no-watch', 'do not rebuild and roll a function when its sources are saved (`opfn reload` still does)')
  .action(async (options) => (await import('./dev.ts')).devCommand(options, STATE_DIR));

program
  .command('reload')
  .description(
    'rebuild every function of the running `opfn dev` and roll their instances (what saving a source does), keeping the control plane and every object',
  )
  .action(async () => (await import('./status.ts')).reloadCommand(STATE_DIR));

program
  .command('status')
  .description('what the running `opfn dev` does: functions and their instances, Triggers, the last reload, recent dead letters')
  .option('--json', 'print status.json as the plane wrote it')
  .action(async (options: { json?: boolean }) => (await import('./status.ts')).statusCommand(STATE_DIR, options));

const cluster = program
  .command('cluster')
  .description(
    'a local Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager) for trying the operators without a cluster',
  );
cluster
  .command('up')
  .description('start the control plane with the CRDs installed and keep it running until Ctrl-C or `opfn cluster down`')
  .action(async () => (await import('./cluster.ts')).clusterUp(STATE_DIR));
cluster
  .command('down')
  .description('stop the control plane started by `opfn cluster up`')
  .action(async () => (await import('./cluster.ts')).clusterDown(STATE_DIR));
cluster
  .command('env')
  .description('print the KUBECONFIG line, and the PATH line for its kubectl, of the running local cluster (eval "$(opfn cluster env)")')
  .action(async () => (await import('./cluster.ts')).clusterEnv(STATE_DIR));

program
  .command('invoke')
  .description('send one hand-made CloudEvent (as ApiServerSource or PingSource would) to a running function and print its answer')
  .argument('<function>', `function whose kind the event names (${functionNames.join(', ')})`)
  .option(
    '--url <url>',
    "where the function listens (default: the running `opfn dev`'s address for it, else `opfn serve`'s http://127.0.0.1:8080/)",
  )
  .option('-n, --namespace <namespace>', 'namespace of the object', 'default')
  .option('--name <name>', 'name of the object the event names')
  .option('--action <action>', 'add | update | delete', 'update')
  .option('--resource', 'Resource mode (object as data) instead of Reference mode')
  .option('--resync', 'send a PingSource resync event instead')
  // A function answers within its delivery budget (30 s by default); a resync of many objects may take longer.
  .option('--timeout <seconds>', 'how long to wait for the answer (0 = as long as it takes)', seconds, 120)
  .action(async (name: string, options) => (await import('./invoke.ts')).invoke(name, options, STATE_DIR));

const deadLetters = program
  .command('dead-letters')
  .description(
    `events the broker could not deliver (default file ${join(STATE_DIR, DEAD_LETTER_FILE)}, 0600, rotated to .1 at 64 MiB; events a function refused for good, a 4xx, apart in <file>.refused, rotated at 8 MiB)`,
  );
const deadLetterFile = (options: { file?: string }) => resolve(options.file ?? join(STATE_DIR, DEAD_LETTER_FILE));
deadLetters
  .command('list')
  .description('one line per dead letter, oldest first: id, type, subject, status and reason')
  .option('--file <path>', 'dead-letter file')
  .option('--json', 'print the letters as JSON lines instead')
  .action(async (options: { file?: string; json?: boolean }) =>
    (await import('./dead-letters.ts')).listDeadLetters(deadLetterFile(options), options),
  );
deadLetters
  .command('replay')
  .description(
    're-publish every dead letter through the broker ingress of the running `opfn dev` (or --broker); letters it refuses stay in the file',
  )
  .option('--file <path>', 'dead-letter file')
  .option('--broker <url>', 'broker ingress URL (default: the one the running `opfn dev` wrote to its state folder)')
  .action(async (options: { file?: string; broker?: string }) =>
    (await import('./dead-letters.ts')).replayDeadLetters(deadLetterFile(options), STATE_DIR, options.broker),
  );
deadLetters
  .command('clear')
  .description('delete every dead letter (the file, its .refused letters and their rotated .1)')
  .option('--file <path>', 'dead-letter file')
  .action(async (options: { file?: string }) => (await import('./dead-letters.ts')).clearDeadLetters(deadLetterFile(options)));

program
  .command('serve')
  .description('run one function as an HTTP server on $PORT (default 8080), as its Knative Service does')
  .argument('<function>', functionNames.join(' | '))
  .action(async (name: string) => {
    const { serve } = await import('../functions/runtime/host/index.ts');
    try {
      await serve(await loadFunction(name));
    } catch (error) {
      say(`opfn serve: ${(error as Error).message}`);
      process.exit(1);
    }
  });

program
  .command('conformance')
  .description(
    'check an HTTP endpoint against the function contract (docs/function-contract.md) of a built-in function, with a real API server behind it (the configured cluster, or a new local control plane whose KUBECONFIG the endpoint must use); prints a pass/fail table, exits 1 on a failure',
  )
  .argument('<url>', 'where the endpoint listens, e.g. http://127.0.0.1:8080/')
  .requiredOption(
    '--function <name>',
    `the function whose contract it claims to implement (${functionNames.join(', ')}, or one of --functions)`,
  )
  .option(...FUNCTIONS_OPTION)
  .option('--local', 'always start a new local control plane, even when a cluster is configured')
  .option('--timeout <seconds>', 'how long one answer may take (the delivery timeout)', seconds, 30)
  .option('--converge-timeout <seconds>', 'how long an object may take to converge after its event', seconds, 20)
  .option('--wait <seconds>', "how long to wait for the endpoint's /health/readiness before the checks", seconds, 120)
  .action(async (url: string, options) => (await import('./conformance.ts')).conformanceCommand(url, options));

program
  .command('manifests')
  .description(
    'generate the Knative objects (CRDs, Broker, per function: ServiceAccount + role, Service, Trigger, PingSource, ApiServerSources) from the declarations; --out writes a folder for `kubectl apply -k`',
  )
  .option(...FUNCTIONS_OPTION)
  .option(...ONLY_OPTION)
  .option('-o, --out <dir>', 'write one file per function and kustomization.yaml into <dir> (default: print one YAML stream)')
  .option('--image <image>', 'container image of the functions (built from the Dockerfile)')
  .option('-n, --namespace <namespace>', 'run the functions in this namespace only (Roles instead of ClusterRoles; sources watch only it)')
  .option('--broker-class <class>', "Knative Broker class: MTChannelBasedBroker (default) or Kafka (durable; needs Knative's Kafka broker)")
  .option(
    '--replace <function=target...>',
    "send a function's events to a URL or another Knative Service instead (its Trigger's subscriber); repeatable",
  )
  .option('--target <target>', 'knative, or openfaas (a stack.yml)', 'knative')
  .option(
    '--composite <file>',
    'the CompositeControllers known at install time (YAML; other kinds ignored): the composite function gets exactly their rights (without this file: none, so it serves no controller)',
  )
  .option(
    '--event-policy',
    "per function an EventPolicy: the Broker takes events only from that function's sources and Trigger (needs Knative's authentication-oidc feature)",
  )
  .option(
    '--composite-broad',
    "give the composite function Metacontroller's `*` instead, so any CompositeController is served once applied (a hook's privileged children are still refused unless its controller allows them)",
  )
  .option(
    '--retry-after-max <duration>',
    "honour a function's Retry-After up to this ISO-8601 duration (delivery.retryAfterMax; needs Knative's delivery-retryafter feature)",
  )
  .action(async (options) => (await import('./manifests.ts')).manifestsCommand(options));

await program.parseAsync();
