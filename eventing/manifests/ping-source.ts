// A function's resync: a PingSource (sources.knative.dev/v1) on the declaration's
// `resyncSchedule` (cron, evaluated in UTC here so a deployment behaves the same in every time
// zone) sending `dev.knative.sources.ping` to the broker, tagged with the function's name like its
// other events so its Trigger routes it. The function lists its kind and reconciles every object
// (DESIGN.md: ApiServerSource never resyncs; changes made while it was down are otherwise lost).
// The event matches what the local plane publishes (`resyncEvent` in eventing/plane.ts is this object's event).
import type { FunctionDeclaration } from '../../functions/runtime/declaration.ts';
import type { KubeObject } from '../../functions/runtime/kinds.ts';
import { FUNCTION_EXTENSION } from './wiring.ts';
import { brokerRef, labels, pingSourceName, SOURCES_API, type ManifestOptions } from './options.ts';

export function pingSource(declaration: FunctionDeclaration, options: ManifestOptions): KubeObject {
  return {
    apiVersion: SOURCES_API,
    kind: 'PingSource',
    metadata: { name: pingSourceName(declaration), namespace: options.namespace, labels: labels('resync', declaration) },
    spec: {
      schedule: declaration.resyncSchedule,
      timezone: 'UTC',
      contentType: 'application/json',
      data: '{}',
      ceOverrides: { extensions: { [FUNCTION_EXTENSION]: declaration.name } },
      sink: brokerRef(options),
    },
  };
}
