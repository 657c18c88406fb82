#!/usr/bin/env node
// opfn: the operator-functions command line.
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import type { ChangeAction } from '../eventing/apiserver-events.ts';
import { functionNames, loadFunction } from '../functions/index.ts';
import { isRunning, isSameProcess, processArguments, processStart } from '../processes/index.ts';
import { CLUSTER_STATE_FILE, clusterRecord, DEAD_LETTER_FILE, planeRecord } from '../eventing/state-files.ts';

// Commands import what they need when they run, so `opfn --help` answers at once.

const STATE_DIR = resolve(process.env.OPFN_STATE_DIR ?? '.opfn');
const CLUSTER_STATE = join(STATE_DIR, CLUSTER_STATE_FILE);
const say = (line: string) => process.stderr.write(`${line}\n`);

/** The longest a Node timer waits (2^31 - 1 ms): a longer one fires at once. */
const MAX_TIMER_SECONDS = Math.floor((2 ** 31 - 1) / 1000);

const seconds = (value: string): number => {
  const parsed = Number(value);
  if (!Number.isFinite(parsed) || parsed < 0 || parsed > MAX_TIMER_SECONDS) throw new InvalidArgumentError(`must be a number of seconds from 0 to ${MAX_TIMER_SECONDS} (about 24 days)`);
  return parsed;
};

/**
 * Runs until Ctrl-C / SIGTERM / SIGHUP, then stops cleanly once; a second Ctrl-C forces the exit. Under
 * `npm start` one Ctrl-C arrives twice (the terminal signals the process group and npm forwards
 * it), so a signal within a second of the first counts as the same one.
 */
function untilSignal(stop: () => Promise<void>, says: { stopping: string; forced: string }): void {
  let stopping = false;
  let firstAt = 0;
  const handler = async (signal: string) => {
    if (stopping) {
      if (performance.now() - firstAt < 1000) return;
      say(`${signal} again: exiting now (${says.forced})`);
      process.exit(130);
    }
    stopping = true;
    firstAt = performance.now();
    say(`${signal}: stopping (${says.stopping}; Ctrl-C again to force)...`);
    try {
      await stop();
    } catch (error) {
      say(`stopping failed: ${(error as Error).message}`);
      process.exit(1);
    }
    process.exit(0);
  };
  process.on('SIGINT', () => void handler('SIGINT'));
  process.on('SIGTERM', () => void handler('SIGTERM'));
  // A closed terminal (or a dropped SSH session) drains as SIGTERM does; writing to that terminal
  // may fail now, which must not end the drain.
  process.on('SIGHUP', () => {
    for (const stream of [process.stdout, process.stderr]) stream.on('error', () => {});
    void handler('SIGHUP');
  });
}

/**
 * Is the process cluster.json names (`record`, as clusterRecord read it) still the control plane
 * `opfn cluster up` started? A `cluster up` that died without cleaning up (SIGKILL, a crash, a
 * reboot) leaves the file behind, and its pid may since belong to any process: signalling that
 * one would stop someone else's work. 'running': it is (the start time recorded by `up` matches;
 * a file from before start times were recorded: its command line is `... cluster up`; without
 * /proc, the pid is all there is); 'gone': nothing has the pid; 'other': another process has it now.
 */
function clusterProcess({ pid, startTime }: { pid: number; startTime?: string }): 'running' | 'gone' | 'other' {
  if (!isRunning(pid)) return 'gone';
  if (!existsSync('/proc/self/stat')) return 'running';
  const started = processStart(pid);
  if (started === undefined) return 'gone';
  if (startTime !== undefined) return startTime === started ? 'running' : 'other';
  const args = processArguments(pid);
  if (args === undefined) return 'gone';
  return args.some((arg, i) => arg === 'cluster' && args[i + 1] === 'up') ? 'running' : 'other';
}

const staleCluster = (pid: number) => `process ${pid} is not the control plane \`opfn cluster up\` started (that one ended without cleaning up, and its pid now belongs to another process)`;

const logFormatOption = (value: string): 'json' | 'pretty' => {
  if (value !== 'json' && value !== 'pretty') throw new InvalidArgumentError('must be json or pretty');
  return value;
};

const program = new Command('opfn')
  .description('operator-functions: Kubernetes operators built from stateless reconcile functions that scale from zero')
  .showHelpAfterError();

