// Knative Services on the local plane. A Service whose container sets FUNCTION=<name> (as
// `opfn manifests` generates it) is that function, run by the scale-from-zero activator from the
// same image entry; its address is the activator's URL for it, and its Trigger's deliveries are
// bounded by the capacity its annotations give. The activator runs the function with the
// revision template's scaling (autoscaling annotations, containerConcurrency), timeoutSeconds and
// delivery budget (the container's OPFN_DELIVERY_BUDGET_SECONDS); an autoscaling annotation it
// does not implement (IMPLEMENTED_ANNOTATIONS) makes the Service not Ready with the reason
// UnsupportedAnnotation rather than being ignored. A Service edited live is
// applied to the running function (Activator.configure), as Serving rolls out a new revision: a
// changed environment replaces its instances; an image other than the project's own is refused
// (ImageNotRunLocally), as the plane has only this project's code to run. A
// deleted one withdraws it (Activator.withdraw), as Serving removes the revision. The generated
// dead-letter sink (event_display) is not run locally: the broker's dead-letter file stands in
// for it.
import { type FunctionDeclaration, type Scaling, keyOf, keyString, type KubeObject } from '../../functions/runtime/index.ts';
import { deliveryBudgetFromEnvironment } from '../../functions/runtime/host/index.ts';
import { capacityAtMaxScale, DEFAULT_TIMEOUT_SECONDS, type FunctionConfiguration } from '../activator/index.ts';
import { AUTOSCALING, DEAD_LETTER_SERVICE, DEFAULT_OPTIONS } from '../manifests/index.ts';
import { KnativeService } from './kinds.ts';
import { notReady, ready, type StatusWriter, type Verdict } from './status.ts';

type Container = { image?: string; env?: { name: string; value?: string; valueFrom?: unknown }[] };
const template = (service: KubeObject) =>
  (
    service.spec as
      | {
          template?: {
            metadata?: { annotations?: Record<string, string> };
            spec?: { containers?: Container[]; containerConcurrency?: number };
          };
        }
      | undefined
  )?.template ?? {};

/** The function a Service runs (its container's FUNCTION), if any. */
export function functionOf(service: KubeObject): string | undefined {
  return template(service).spec?.containers?.[0]?.env?.find((e) => e.name === 'FUNCTION')?.value;
}

/**
 * The autoscaling annotations the local plane implements (knative/serving
 * pkg/apis/autoscaling/register.go), each with the older camelCase spelling Serving still reads
 * after the kebab-case one, and the values it honours: Knative's autoscaler (class kpa) on the
 * concurrency metric, min-scale, max-scale and target.
 */
const IMPLEMENTED_ANNOTATIONS: Record<string, string[]> = {
  class: ['class'],
  metric: ['metric'],
  'min-scale': ['min-scale', 'minScale'],
  'max-scale': ['max-scale', 'maxScale'],
  target: ['target'],
};
const KPA = 'kpa.autoscaling.knative.dev';

/** An autoscaling annotation the local plane does not implement (the Service is not Ready with this reason). */
export class UnsupportedAnnotation extends Error {
  readonly reason = 'UnsupportedAnnotation';
}

/** Scaling from the revision template, Knative's defaults where an annotation is absent; throws for one it cannot honour. */
export function scalingFromService(service: KubeObject): Scaling {
  const annotations = template(service).metadata?.annotations ?? {};
  const known = new Set(
    Object.values(IMPLEMENTED_ANNOTATIONS)
      .flat()
      .map((name) => `${AUTOSCALING}/${name}`),
  );
  for (const key of Object.keys(annotations)) {
    if (key.startsWith(`${AUTOSCALING}/`) && !known.has(key))
      throw new UnsupportedAnnotation(
        `annotation ${key} is not implemented by the local plane (it implements ${Object.keys(IMPLEMENTED_ANNOTATIONS)
          .map((name) => `${AUTOSCALING}/${name}`)
          .join(', ')})`,
      );
  }
  const read = (name: string): [key: string, value: string] | undefined => {
    const key = IMPLEMENTED_ANNOTATIONS[name]!.map((spelling) => `${AUTOSCALING}/${spelling}`).find(
      (candidate) => annotations[candidate] !== undefined,
    );
    return key === undefined ? undefined : [key, annotations[key]!];
  };
  const klass = read('class');
  if (klass && klass[1] !== KPA)
    throw new UnsupportedAnnotation(
      `annotation ${klass[0]} "${klass[1]}": the local plane scales as Knative's own autoscaler (${KPA}) does, nothing else`,
    );
  const metric = read('metric');
  if (metric && metric[1] !== 'concurrency')
    throw new UnsupportedAnnotation(`annotation ${metric[0]} "${metric[1]}": the local plane scales on concurrency only`);
  const number = (name: string, fallback: number) => {
    const found = read(name);
    const value = found === undefined ? fallback : Number(found[1]);
    if (!Number.isInteger(value) || value < 0) throw new Error(`annotation ${found?.[0]} "${found?.[1]}" is not a whole number ≥ 0`);
    return value;
  };
  return {
    minScale: number('min-scale', 0),
    maxScale: number('max-scale', 0),
    target: number('target', 0),
    containerConcurrency: template(service).spec?.containerConcurrency ?? 0,
  };
}

