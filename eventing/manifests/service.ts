// A function's Knative Service (serving.knative.dev/v1), consistent with the Dockerfile: the
// image's entry picks the function from FUNCTION, listens on $PORT (Knative sets it; 8080, as
// EXPOSE says), runs as the image's non-root user (uid 1000) and only reads its filesystem (the
// compile cache is filled at build time and only read at run time; Node skips writing it when
// the folder is read-only, see test/integration/bundle.test.ts).
//
// Knative Serving rules followed here (knative/serving pkg/apis/serving, docs "Configuring
// autoscaling"): autoscaling annotations belong on the revision template
// (`spec.template.metadata.annotations`; on the Service's own metadata they are rejected);
// `containerConcurrency` (0 = unlimited) and `timeoutSeconds` (default 300) are revision spec
// fields; the label `networking.knative.dev/visibility: cluster-local` keeps the Service off the
// ingress (only the broker calls it); probes name a path but no port (Knative probes the serving
// port through queue-proxy); a container securityContext may only set capabilities,
// readOnlyRootFilesystem, runAsUser, runAsGroup and runAsNonRoot (SecurityContextMask in
// pkg/apis/serving/fieldmask.go).
import { type FunctionDeclaration, type KubeObject, INSTALL_CONFIG, installConfigValues } from '../../functions/runtime/index.ts';
import { DELIVERY_BUDGET_ENV, deliveryBudgetFor } from '../../functions/runtime/host/index.ts';
import { KNATIVE_SERVICE_API, labels, REVISION_TIMEOUT_SECONDS, type ManifestOptions } from './options.ts';
import { serviceAccountName } from './rbac.ts';

export const AUTOSCALING = 'autoscaling.knative.dev';
export const VISIBILITY_LABEL = 'networking.knative.dev/visibility';
/** The user the image runs as (USER in the Dockerfile: the `node` user of node:24-slim). */
export const IMAGE_UID = 1000;
export const CONTAINER_PORT = 8080;
export const READINESS_PATH = '/health/readiness';
export const LIVENESS_PATH = '/health/liveness';

/** The Secret a function's secret configuration comes from (one key per parameter). */
export const configSecretName = (declaration: FunctionDeclaration): string => `opfn-${declaration.name}-config`;

/**
 * The container's environment: FUNCTION; the delivery budget for the Service's timeoutSeconds
 * (the function cannot see the timeout, so edit both together; `opfn manifests` and the local
 * plane refuse a budget the timeout leaves no room after); then the declared configuration with
 * its defaults (change them in the generated file or with kustomize). Secret parameters come from the
 * function's config Secret (valueFrom.secretKeyRef, optional when the parameter has a default),
 * so no secret ever sits in a manifest. A parameter about the install itself (INSTALL_CONFIG:
 * namespace, Broker, scope) gets this install's value, and in an install limited to one namespace
 * every function gets its scope and namespace.
 */
export function environment(declaration: FunctionDeclaration, options: ManifestOptions): Record<string, unknown>[] {
  const install = installConfigValues(options);
  const required = declaration.config.filter((parameter) => !parameter.secret && parameter.default === undefined);
  if (required.length)
    throw new Error(
      `function ${declaration.name}: config ${required.map((p) => p.name).join(', ')} has no default; give it one (or make it secret) so the generated Service can set it`,
    );
  // An install limited to one namespace tells every function so (installNamespaceFrom): its Role
  // grants only there, and the runtime lists there.
  const declared = new Set(declaration.config.map((parameter) => parameter.name));
  const scope =
    options.scope === 'namespace'
      ? [INSTALL_CONFIG.scope, INSTALL_CONFIG.namespace]
          .filter((name) => !declared.has(name))
          .map((name) => ({ name, value: install[name] }))
      : [];
  return [
    { name: 'FUNCTION', value: declaration.name },
    { name: DELIVERY_BUDGET_ENV, value: String(deliveryBudgetFor(REVISION_TIMEOUT_SECONDS)) },
    ...scope,
    ...declaration.config.map((parameter) =>
      parameter.secret
        ? {
            name: parameter.name,
            valueFrom: {
              secretKeyRef: { name: configSecretName(declaration), key: parameter.name, optional: parameter.default !== undefined },
            },
          }
        : { name: parameter.name, value: install[parameter.name] ?? parameter.default },
    ),
  ];
}

/** The revision template's autoscaling annotations, from the declaration's scaling. */
export function autoscalingAnnotations(declaration: FunctionDeclaration): Record<string, string> {
  const { scaling } = declaration;
  return {
    [`${AUTOSCALING}/metric`]: 'concurrency',
    [`${AUTOSCALING}/min-scale`]: String(scaling.minScale),
    [`${AUTOSCALING}/max-scale`]: String(scaling.maxScale),
    // 0 means Knative's default (100): leave it to Knative rather than restate it.
    ...(scaling.target > 0 ? { [`${AUTOSCALING}/target`]: String(scaling.target) } : {}),
  };
}

export function knativeService(declaration: FunctionDeclaration, options: ManifestOptions): KubeObject {
  const objectLabels = labels('function', declaration);
  return {
    apiVersion: KNATIVE_SERVICE_API,
    kind: 'Service',
    metadata: { name: declaration.name, namespace: options.namespace, labels: { ...objectLabels, [VISIBILITY_LABEL]: 'cluster-local' } },
    spec: {
      template: {
        metadata: { labels: objectLabels, annotations: autoscalingAnnotations(declaration) },
        spec: {
          serviceAccountName: serviceAccountName(declaration),
          containerConcurrency: declaration.scaling.containerConcurrency,
          timeoutSeconds: REVISION_TIMEOUT_SECONDS,
          containers: [
            {
              name: 'function',
              image: options.image,
              env: environment(declaration, options),
              ports: [{ name: 'http1', containerPort: CONTAINER_PORT }],
              readinessProbe: { httpGet: { path: READINESS_PATH }, periodSeconds: 1 },
              livenessProbe: { httpGet: { path: LIVENESS_PATH }, periodSeconds: 10, failureThreshold: 3 },
              // A reconcile mostly waits on the API server: little CPU, no CPU limit (throttling
              // would only slow cold starts); memory bounded (idle RSS is about 60 MiB).
              resources: { requests: { cpu: '50m', memory: '96Mi' }, limits: { memory: '256Mi' } },
              securityContext: {
                runAsNonRoot: true,
                runAsUser: IMAGE_UID,
                runAsGroup: IMAGE_UID,
                readOnlyRootFilesystem: true,
                capabilities: { drop: ['ALL'] },
              },
            },
          ],
        },
      },
    },
  };
}
