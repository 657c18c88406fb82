// What "converged" means for each built-in function whose contract an endpoint may claim: the
// example object it starts from (crds/examples), the child it keeps (the kit deletes it and
// expects it back), and a spec edit whose effect the child shows (the kit forges one in an
// event body, which must never take effect, and delivers an edit's events out of order, which
// must end at the newer spec). Data only: the checks (checks.ts) are the same for every function.
// The composite function's objects are parents of a CompositeController the kit installs, with
// the hook it serves (composite-hook.ts).
import { join } from 'node:path';
import { CRD_DIR, readManifests } from '../eventing/crds.ts';
import {
  apiVersionOf,
  ConfigMap,
  isControlledBy,
  Pod,
  type FunctionDeclaration,
  type KubeClient,
  type KubeObject,
  type ResourceKind,
} from '../functions/runtime/index.ts';
import { ConformanceParent, PARENT_EXAMPLE, setUpComposite, type Prerequisites } from './composite-hook.ts';

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
  /** The example's kind, when it is not the reconciled kind (the composite function's parents). */
  objectKind?: ResourceKind;
  /** What must be installed before the example can converge (the composite function: a hook and a CompositeController). */
  prerequisites?(kube: KubeClient, declaration: FunctionDeclaration, suffix: string): Promise<Prerequisites>;
}

const specWith = (object: KubeObject, spec: Record<string, unknown>): KubeObject => ({
  ...object,
  spec: { ...(object as { spec?: object }).spec, ...spec },
});
const specOf = (object: KubeObject): Record<string, any> => (object as { spec?: Record<string, any> }).spec ?? {};
/** An image no registry serves: it can only come from a forged body. */
export const FORGED_IMAGE = 'forged.invalid/from-the-event-body:1';

const CONTRACTS: Record<string, Omit<FunctionContract, 'example'> & { example?: KubeObject }> = {
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
    example: PARENT_EXAMPLE,
    objectKind: ConformanceParent,
    prerequisites: setUpComposite,
    child: {
      kind: ConfigMap,
      nameFor: (owner) => owner.metadata.name!,
      mismatch(owner, configMap) {
        if (!isControlledBy(configMap, owner)) return `ConfigMap ${configMap.metadata.name} is not controlled by ${owner.metadata.name}`;
        const message = (configMap as { data?: { message?: string } }).data?.message;
        const wanted = specOf(owner).message;
        if (message !== wanted) return `ConfigMap ${configMap.metadata.name} holds message ${message}, the parent asks for ${wanted}`;
        return undefined;
      },
    },
    specEdit: {
      edit: (object) => specWith(object, { message: 'edited' }),
      forged: (object) => specWith(object, { message: 'forged-in-the-event-body' }),
    },
  },
};

/**
 * The contract of `declaration` with its example object: a built-in function's from crds/examples,
 * another's from `examples` (the objects in the YAML files beside it). A function that is not
 * built in is held to what every function owes: its object converges (status.observedGeneration).
 */
export function contractFor(declaration: FunctionDeclaration, examples?: KubeObject[]): FunctionContract {
  const contract = (examples ? undefined : CONTRACTS[declaration.name]) ?? {};
  const kind = contract.objectKind ?? declaration.reconciles;
  const example = [...(contract.example ? [contract.example] : []), ...(examples ?? readManifests(join(CRD_DIR, 'examples')))].find(
    (object) => object.apiVersion === apiVersionOf(kind) && object.kind === kind.kind,
  );
  if (!example)
    throw new Error(
      `${examples ? 'the YAML files beside it hold' : 'crds/examples holds'} no ${kind.kind} (${apiVersionOf(kind)}) for function "${declaration.name}"`,
    );
  const { namespace: _namespace, ...metadata } = example.metadata;
  return { ...contract, example: { ...example, metadata } };
}
