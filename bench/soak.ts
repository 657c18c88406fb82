// Soak: the local plane under steady churn for a while, to see memory stay flat and every error.
// Against a real control plane (kube-controller-manager included: deleted ImmortalContainers'
// pods go by garbage collection), the plane runs as `npm start` runs it (bundled functions, a
// resync ping every --resync seconds) while a driver keeps about --objects ImmortalContainers
// alive with --rate operations per second: create a new one, change one's image (its pod is
// replaced), or delete one. Every --sample seconds it prints the resident set of every process of
// the plane: this one (source, broker and activator run in it, as in `opfn dev`), each function
// process, and the control plane's for context. Every warning or error the plane logs is
// printed as it happens (function processes print theirs to stderr). At the end: whether every
// remaining object converged, RSS first/min/max/last per process, errors, and a JSON file.
// Bounded: stops by itself after --minutes (and 2 minutes at most of waiting for convergence).
//
// Usage: npm run soak -- [--minutes 10] [--objects 200] [--rate 20] [--resync 30] [--sample 15] [--label L]
import { readdirSync, readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { bundledFunctions } from '../build/index.ts';
import { EventPlane } from '../eventing/plane.ts';
import immortalContainer from '../functions/immortal-container/index.ts';
import { ImmortalContainerKind, podNameFor, type ImmortalContainer, type PodObject } from '../functions/immortal-container/desired.ts';
import { Pod, KubeClient } from '../functions/runtime/index.ts';
import { startTestCluster } from '../test/support/cluster.ts';
import { tempDir } from '../test/support/temp.ts';
import { benchFlags, planeStateDir, writeResults } from './harness.ts';

const NAMESPACE = 'soak';
const stamp = () => new Date().toISOString().slice(11, 19);

const { values } = benchFlags(
  'npm run soak -- [--minutes 10] [--objects 200] [--rate 20] [--resync 30] [--sample 15] [--label name]\n' +
    '  --minutes  how long the churn lasts, then at most 2 minutes of waiting for convergence (default 10)\n' +
    '  --objects  ImmortalContainers kept alive, about (default 200)\n' +
    '  --rate     operations per second: create, change an image, delete (default 20)\n' +
    '  --resync   seconds between resync pings (default 30)\n' +
    '  --sample   seconds between RSS samples of every process (default 15)\n' +
    '  --label    a name for this run, part of the result file name (default local)',
  () =>
    parseArgs({
      options: {
        minutes: { type: 'string', default: '10' },
        objects: { type: 'string', default: '200' },
        rate: { type: 'string', default: '20' },
        resync: { type: 'string', default: '30' },
        sample: { type: 'string', default: '15' },
        label: { type: 'string', default: 'local' },
        help: { type: 'boolean', default: false },
      },
    }),
);
const [minutes, objects, rate, resyncSeconds, sampleSeconds] = [
  values.minutes,
  values.objects,
  values.rate,
  values.resync,
  values.sample,
].map(Number);
if (![minutes, objects, rate, resyncSeconds, sampleSeconds].every((value) => Number.isFinite(value) && value > 0)) {
  console.error('--minutes, --objects, --rate, --resync and --sample take positive numbers');
  process.exit(2);
}

/** Processes whose parent is this process, by their role. */
function children(): { pid: number; role: string }[] {
  const found: { pid: number; role: string }[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) !== process.pid) continue;
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      const binary = cmdline[0].split('/').pop()!;
      const role =
        binary === 'node' || binary.startsWith('node')
          ? `function ${cmdline.slice(1).find((arg) => !arg.startsWith('-') && !arg.endsWith('.mjs') && !arg.endsWith('.ts')) ?? '?'}`
          : binary;
      found.push({ pid: Number(entry), role });
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

function rssMiB(pid: number): number | undefined {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .find((candidate) => candidate.startsWith('VmRSS:'));
    return Number(line!.split(/\s+/)[1]) / 1024;
  } catch {
    return undefined;
  }
}

interface Sample {
  at: number;
  rss: Record<string, number>;
}
const samples: Sample[] = [];
const errors: string[] = [];

// The plane's own warnings and errors, printed as they come.
const log = pino(
  { level: 'warn' },
  new Writable({
    write(chunk, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) {
        let entry: Record<string, unknown>;
        try {
          entry = JSON.parse(line);
        } catch {
          entry = { msg: line };
        }
        const { level, time, pid, hostname, msg, component, ...details } = entry;
        const text = `${stamp()} ${Number(level) >= 50 ? 'ERROR' : 'WARN'} [${String(component ?? '?')}] ${String(msg ?? line)} ${JSON.stringify(details).slice(0, 300)}`;
        errors.push(text);
        console.log(text);
      }
      done();
    },
  }),
);

