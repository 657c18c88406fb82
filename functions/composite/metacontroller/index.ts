// The face of the pure Metacontroller core the `composite` function serves: CompositeController
// specs, hook requests and answers, claiming children, planning their writes, and the webhook
// client and server. Nothing here calls the Kubernetes API; the function (../) does.
export { forCreate, LAST_APPLIED_ANNOTATION } from './apply.ts';
export { potentialParents, referencedParent, type ParentKind } from './child-events.ts';
export { controllerRefFor, planClaim, type ClaimAction } from './claim.ts';
export { checkController, policyRulesFor, resyncPeriodMs } from './controller-spec.ts';
export { finalizerAction, finalizerEnabled, finalizerName, hookToCall, isOurs } from './finalize.ts';
export { callCompositeHook, postJson, webhookTarget, type HookFailure, type HookResult } from './hook-client.ts';
export { buildHookRequest, type HookRequestInput } from './hook-request.ts';
export { isStrict } from './hook-response.ts';
export { childErrorsMessage, objectToWrite, updateStrategies, type ChildOperation, type UpdateStrategies } from './manage-children.ts';
export { ALLOW_PRIVILEGED_ANNOTATION, PRIVILEGED_CHILD_REASON } from './privileged.ts';
export { parseCustomizeResponse, relatedQueries, selectRelated } from './related.ts';
export { childSelector, CONTROLLER_UID_LABEL, parentFilter, type Selector } from './selector.ts';
export { serveHooks, type HookFunction, type HookServer } from './serve-hook.ts';
export { planSync, type SyncPlan, type SyncPlanInput } from './sync-plan.ts';
export {
  HookRequestError,
  type CompositeController,
  type CompositeHookResponse,
  type Hook,
  type ObjectMap,
  type ResolvedResource,
} from './types.ts';
