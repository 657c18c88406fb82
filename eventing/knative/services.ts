// Knative Services on the local plane. A Service whose container sets FUNCTION=<name> (as
// `opfn manifests` generates it) is that function, run by the scale-from-zero activator from the
// same image entry; its address is the activator's URL for it, and its Trigger's deliveries are
// bounded by the capacity its annotations give. The activator runs each function with its
// declaration's scaling, which the generated annotations equal; a Service edited to another
// scaling reports Ready=False "ScalingNotApplied" rather than pretend. The generated dead-letter sink
// (event_display) is not run locally: the broker's dead-letter file stands in for it.
import type { Scaling } from '../../functions/runtime/declaration.ts';
import { capacityAtMaxScale } from '../activator/decider.ts';
import { keyOf, keyString, type KubeObject } from '../../functions/runtime/kinds.ts';
import type { KubeClient } from '../../functions/runtime/kube.ts';
import { DEAD_LETTER_SERVICE } from '../manifests/options.ts';
import { AUTOSCALING } from '../manifests/service.ts';
import { KnativeService } from './kinds.ts';
import { notReady, ready, writeStatus, type Verdict } from './status.ts';

type Container = { env?: { name: string; value?: string }[] };
const template = (service: KubeObject) => ((service.spec as { template?: { metadata?: { annotations?: Record<string, string> }; spec?: { containers?: Container[]; containerConcurrency?: number } } } | undefined)?.template ?? {});

/** The function a Service runs (its container's FUNCTION), if any. */
export function functionOf(service: KubeObject): string | undefined {
  return template(service).spec?.containers?.[0]?.env?.find((e) => e.name === 'FUNCTION')?.value;
}

/** Scaling from the revision template, Knative's defaults where an annotation is absent. */
export function scalingFromService(service: KubeObject): Scaling {
  const annotations = template(service).metadata?.annotations ?? {};
  const number = (name: string, fallback: number) => {
    const text = annotations[`${AUTOSCALING}/${name}`];
    const value = text === undefined ? fallback : Number(text);
    if (!Number.isInteger(value) || value < 0) throw new Error(`annotation ${AUTOSCALING}/${name} "${text}" is not a whole number ≥ 0`);
    return value;
  };
  return { minScale: number('min-scale', 0), maxScale: number('max-scale', 0), target: number('target', 0), containerConcurrency: template(service).spec?.containerConcurrency ?? 0 };
}

/** A URL (with the function's capacity at full scale, which bounds its Trigger's deliveries), the dead-letter stand-in, or why neither. */
export type Address = { url: string; maxInFlight?: number } | { standIn: 'dead-letters' } | { reason: string; message: string };

export interface LocalFunctions {
  /** The activator's URL for a function, or undefined when it does not run it. */
  urlFor(name: string): string | undefined;
  /** The scaling the activator runs the function with. */
  scalingOf(name: string): Scaling | undefined;
}

/** Keeps the Services of the local plane, answers where each one is, and reports their readiness. */
export class ServiceDirectory {
  readonly #services = new Map<string, KubeObject>();
  readonly #kube: KubeClient;
  readonly #functions: LocalFunctions;

  constructor(kube: KubeClient, functions: LocalFunctions) {
    this.#kube = kube;
    this.#functions = functions;
  }

  /** Where a Service in `namespace` named `name` is reachable locally. */
  address(namespace: string, name: string): Address {
    const service = this.#services.get(`${namespace}/${name}`);
    if (!service) return { reason: 'ServiceNotFound', message: `Knative Service ${namespace}/${name} does not exist` };
    return this.#verdictAddress(service);
  }

  #verdictAddress(service: KubeObject): Address {
    const fn = functionOf(service);
    if (fn === undefined) {
      if (service.metadata.name === DEAD_LETTER_SERVICE) return { standIn: 'dead-letters' };
      return { reason: 'NotRunLocally', message: 'the local plane runs only Services of this project\'s image (a container with env FUNCTION)' };
    }
    const url = this.#functions.urlFor(fn);
    if (!url) return { reason: 'UnknownFunction', message: `the local plane does not run function "${fn}"` };
    try {
      return { url, maxInFlight: capacityAtMaxScale(scalingFromService(service)) };
    } catch {
      return { url };
    }
  }

  verdict(service: KubeObject): Verdict {
    const address = this.#verdictAddress(service);
    if ('standIn' in address) return { conditions: [ready('DeadLetterFile', 'locally the broker\'s dead-letter file stands in for this sink')] };
    if ('reason' in address) return { conditions: [notReady(address.reason, address.message)] };
    const fn = functionOf(service)!;
    let scaling: Scaling;
    try {
      scaling = scalingFromService(service);
    } catch (error) {
      return { conditions: [notReady('InvalidAnnotation', (error as Error).message)] };
    }
    const running = this.#functions.scalingOf(fn);
    if (running && JSON.stringify(running) !== JSON.stringify(scaling)) {
      return { conditions: [notReady('ScalingNotApplied', `the local activator runs ${fn} with its declaration's scaling ${JSON.stringify(running)}, not ${JSON.stringify(scaling)}; change the declaration to change it locally (a cluster applies the annotations)`)], fields: { url: address.url, address: { url: address.url } } };
    }
    return { conditions: [ready()], fields: { url: address.url, address: { url: address.url } } };
  }

  async apply(service: KubeObject): Promise<void> {
    this.#services.set(keyString(keyOf(service)), service);
    await writeStatus(this.#kube, KnativeService, service, this.verdict(service));
  }

  async remove(service: KubeObject): Promise<void> {
    this.#services.delete(keyString(keyOf(service)));
  }
}