const bundled = await bundledFunctions(tempDir('opfn-soak-dist-'));
const cluster = await startTestCluster();
const kube = KubeClient.fromFile(cluster.cp.kubeconfigPath);
const state = planeStateDir('opfn-soak-');
const plane = new EventPlane({
  functions: [immortalContainer],
  kube: KubeClient.fromFile(cluster.cp.kubeconfigPath),
  kubeconfigPath: cluster.cp.kubeconfigPath,
  log,
  stateDir: state.dir,
  idleTimeoutMs: 30_000,
  resyncIntervalMs: resyncSeconds * 1000,
  env: { LOG_LEVEL: 'warn' },
  command: bundled.command,
});
const ops = { create: 0, update: 0, delete: 0, failed: 0 };
let converged = false;
let behind: string[] = [];
try {
  await plane.start();
  await cluster.cp.request('POST', '/api/v1/namespaces', { metadata: { name: NAMESPACE } });
  console.log(
    `${stamp()} soak: ${minutes} min, ~${objects} ImmortalContainers, ${rate} operations/s, resync every ${resyncSeconds} s, RSS every ${sampleSeconds} s (MiB)`,
  );

  const sample = () => {
    const rss: Record<string, number> = { 'plane (source+broker+activator)': process.memoryUsage().rss / 1024 / 1024 };
    for (const child of children()) {
      const value = rssMiB(child.pid);
      if (value !== undefined) rss[`${child.role} [${child.pid}]`] = value;
    }
    samples.push({ at: performance.now(), rss });
    console.log(
      `${stamp()} rss ${Object.entries(rss)
        .map(([role, value]) => `${role} ${value.toFixed(0)}`)
        .join(' | ')}   ops ${JSON.stringify(ops)}, errors ${errors.length}`,
    );
  };
  sample();
  const sampler = setInterval(sample, sampleSeconds * 1000);

  const alive: string[] = [];
  let serial = 0;
  const deadline = performance.now() + minutes * 60_000;
  const interval = 1000 / rate;
  let next = performance.now();
  const inFlight = new Set<Promise<void>>();
  while (performance.now() < deadline) {
    // Below the population: mostly create; at it: update or delete as often as create.
    const roll = Math.random();
    const op =
      alive.length < objects * 0.9 ? (roll < 0.8 ? 'create' : 'update') : roll < 0.34 ? 'create' : roll < 0.67 ? 'update' : 'delete';
    const work = (async () => {
      try {
        if (op === 'create' || alive.length === 0) {
          const name = `soak-${serial++}`;
          await kube.create(ImmortalContainerKind, {
            apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
            kind: 'ImmortalContainer',
            metadata: { name, namespace: NAMESPACE },
            spec: { image: 'nginx:1.0' },
          });
          alive.push(name);
          ops.create++;
        } else if (op === 'update') {
          const name = alive[Math.floor(Math.random() * alive.length)];
          await kube.mergePatch(ImmortalContainerKind, { namespace: NAMESPACE, name }, { spec: { image: `nginx:1.${serial++ % 50}` } });
          ops.update++;
        } else {
          const name = alive.splice(Math.floor(Math.random() * alive.length), 1)[0];
          await kube.delete(ImmortalContainerKind, { namespace: NAMESPACE, name });
          ops.delete++;
        }
      } catch (error) {
        ops.failed++;
        const text = `${stamp()} DRIVER ${op} failed: ${(error as Error).message}`;
        errors.push(text);
        console.log(text);
      }
    })();
    inFlight.add(work);
    void work.finally(() => inFlight.delete(work));
    if (inFlight.size >= 32) await Promise.race(inFlight);
    next += interval;
    await sleep(Math.max(0, next - performance.now()));
  }
  await Promise.all(inFlight);
  clearInterval(sampler);

  // Converged: every remaining object has its pod, for its current image and generation.
  console.log(`${stamp()} churn over; waiting (2 min at most) for every object to converge`);
  const until = performance.now() + 120_000;
  while (performance.now() < until) {
    const ics = (await kube.list<ImmortalContainer>(ImmortalContainerKind, { namespace: NAMESPACE })).items;
    const pods = new Map((await kube.list<PodObject>(Pod, { namespace: NAMESPACE })).items.map((pod) => [pod.metadata.name, pod]));
    behind = ics
      .filter(
        (ic) =>
          pods.get(podNameFor(ic))?.spec?.containers?.[0]?.image !== ic.spec.image ||
          ic.status?.observedGeneration !== ic.metadata.generation ||
          ic.status?.currentPod !== podNameFor(ic),
      )
      .map((ic) => ic.metadata.name!);
    if (behind.length === 0) {
      converged = true;
      break;
    }
    await sleep(2000);
  }
  sample();
} finally {
  await plane.stop();
  state.release(plane);
  await cluster.stop();
}

const roles = [...new Set(samples.flatMap((entry) => Object.keys(entry.rss)))];
console.log(
  `\n${converged ? 'every remaining object converged' : `NOT CONVERGED: ${behind.length} objects behind, e.g. ${behind.slice(0, 5).join(', ')}`}; operations ${JSON.stringify(ops)}; ${errors.length} warnings/errors logged by the plane or the driver`,
);
console.log('RSS (MiB)                                  first     min     max    last');
const summary = roles.map((role) => {
  const series = samples.map((entry) => entry.rss[role]).filter((value) => value !== undefined);
  const row = { role, first: series[0], min: Math.min(...series), max: Math.max(...series), last: series.at(-1)!, samples: series.length };
  console.log(`${role.padEnd(40)} ${[row.first, row.min, row.max, row.last].map((value) => value.toFixed(0).padStart(7)).join(' ')}`);
  return row;
});
writeResults({
  benchmark: 'soak',
  label: values.label,
  date: new Date().toISOString(),
  command: `npm run soak -- ${process.argv.slice(2).join(' ')}`.trim(),
  environment: { node: process.version, cpus: cpus().length },
  options: { minutes, objects, rate, resyncSeconds, sampleSeconds },
  converged,
  behind: behind.slice(0, 50),
  ops,
  errors,
  summary,
  samples,
});
process.exitCode = converged ? 0 : 1;
