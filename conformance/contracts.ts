// What "converged" means for each built-in function whose contract an endpoint may claim: the
// example object it starts from (crds/examples), the child it keeps (the kit deletes it and
// expects it back), and a spec edit whose effect the child shows (the kit forges one in an
// event body, which must never take effect, and delivers an edit's events out of order, which
// must end at the newer spec). Data only: the checks (checks.ts) are the same for every function.
import { join } from 'node:path';
import { CRD_DIR, readManifests } from '../eventing/crds.ts';
import {
  apiVersionOf,
  ConfigMap,
  isControlledBy,
  Pod,
  type FunctionDeclaration,
  type KubeObject,
  type ResourceKind,
} from '../functions/runtime/index.ts';

/** A child the function keeps for each object of its kind. */
export interface ChildContract {
  kind: ResourceKind;
  nameFor(object: KubeObject): string;
  /** Why `child` is not what `owner` (as the API server holds it) asks for, or undefined when it is. */
  mismatch(owner: KubeObject, child: KubeObject): string | undefined;
}

export interface FunctionContract {
  /** The example object (crds/examples), without namespace; the kit names it for its run. */
  example: KubeObject;
  child?: ChildContract;
  /** A spec edit the child shows: `edit` a real one, `forged` one that only an event body claims. */
  specEdit?: { edit(object: KubeObject): KubeObject; forged(object: KubeObject): KubeObject };
  /** Why no convergence can be checked from the example alone (the composite function needs a hook server). */
  convergenceNotChecked?: string;
}

const specWith = (object: KubeObject, spec: Record<string, unknown>): KubeObject => ({
  ...object,
  spec: { ...(object as { spec?: object }).spec, ...spec },
});
const specOf = (object: KubeObject): Record<string, any> => (object as { spec?: Record<string, any> }).spec ?? {};
/** An image no registry serves: it can only come from a forged body. */
export const FORGED_IMAGE = 'forged.invalid/from-the-event-body:1';

const CONTRACTS: Record<string, Omit<FunctionContract, 'example'>> = {
  'immortal-container': {
    child: {
      kind: Pod,
      nameFor: (owner) => `${owner.metadata.name}-immortalpod`,
      mismatch(owner, pod) {
        if (!isControlledBy(pod, owner)) return `pod ${pod.metadata.name} is not controlled by ${owner.metadata.name}`;
        const image = (pod as { spec?: { containers?: { image?: string }[] } }).spec?.containers?.[0]?.image;
        const wanted = specOf(owner).image;
        if (image !== wanted) return `pod ${pod.metadata.name} runs image ${image}, the object asks for ${wanted}`;
        const status = (owner as { status?: { currentPod?: string } }).status;
        if (status?.currentPod !== pod.metadata.name) return `status.currentPod is ${status?.currentPod}, not ${pod.metadata.name}`;
        return undefined;
      },
    },
    specEdit: {
      edit: (object) => specWith(object, { image: 'busybox:conformance' }),
      forged: (object) => specWith(object, { image: FORGED_IMAGE }),
    },
  },
  'exchange-rate': {
    child: {
      kind: ConfigMap,
      nameFor: (owner) => owner.metadata.name!,
      mismatch(owner, configMap) {
        if (!isControlledBy(configMap, owner)) return `ConfigMap ${configMap.metadata.name} is not controlled by ${owner.metadata.name}`;
        const currency = configMap.metadata.annotations?.['operators.brennerm.github.io/currency'];
        const wanted = specOf(owner).currency;
        if (currency !== wanted) return `ConfigMap ${configMap.metadata.name} holds the rate of ${currency}, the object asks for ${wanted}`;
        if (!(configMap as { data?: { rate?: string } }).data?.rate) return `ConfigMap ${configMap.metadata.name} holds no rate`;
        return undefined;
      },
    },
    specEdit: {
      edit: (object) => specWith(object, { currency: 'GBP' }),
      forged: (object) => specWith(object, { currency: 'CHF' }),
    },
  },
  copyrator: {},
  composite: {
    convergenceNotChecked:
      'a CompositeController converges through its hooks; the kit serves none (the Metacontroller hook test covers it)',
  },
};

/**
 * The contract of `declaration` with its example object: a built-in function's from crds/examples,
 * another's from `examples` (the objects in the YAML files beside it). A function that is not
 * built in is held to what every function owes: its object converges (status.observedGeneration).
 */
export function contractFor(declaration: FunctionDeclaration, examples?: KubeObject[]): FunctionContract {
  const contract = (examples ? undefined : CONTRACTS[declaration.name]) ?? {};
  const kind = declaration.reconciles;
  const example = (examples ?? readManifests(join(CRD_DIR, 'examples'))).find(
    (object) => object.apiVersion === apiVersionOf(kind) && object.kind === kind.kind,
  );
  if (!example)
    throw new Error(
      `${examples ? 'the YAML files beside it hold' : 'crds/examples holds'} no ${kind.kind} (${apiVersionOf(kind)}) for function "${declaration.name}"`,
    );
  const { namespace: _namespace, ...metadata } = example.metadata;
  return { ...contract, example: { ...example, metadata } };
}
