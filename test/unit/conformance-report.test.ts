// The contract kit's judgement of answers, without an endpoint: what counts as a reply the broker
// can route back, and the table a person reads.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatTable } from '../../conformance/index.ts';
import { replyProblem } from '../../conformance/deliveries.ts';
import { reconcileReply } from '../../functions/runtime/host/index.ts';

const answer = (headers: Record<string, string>, body: string, status = 200) => ({ status, headers, body, ms: 1 });

test("the runtime's own reconcile reply is a reply for its function, and only for it", () => {
  const reply = reconcileReply('immortal-container', [{ key: 'immortalcontainer.flugel.it/ImmortalContainer:default/web' }]);
  assert.equal(replyProblem(answer(reply.headers, reply.body), 'immortal-container'), undefined);
  assert.match(
    replyProblem(answer(reply.headers, reply.body), 'copyrator')!,
    /opfnfunction="immortal-container", not "copyrator": its Trigger would not route it back/,
  );
});

test('a 2xx body that is not a CloudEvent is a failed delivery in the broker; an empty body or an error body is not a reply', () => {
  assert.match(replyProblem(answer({ 'content-type': 'application/json' }, '{"ok":true}'), 'x')!, /not a CloudEvent/);
  assert.equal(replyProblem(answer({}, ''), 'x'), undefined);
  assert.equal(replyProblem(answer({ 'content-type': 'application/json' }, '{"error":"bad"}', 400), 'x'), undefined);
});

test('the table: one line per check, its reason, and the verdict', () => {
  const table = formatTable([
    { check: 'health', result: 'pass' },
    { check: 'large body', result: 'fail', reason: 'answered 200' },
    { check: 'converges', result: 'not checked', reason: 'needs a hook server' },
  ]);
  assert.equal(
    table,
    [
      'PASS  health',
      'FAIL  large body  answered 200',
      '----  converges   needs a hook server',
      '',
      '1 passed, 1 failed, 1 not checked: does NOT conform.',
    ].join('\n'),
  );
});