program
  .command('dev')
  .description('install the CRDs and run every function on the local event plane (source, broker, scale-from-zero activator) against the configured cluster ($KUBECONFIG, ~/.kube/config, in-cluster), or a new local control plane when none is configured')
  .option('-f, --functions <names>', `comma-separated functions to run (default: all of ${functionNames.join(', ')})`, (v) => v.split(',').filter(Boolean))
  .option('--idle <seconds>', 'idle time before a function scales to zero', seconds, 30)
  .option('--resync <seconds>', 'resync every object this often instead of on each PingSource\'s schedule (0 = never; default: the schedules, */5 * * * *)', seconds)
  .option('--no-bundle', 'run the functions from their TypeScript sources instead of esbuild bundles (edits apply at the next cold start)')
  .option('-t, --triggers <file...>', 'YAML files of Knative Triggers (spec.subscriber.uri) to add to the broker, e.g. to route a kind to another implementation')
  .option('--local', 'always start a new local control plane, even when a cluster is configured')
  .option('--replace <function=url...>', 'send a function\'s events to another implementation at this URL instead (as opfn manifests --replace); repeatable')
  .option('--log-format <format>', 'json | pretty (default: pretty on a terminal, json when piped)', logFormatOption)
  .action(async (options: { functions?: string[]; idle: number; resync?: number; triggers?: string[]; bundle: boolean; local?: boolean; replace?: string[]; logFormat?: 'json' | 'pretty' }) => {
    const { runDev } = await import('./dev.ts');
    const { createLogger, logFormat } = await import('../functions/runtime/log.ts');
    const format = options.logFormat ?? logFormat();
    try {
      const { parseReplacements } = await import('./manifests.ts');
      const running = await runDev({
        replace: parseReplacements(options.replace ?? [], functionNames, true),
        functions: options.functions,
        triggerFiles: options.triggers,
        bundle: options.bundle,
        idleSeconds: options.idle,
        resyncSeconds: options.resync,
        stateDir: STATE_DIR,
        local: options.local,
        // Function processes write to a pipe: tell them the format the terminal gets.
        env: { LOG_FORMAT: format },
        log: createLogger(undefined, process.env.LOG_LEVEL ?? 'info', format),
        say,
      });
      untilSignal(running.stop, { stopping: 'intake first, then waiting for deliveries in flight', forced: 'deliveries still running are cut; child processes are killed' });
    } catch (error) {
      say(`opfn dev: ${(error as Error).message}`);
      process.exit(1);
    }
  });

const cluster = program.command('cluster').description('a local Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager) for trying the operators without a cluster');
cluster
  .command('up')
  .description('start the control plane with the CRDs installed and keep it running until Ctrl-C or `opfn cluster down`')
  .action(async () => {
    const running = clusterRecord(STATE_DIR);
    if (running?.pid !== undefined && clusterProcess({ ...running, pid: running.pid }) === 'running') {
      say(`a local cluster is already running (pid ${running.pid}); export KUBECONFIG=${running.kubeconfig}`);
      process.exit(1);
    }
    const { startControlPlane, kubectlPathLine } = await import('../cluster/index.ts');
    const { applyCrds } = await import('../eventing/crds.ts');
    const { KubeClient } = await import('../functions/runtime/kube.ts');
    try {
      const started = performance.now();
      // Stopped by untilSignal below, in order (apiserver before etcd), not by the terminal's Ctrl-C.
      const cp = await startControlPlane({ progress: say, ownProcessGroup: true });
      await applyCrds(KubeClient.fromFile(cp.kubeconfigPath));
      mkdirSync(STATE_DIR, { recursive: true });
      // The start time tells this process apart from a later one given the same pid (clusterProcess).
      writeFileSync(CLUSTER_STATE, JSON.stringify({ pid: process.pid, startTime: processStart(process.pid), server: cp.server, kubeconfig: cp.kubeconfigPath, binDir: cp.binDir }, null, 2));
      say(`control plane ready at ${cp.server} in ${((performance.now() - started) / 1000).toFixed(1)}s, CRDs installed; kubectl of the same release is in ${cp.binDir}`);
      console.log(`export KUBECONFIG=${cp.kubeconfigPath}\n${kubectlPathLine(cp.binDir)}`);
      untilSignal(
        async () => {
          await cp.stop();
          // Only now: `cluster down` waits for this process, and `cluster env` must not name a
          // cluster that is still going. Only its own: a second `up` started at the same moment
          // may have written its record over this one's.
          if (clusterRecord(STATE_DIR)?.pid === process.pid) rmSync(CLUSTER_STATE, { force: true });
        },
        { stopping: 'kube-controller-manager and kube-apiserver first, then etcd', forced: 'the control plane processes are killed' },
      );
    } catch (error) {
      say(`opfn cluster up: ${(error as Error).message}`);
      process.exit(1);
    }
  });
