// A 403 while serving a CompositeController (functions/composite/reconcile.ts): an RBAC
// denial is a narrow install without this controller (NotPermitted, regenerate it); any other 403
// (an admission policy, a quota) is reported as itself (Refused). Either is terminal: reported on
// the controller, answered 2xx, the resync tries again.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CompositeControllerKind } from '../../functions/composite/kinds.ts';
import { NOT_PERMITTED_REASON, reconcileComposite, REFUSED_REASON } from '../../functions/composite/reconcile.ts';
import { type ReconcileContext, TerminalError, kindKey, ApiError } from '../../functions/runtime/index.ts';
import { quietLog } from '../support/cluster.ts';

const refusedWith = (message: string) => {
  const kube = {
    underlying: {},
    get: async () => {
      throw new ApiError(403, 'Forbidden', `GET compositecontrollers: ${message}`, { message });
    },
  };
  return reconcileComposite(kindKey(CompositeControllerKind, { namespace: '', name: 'cc' }), {
    kube,
    log: quietLog,
  } as unknown as ReconcileContext);
};

test('an RBAC denial is a narrow install without this controller: NotPermitted', async () => {
  await assert.rejects(
    refusedWith(
      'compositecontrollers.metacontroller.k8s.io "cc" is forbidden: User "system:serviceaccount:operator-functions:opfn-composite" cannot get resource "compositecontrollers" in API group "metacontroller.k8s.io" at the cluster scope',
    ),
    (error: unknown) =>
      error instanceof TerminalError && error.reason === NOT_PERMITTED_REASON && /regenerate it with this controller/.test(error.message),
  );
});

test('another 403 (an admission policy) is reported as itself: Refused, without the advice to regenerate', async () => {
  await assert.rejects(
    refusedWith(
      "compositecontrollers.metacontroller.k8s.io \"cc\" is forbidden: ValidatingAdmissionPolicy 'no-cc' with binding 'no-cc' denied request: not today",
    ),
    (error: unknown) =>
      error instanceof TerminalError &&
      error.reason === REFUSED_REASON &&
      /denied request: not today/.test(error.message) &&
      !/regenerate it/.test(error.message),
  );
});
