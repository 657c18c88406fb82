// The delivery budget: how long one delivery starts work, from the Service's request timeout.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  deliveryBudgetFor,
  deliveryBudgetFromEnvironment,
  deliveryBudgetProblem,
  DELIVERY_BUDGET_ENV,
} from '../../functions/runtime/host/index.ts';

test('half the request timeout, at most 30 s; 30 s when there is no timeout', () => {
  assert.deepEqual([300, 60, 45, 20, 1, 0].map(deliveryBudgetFor), [30, 30, 22.5, 10, 0.5, 30]);
});

test('a budget must be a number of seconds ≥ 0 and end before the timeout', () => {
  assert.equal(deliveryBudgetProblem(30, 300), undefined);
  assert.equal(deliveryBudgetProblem(0, 300), undefined);
  assert.equal(deliveryBudgetProblem(600, 0), undefined, 'no timeout: any budget');
  assert.match(deliveryBudgetProblem(30, 30)!, /leaves no time before timeoutSeconds 30.*e\.g\. 15/);
  assert.match(deliveryBudgetProblem(-1, 300)!, /number of seconds ≥ 0/);
  assert.match(deliveryBudgetProblem(Number.NaN, 300)!, /number of seconds ≥ 0/);
});

test('read from the environment: unset or empty is no budget; a number of seconds is one; anything else is refused, naming the variable', () => {
  assert.equal(deliveryBudgetFromEnvironment({}), undefined);
  assert.equal(deliveryBudgetFromEnvironment({ [DELIVERY_BUDGET_ENV]: ' ' }), undefined);
  assert.equal(deliveryBudgetFromEnvironment({ [DELIVERY_BUDGET_ENV]: '12.5' }), 12.5);
  assert.equal(deliveryBudgetFromEnvironment({ [DELIVERY_BUDGET_ENV]: '0' }), 0);
  for (const text of ['30s', '-1', 'Infinity', 'soon']) {
    assert.throws(
      () => deliveryBudgetFromEnvironment({ [DELIVERY_BUDGET_ENV]: text }),
      new RegExp(`${DELIVERY_BUDGET_ENV} "${text}" is not a number of seconds`),
    );
  }
});
