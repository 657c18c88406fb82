// The finalizer a function declares, driven around its reconcile (controllerutil.AddFinalizer /
// RemoveFinalizer; Metacontroller's finalizer Manager in pkg/controller/common/finalizer): added
// before reconcile to an object that is not being deleted; on deletion `finalize` runs instead
// of reconcile, and the finalizer goes once finalize says it is done. A function without a
// declared finalizer costs nothing here.
import type { FunctionDeclaration, ReconcileContext, ReconcileResult } from '../declaration.ts';
import { groupKind, type KindKey } from '../kinds.ts';
import { ensureFinalizer, removeFinalizer } from '../reconciler.ts';

/** A finalize that answered "not yet" is tried again after this long. */
export const FINALIZE_AGAIN_SECONDS = 10;

export async function reconcileWithFinalizer(
  declaration: FunctionDeclaration,
  key: KindKey,
  ctx: ReconcileContext,
): Promise<ReconcileResult | void> {
  const finalizer = declaration.finalizer;
  // The declared finalizer is for the declared kind; keys of run-time kinds are the function's own business.
  if (!finalizer || groupKind(key.kind) !== groupKind(declaration.reconciles)) return declaration.reconcile(key, ctx);
  const { kube } = ctx;
  const object = await kube.get(key.kind, key);
  if (!object) return declaration.reconcile(key, { ...ctx, eventObject: undefined });
  const has = object.metadata.finalizers?.includes(finalizer.name) ?? false;
  if (object.metadata.deletionTimestamp) {
    // Being deleted without our finalizer: nothing of ours is left to clean up.
    if (!has) return undefined;
    if (!(await finalizer.finalize(object, ctx))) return { requeueAfterSeconds: FINALIZE_AGAIN_SECONDS };
    await removeFinalizer(kube, key.kind, object, finalizer.name);
    return undefined;
  }
  const current = has ? object : await ensureFinalizer(kube, key.kind, object, finalizer.name);
  // A fresh read: as good an event object as any event body, and one read the reconcile need not make again.
  return declaration.reconcile(key, {
    ...ctx,
    eventObject: current ?? object,
    current,
    ...(current && !has ? { finalizerAdded: true } : {}),
  });
}