/**
 * The image the local plane runs: this project's own code, which the generated Services name
 * (`opfn manifests` without --image). Another image is code the plane does not have.
 */
export const LOCAL_IMAGE = DEFAULT_OPTIONS.image;

/** An image other than LOCAL_IMAGE (the Service is not Ready with this reason). */
export class ImageNotRunLocally extends Error {
  readonly reason = 'ImageNotRunLocally';
}

/**
 * The container environment of the revision template, name → value. An entry with `valueFrom`
 * (a Secret's key) is left out: the function process inherits that variable from the plane's
 * own environment, if set there.
 */
export function containerEnvOf(service: KubeObject): Record<string, string> {
  const env: Record<string, string> = {};
  for (const entry of template(service).spec?.containers?.[0]?.env ?? [])
    if (typeof entry.value === 'string') env[entry.name] = entry.value;
  return env;
}

/**
 * The generated Services with each function's declared configuration taken from `environment`
 * where it sets it (`EXCHANGE_RATE_PROVIDER_URL=… npm start`), instead of the declared default:
 * the local plane runs what its Services say, so the value belongs in the Service, where
 * `kubectl get ksvc -o yaml` shows it and an edit replaces it. Secret parameters (valueFrom) are
 * left as they are: the process inherits those.
 */
export function withConfigFromEnvironment(
  objects: KubeObject[],
  functions: FunctionDeclaration[],
  environment: Record<string, string | undefined> = process.env,
): KubeObject[] {
  return objects.map((object) => {
    const declaration = object.kind === 'Service' ? functions.find((fn) => fn.name === functionOf(object)) : undefined;
    if (!declaration) return object;
    const names = new Set(declaration.config.filter((parameter) => !parameter.secret).map((parameter) => parameter.name));
    const spec = object.spec as { template: { spec: { containers: Container[] } } };
    const [container, ...others] = spec.template.spec.containers;
    const env = container!.env?.map((entry) =>
      names.has(entry.name) && typeof entry.value === 'string' && environment[entry.name] !== undefined
        ? { ...entry, value: environment[entry.name] }
        : entry,
    );
    return {
      ...object,
      spec: { ...spec, template: { ...spec.template, spec: { ...spec.template.spec, containers: [{ ...container, env }, ...others] } } },
    };
  });
}

/**
 * Scaling, request timeout and delivery budget of the revision template (Knative's default
 * timeout where unset; the budget from the container's OPFN_DELIVERY_BUDGET_SECONDS, else derived
 * from the timeout as the generated Service's is).
 */
export function configurationFromService(service: KubeObject): FunctionConfiguration {
  const timeoutSeconds = (template(service).spec as { timeoutSeconds?: unknown } | undefined)?.timeoutSeconds;
  if (timeoutSeconds !== undefined && (typeof timeoutSeconds !== 'number' || !Number.isInteger(timeoutSeconds) || timeoutSeconds < 0))
    throw new Error(`timeoutSeconds ${JSON.stringify(timeoutSeconds)} is not a whole number ≥ 0`);
  const image = template(service).spec?.containers?.[0]?.image;
  if (image !== undefined && image !== LOCAL_IMAGE)
    throw new ImageNotRunLocally(
      `image "${image}": the local plane runs this project's code as image "${LOCAL_IMAGE}" and cannot run another (set it back, or deploy to a cluster with Knative)`,
    );
  const containerEnv = containerEnvOf(service);
  const deliveryBudgetSeconds = deliveryBudgetFromEnvironment(containerEnv);
  return {
    scaling: scalingFromService(service),
    timeoutSeconds: timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS,
    ...(deliveryBudgetSeconds === undefined ? {} : { deliveryBudgetSeconds }),
    containerEnv,
  };
}