cluster
  .command('down')
  .description('stop the control plane started by `opfn cluster up`')
  .action(async () => {
    const record = clusterRecord(STATE_DIR);
    const pid = record?.pid;
    if (pid === undefined) {
      say('no local cluster is running');
      return;
    }
    // A process that ended without its own clean-up (SIGKILL) leaves its record, and may have
    // left its control plane running.
    const clearLeftovers = async () => {
      rmSync(CLUSTER_STATE, { force: true });
      const { reclaimAbandonedControlPlanes } = await import('../cluster/index.ts');
      for (const line of reclaimAbandonedControlPlanes()) say(line);
    };
    const gone = async () => {
      await clearLeftovers();
      say(`the cluster process ${pid} was already gone; state cleared`);
    };
    const state = clusterProcess({ ...record, pid });
    if (state === 'other') {
      rmSync(CLUSTER_STATE, { force: true });
      say(`${staleCluster(pid)}; nothing signalled, stale ${CLUSTER_STATE} cleared`);
      return;
    }
    if (state === 'gone') return gone();
    try {
      process.kill(pid, 'SIGTERM');
    } catch {
      return gone();
    }
    // It stops its control plane, removes the file and exits; one that ends without removing the file leaves it to us.
    for (let waited = 0; clusterProcess({ ...record, pid }) === 'running' && waited < 30_000; waited += 100) await new Promise((r) => setTimeout(r, 100));
    if (clusterProcess({ ...record, pid }) === 'running') {
      say(`process ${pid} did not stop within 30s; it may be stopped (SIGSTOP) or hung: kill -9 ${pid}, then run \`opfn cluster down\` again to stop what it left`);
      process.exit(1);
    }
    if (existsSync(CLUSTER_STATE)) await clearLeftovers();
    say('local cluster stopped');
  });
cluster
  .command('env')
  .description('print the KUBECONFIG line, and the PATH line for its kubectl, of the running local cluster (eval "$(opfn cluster env)")')
  .action(async () => {
    const running = clusterRecord(STATE_DIR);
    const state = running?.pid === undefined ? 'gone' : clusterProcess({ ...running, pid: running.pid });
    if (running?.pid === undefined || !running.kubeconfig || state !== 'running') {
      const stale = state === 'other' ? ` (${staleCluster(running!.pid!)}; \`opfn cluster down\` clears its state)` : '';
      say(`no local cluster is running${stale}; start one with: npx opfn cluster up`);
      process.exit(1);
    }
    console.log(`export KUBECONFIG=${running.kubeconfig}`);
    if (running.binDir) console.log((await import('../cluster/index.ts')).kubectlPathLine(running.binDir));
  });

