// What grows with input stays bounded on its way into messages: values from outside quoted in a
// few dozen characters (functions/runtime/bounded-messages.ts), status conditions and Kubernetes Events cut
// to 1 KiB, and a function's overlong output line relayed once, cut, not as pieces that look like
// lines of their own (eventing/activator/child-output.ts).
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { describe, test } from 'node:test';
import { pipeLines } from '../../eventing/activator/child-output.ts';
import {
  ownerFromLabels,
  boundedMessage,
  MAX_MESSAGE_CHARS,
  quote,
  setCondition,
  type KubeClient,
  type ResourceKind,
} from '../../functions/runtime/index.ts';

describe('quote', () => {
  test('a short string is JSON-quoted whole; a long one is cut, with its length', () => {
    assert.equal(quote('web'), '"web"');
    assert.equal(quote('x'.repeat(64)), `"${'x'.repeat(64)}"`);
    assert.equal(quote('x'.repeat(2_000_000)), `"${'x'.repeat(64)}"… (2000000 characters)`);
    assert.equal(quote('abcdef', 3), '"abc"… (6 characters)');
  });

  test('control characters and quotes are escaped: a message cannot move a terminal or fake a log line', () => {
    assert.equal(quote('a\u001b[31m"\nb'), '"a\\u001b[31m\\"\\nb"');
  });

  test('numbers as they are (JSON would write Infinity and NaN as null); other values as JSON, cut', () => {
    assert.deepEqual(
      [quote(Number.POSITIVE_INFINITY), quote(Number.NaN), quote(1.5), quote(undefined), quote(null)],
      ['Infinity', 'NaN', '1.5', 'undefined', 'null'],
    );
    assert.equal(quote({ a: 'y'.repeat(100) }, 10), '{"a":"yyyy… (108 characters of JSON)');
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    assert.equal(quote(cyclic), '[object Object]');
  });
});

describe('messages for status and Events', () => {
  test("cut to MAX_MESSAGE_CHARS (events.k8s.io's 1 KiB note), control characters other than newline and tab escaped", () => {
    assert.equal(boundedMessage('line one\n\tline two'), 'line one\n\tline two');
    assert.equal(boundedMessage('red \u001b[31m'), 'red \\u001b[31m');
    const cut = boundedMessage('m'.repeat(60_000));
    assert.ok(cut.length <= MAX_MESSAGE_CHARS, `${cut.length} characters`);
    assert.match(cut, /^m+… \(cut from 60000 characters\)$/);
  });

  test('setCondition bounds the message, so an oversized one cannot fail the whole status write', () => {
    // Its length as written: the escaped control character counts as the six characters it becomes.
    const [ready] = setCondition(undefined, {
      type: 'Ready',
      status: 'False',
      reason: 'ProviderError',
      message: `x${'M'.repeat(60_000)}\u001b`,
    });
    assert.ok(ready.message.length <= MAX_MESSAGE_CHARS);
    assert.match(ready.message, /^xM+… \(cut from 60007 characters\)$/);
  });

  test('an owner label naming no valid owner is quoted in a few dozen characters', async () => {
    const owner: ResourceKind = { group: 'example.com', version: 'v1', kind: 'Widget', plural: 'widgets', namespaced: true };
    const noApi = {} as KubeClient;
    const reason = await ownerFromLabels(
      { metadata: { namespace: 'default', labels: { controller: 'A'.repeat(2_000_000) } } },
      { name: 'controller' },
      owner,
      noApi,
    );
    assert.equal(reason, `owner name "${'A'.repeat(64)}"… (2000000 characters) is not a valid name`);
  });
});

describe("a function's output relayed line by line", () => {
  test('a line longer than 64 KiB is relayed once, cut, and the lines after it as they are', async () => {
    const stream = new PassThrough();
    const lines: string[] = [];
    pipeLines(stream, (line) => lines.push(line));
    stream.write('first\n');
    // Written in pieces, as a pipe delivers a long record.
    stream.write('{"msg":"');
    for (let i = 0; i < 40; i++) stream.write('z'.repeat(50_000));
    stream.write('"}\nsecond\r\nthird');
    stream.end();
    await new Promise((resolve) => stream.on('end', resolve));
    assert.equal(lines.length, 4, lines.map((line) => line.slice(0, 20)).join(' | '));
    assert.equal(lines[0], 'first');
    assert.match(lines[1], /^\{"msg":"z+… \(line longer than 65536 characters, cut\)$/);
    assert.ok(lines[1].length < 66_000);
    assert.deepEqual(lines.slice(2), ['second', 'third']);
  });
});
