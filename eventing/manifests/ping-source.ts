// A function's resync: a PingSource (sources.knative.dev/v1) on the declaration's
// `resyncSchedule` (cron, evaluated in UTC here so a deployment behaves the same in every time
// zone) sending `dev.knative.sources.ping` to the broker, tagged with the function's name like its
// other events so its Trigger routes it. The function lists its kind and reconciles every object
// (DESIGN.md: ApiServerSource never resyncs; changes made while it was down are otherwise lost).
// The event matches what the local plane publishes (`resyncEvent` in eventing/plane.ts is this object's event).
//
// A function whose reconciled kind no ApiServerSource can watch (watchableBySource) gets a second
// PingSource, its poll: every minute (a PingSource's finest schedule) a ping with POLL_DATA, on
// which the function lists its kind and reconciles only the objects that are not settled (a new
// or changed spec, a deletion, a missing finalizer). So such a kind's changes arrive within a
// minute for one list a minute, while the full resync, whose cost grows with what each object
// reconciles, keeps its own schedule.
import { type FunctionDeclaration, POLL_DATA, type KubeObject, watchableBySource } from '../../functions/runtime/index.ts';
import { FUNCTION_EXTENSION } from './wiring.ts';
import { brokerRef, labels, pingSourceName, pollSourceName, SOURCES_API, type ManifestOptions } from './options.ts';

/** How often a kind no ApiServerSource can watch is polled. */
export const POLL_SCHEDULE = '* * * * *';

/** The function's resync PingSource, and its poll when its kind cannot be watched. */
export function pingSources(declaration: FunctionDeclaration, options: ManifestOptions): KubeObject[] {
  const resync = pingSource(pingSourceName(declaration), 'resync', declaration.resyncSchedule, {}, declaration, options);
  if (watchableBySource(declaration.reconciles)) return [resync];
  return [resync, pingSource(pollSourceName(declaration), 'poll', POLL_SCHEDULE, POLL_DATA, declaration, options)];
}

function pingSource(
  name: string,
  component: string,
  schedule: string,
  data: object,
  declaration: FunctionDeclaration,
  options: ManifestOptions,
): KubeObject {
  return {
    apiVersion: SOURCES_API,
    kind: 'PingSource',
    metadata: { name, namespace: options.namespace, labels: labels(component, declaration) },
    spec: {
      schedule,
      timezone: 'UTC',
      contentType: 'application/json',
      data: JSON.stringify(data),
      ceOverrides: { extensions: { [FUNCTION_EXTENSION]: declaration.name } },
      sink: brokerRef(options),
    },
  };
}