program
  .command('invoke')
  .description('send one hand-made CloudEvent (as ApiServerSource or PingSource would) to a running function and print its answer')
  .argument('<function>', `function whose kind the event names (${functionNames.join(', ')})`)
  .option('--url <url>', 'where the function listens', 'http://127.0.0.1:8080/')
  .option('-n, --namespace <namespace>', 'namespace of the object', 'default')
  .option('--name <name>', 'name of the object the event names')
  .option('--action <action>', 'add | update | delete', 'update')
  .option('--resource', 'Resource mode (object as data) instead of Reference mode')
  .option('--resync', 'send a PingSource resync event instead')
  // A function answers within its delivery budget (30 s by default); a resync of many objects may take longer.
  .option('--timeout <seconds>', 'how long to wait for the answer (0 = as long as it takes)', seconds, 120)
  .action(async (name: string, options: { url: string; namespace: string; name?: string; action: string; resource?: boolean; resync?: boolean; timeout: number }) => {
    const { HTTP } = await import('cloudevents');
    const { apiServerSourceEvent } = await import('../eventing/apiserver-events.ts');
    const { resyncEvent } = await import('../eventing/plane.ts');
    try {
      const declaration = await loadFunction(name);
      let event;
      if (options.resync) {
        event = resyncEvent(declaration);
      } else {
        if (!options.name) throw new Error('--name is required (or use --resync)');
        if (!['add', 'update', 'delete'].includes(options.action)) throw new Error(`--action must be add, update or delete, not "${options.action}"`);
        const object = { metadata: { name: options.name, namespace: declaration.reconciles.namespaced ? options.namespace : '' } };
        event = apiServerSourceEvent({ server: 'opfn-invoke', kind: declaration.reconciles, object, action: options.action as ChangeAction, mode: options.resource ? 'Resource' : 'Reference' });
      }
      const message = HTTP.binary(event);
      const signal = options.timeout > 0 ? AbortSignal.timeout(options.timeout * 1000) : undefined;
      const response = await fetch(options.url, { method: 'POST', headers: message.headers as Record<string, string>, body: message.body as string, signal }).catch((error: Error & { cause?: { code?: string; message?: string } }) => {
        if (error.name === 'TimeoutError') throw new Error(`no answer from ${options.url} within ${options.timeout} s (--timeout); the function's log says what it is doing`);
        const cause = error.cause?.code ?? error.cause?.message ?? error.message;
        throw new Error(`nothing answers at ${options.url} (${cause}); start the function with \`opfn serve ${name}\` (PORT=8080) or pass --url`);
      });
      console.log(`${response.status} ${(await response.text()) || response.headers.get('x-opfn-outcome') || ''}`);
      process.exit(response.ok ? 0 : 1);
    } catch (error) {
      say(`opfn invoke: ${(error as Error).message}`);
      process.exit(1);
    }
  });

const deadLetters = program
  .command('dead-letters')
  .description(`events the broker could not deliver (default file ${join(STATE_DIR, DEAD_LETTER_FILE)}, 0600, rotated to .1 at 64 MiB; events a function refused for good, a 4xx, apart in <file>.refused, rotated at 8 MiB)`);
/** The reason in a failed delivery's answer: a function's JSON `{"error": ...}`, else the text as it is. */
function errorReason(answer: string): string {
  try {
    const { error } = JSON.parse(answer) as { error?: unknown };
    if (typeof error === 'string') return error;
  } catch {
    // not JSON
  }
  return answer;
}
const deadLetterFile = (options: { file?: string }) => resolve(options.file ?? join(STATE_DIR, DEAD_LETTER_FILE));
deadLetters
  .command('list')
  .description('one line per dead letter, oldest first: id, type, subject, status and reason')
  .option('--file <path>', 'dead-letter file')
  .option('--json', 'print the letters as JSON lines instead')
  .action(async (options: { file?: string; json?: boolean }) => {
    const { readDeadLetterFile } = await import('../eventing/broker/index.ts');
    const file = deadLetterFile(options);
    const entries = await readDeadLetterFile(file);
    for (const entry of entries) {
      if (!entry.letter) {
        console.log(`${entry.file}:${entry.line}: unparsable line (${entry.error})`);
        continue;
      }
      const l = entry.letter as Record<string, unknown>;
      if (options.json) {
        console.log(JSON.stringify(l));
        continue;
      }
      const reason = typeof l.knativeerrordata === 'string' ? errorReason(Buffer.from(l.knativeerrordata, 'base64').toString('utf8')).replace(/\s+/g, ' ').slice(0, 120) : '';
      console.log([l.id, l.type, l.subject ?? l.source, l.knativeerrorcode ?? '-', reason].join('  '));
    }
    // The letters a function refused for good are kept apart (`<file>.refused`), rotated ones too.
    const files = [...new Set(entries.map((entry) => entry.file))];
    say(`${entries.length} dead letter(s) in ${files.length > 0 ? files.join(', ') : file}`);
  });