/** A URL (with the function's capacity at full scale, which bounds its Trigger's deliveries), the dead-letter stand-in, or why neither. */
export type Address = { url: string; maxInFlight?: number } | { standIn: 'dead-letters' } | { reason: string; message: string };

/** The activator, as far as Services need it. */
export interface LocalFunctions {
  /** The activator's URL for a function, or undefined when it does not run it. */
  urlFor(name: string): string | undefined;
  /** Runs the function with this scaling and timeout from now on (again, if it was withdrawn); throws when they are not usable. */
  configure(name: string, configuration: FunctionConfiguration): void;
  /** No Service runs the function any more: stop its instances and refuse its requests until configure(). */
  withdraw(name: string, reason: string): void;
}

/** Keeps the Services of the local plane, answers where each one is, applies their scaling, and reports their readiness. */
export class ServiceDirectory {
  readonly #services = new Map<string, KubeObject>();
  readonly #status: StatusWriter;
  readonly #functions: LocalFunctions;

  constructor(status: StatusWriter, functions: LocalFunctions) {
    this.#status = status;
    this.#functions = functions;
  }

  /** Where a Service in `namespace` named `name` is reachable locally. */
  address(namespace: string, name: string): Address {
    const service = this.#services.get(`${namespace}/${name}`);
    if (!service) return { reason: 'ServiceNotFound', message: `Knative Service ${namespace}/${name} does not exist` };
    return this.#address(service);
  }

  #address(service: KubeObject): Address {
    const fn = functionOf(service);
    if (fn === undefined) {
      if (service.metadata.name === DEAD_LETTER_SERVICE) return { standIn: 'dead-letters' };
      return {
        reason: 'NotRunLocally',
        message: "the local plane runs only Services of this project's image (a container with env FUNCTION)",
      };
    }
    const url = this.#functions.urlFor(fn);
    if (!url) return { reason: 'UnknownFunction', message: `the local plane does not run function "${fn}"` };
    try {
      return { url, maxInFlight: capacityAtMaxScale(scalingFromService(service)) };
    } catch {
      return { url };
    }
  }

  /**
   * Applies the Service: its function now runs with the revision template's scaling and timeout
   * (as Serving rolls out a new revision), and the verdict says so or why not (an invalid
   * annotation or configuration leaves the function as it ran).
   */
  #run(service: KubeObject): Verdict {
    const address = this.#address(service);
    if ('standIn' in address)
      return { conditions: [ready('DeadLetterFile', "locally the broker's dead-letter file stands in for this sink")] };
    if ('reason' in address) return { conditions: [notReady(address.reason, address.message)] };
    let configuration: FunctionConfiguration;
    try {
      configuration = configurationFromService(service);
    } catch (error) {
      return {
        conditions: [
          notReady(
            error instanceof UnsupportedAnnotation || error instanceof ImageNotRunLocally ? error.reason : 'InvalidConfiguration',
            (error as Error).message,
          ),
        ],
      };
    }
    try {
      this.#functions.configure(functionOf(service)!, configuration);
    } catch (error) {
      return { conditions: [notReady('InvalidScaling', (error as Error).message)] };
    }
    return { conditions: [ready()], fields: { url: address.url, address: { url: address.url } } };
  }

  async apply(service: KubeObject): Promise<void> {
    this.#services.set(keyString(keyOf(service)), service);
    await this.#status.write(KnativeService, service, this.#run(service));
  }

  async remove(service: KubeObject): Promise<void> {
    this.#services.delete(keyString(keyOf(service)));
    const fn = functionOf(service);
    if (fn === undefined || !this.#functions.urlFor(fn)) return;
    // Another Service may run the same function; the function goes with the last one, as the revision's pods do.
    if ([...this.#services.values()].some((other) => functionOf(other) === fn)) return;
    this.#functions.withdraw(fn, `Knative Service ${keyString(keyOf(service))} was deleted`);
  }
}