deadLetters
  .command('replay')
  .description('re-publish every dead letter through the broker ingress of the running `opfn dev` (or --broker); letters it refuses stay in the file')
  .option('--file <path>', 'dead-letter file')
  .option('--broker <url>', 'broker ingress URL (default: the one the running `opfn dev` wrote to its state folder)')
  .action(async (options: { file?: string; broker?: string }) => {
    const { replayDeadLetterFile } = await import('../eventing/broker/index.ts');
    const plane = planeRecord(STATE_DIR);
    // A plane killed without cleaning up leaves its record; its port may since be anyone's.
    const running = isSameProcess(plane);
    const broker = options.broker ?? (running ? plane?.brokerUrl : undefined);
    if (!broker) {
      const stale = plane?.pid !== undefined && !running ? ` (${STATE_DIR}/plane.json names process ${plane.pid}, which has ended)` : '';
      say(`opfn dead-letters replay: no running plane found in ${STATE_DIR}${stale} (start \`opfn dev\`), or pass --broker <url>`);
      process.exit(1);
    }
    const result = await replayDeadLetterFile(deadLetterFile(options), broker);
    for (const failed of result.failed) say(`not replayed: ${failed.id}: ${failed.reason}`);
    say(`${result.replayed} dead letter(s) replayed through ${broker}${result.failed.length ? `; ${result.failed.length} kept in the file` : ''}`);
    process.exit(result.failed.length ? 1 : 0);
  });
deadLetters
  .command('clear')
  .description('delete every dead letter (the file, its .refused letters and their rotated .1)')
  .option('--file <path>', 'dead-letter file')
  .action(async (options: { file?: string }) => {
    const { clearDeadLetterFile } = await import('../eventing/broker/index.ts');
    const file = deadLetterFile(options);
    say(`${await clearDeadLetterFile(file)} dead letter(s) removed from ${file}`);
  });

program
  .command('serve')
  .description('run one function as an HTTP server on $PORT (default 8080), as its Knative Service does')
  .argument('<function>', functionNames.join(' | '))
  .action(async (name: string) => {
    const { serve } = await import('../functions/runtime/server.ts');
    try {
      await serve(await loadFunction(name));
    } catch (error) {
      say(`opfn serve: ${(error as Error).message}`);
      process.exit(1);
    }
  });

program
  .command('manifests')
  .description('generate the Knative objects (CRDs, Broker, per function: ServiceAccount + role, Service, Trigger, PingSource, ApiServerSources) from the declarations; --out writes a folder for `kubectl apply -k`')
  .option('-o, --out <dir>', 'write one file per function and kustomization.yaml into <dir> (default: print one YAML stream)')
  .option('--image <image>', 'container image of the functions (built from the Dockerfile)')
  .option('-n, --namespace <namespace>', 'run the functions in this namespace only (Roles instead of ClusterRoles; sources watch only it)')
  .option('--broker-class <class>', 'Knative Broker class: MTChannelBasedBroker (default) or Kafka (durable; needs Knative\'s Kafka broker)')
  .option('--replace <function=target...>', 'send a function\'s events to a URL or another Knative Service instead (its Trigger\'s subscriber); repeatable')
  .option('--target <target>', 'knative, or openfaas (a stack.yml)', 'knative')
  .option('--composite <file>', 'the CompositeControllers known at install time (YAML; other kinds ignored): the composite function gets exactly their rights (without this file: none, so it serves no controller)')
  .option('--event-policy', 'per function an EventPolicy: the Broker takes events only from that function\'s sources and Trigger (needs Knative\'s authentication-oidc feature)')
  .option('--composite-broad', 'give the composite function Metacontroller\'s `*` instead, so any CompositeController is served once applied (a hook\'s privileged children are still refused unless its controller allows them)')
  .option('--retry-after-max <duration>', 'honour a function\'s Retry-After up to this ISO-8601 duration (delivery.retryAfterMax; needs Knative\'s delivery-retryafter feature)')
  .action(async (options: { out?: string; image?: string; namespace?: string; brokerClass?: string; replace?: string[]; target: string; composite?: string; compositeBroad?: boolean; eventPolicy?: boolean; retryAfterMax?: string }) => {
    const { runManifests } = await import('./manifests.ts');
    const { loadAllFunctions } = await import('../functions/index.ts');
    try {
      if (options.target !== 'knative' && options.target !== 'openfaas') throw new Error(`--target must be knative or openfaas, not "${options.target}"`);
      const written = runManifests({ ...options, target: options.target }, await loadAllFunctions(), (text) => process.stdout.write(text));
      if (written.length) say(`wrote ${written.join(', ')}`);
    } catch (error) {
      say(`opfn manifests: ${(error as Error).message}`);
      process.exit(1);
    }
  });

await program.parseAsync();
