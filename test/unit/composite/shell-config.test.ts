// The shell's two configuration decisions that need no API server: hook URL rewrites
// (COMPOSITE_HOOK_URLS) and the selector deviation for controllers without generateSelector.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseHookUrls, rewriteUrl } from '../../../functions/composite/hooks.ts';
import { effectiveController } from '../../../functions/composite/sync-parent.ts';
import type { CompositeController } from '../../../functions/composite/metacontroller/types.ts';

describe('COMPOSITE_HOOK_URLS', () => {
  test('parses prefix=replacement pairs; empty means none', () => {
    assert.deepEqual(parseHookUrls(''), []);
    assert.deepEqual(parseHookUrls(' http://a.b/=http://127.0.0.1:1/ , http://c.d/x=http://127.0.0.1:2/y '), [
      { from: 'http://a.b/', to: 'http://127.0.0.1:1/' },
      { from: 'http://c.d/x', to: 'http://127.0.0.1:2/y' },
    ]);
  });

  test('refuses an entry that is not two URLs, naming it', () => {
    assert.match(String(parseHookUrls('http://a.b/')), /"http:\/\/a\.b\/" is not <URL prefix>=<URL prefix>/);
    assert.match(String(parseHookUrls('=http://x/')), /is not/);
    assert.match(String(parseHookUrls('http://a/=not a url')), /is not/);
  });

  test('the longest matching prefix wins; other URLs are unchanged', () => {
    const rewrites = [
      { from: 'http://svc.ns/', to: 'http://127.0.0.1:1/' },
      { from: 'http://svc.ns/special/', to: 'http://127.0.0.1:2/' },
    ];
    assert.equal(rewriteUrl('http://svc.ns/sync', rewrites), 'http://127.0.0.1:1/sync');
    assert.equal(rewriteUrl('http://svc.ns/special/sync', rewrites), 'http://127.0.0.1:2/sync');
    assert.equal(rewriteUrl('http://other/sync', rewrites), 'http://other/sync');
  });
});

describe('a controller without generateSelector and a parent without spec.selector (a deliberate difference from Metacontroller)', () => {
  const controller = (generateSelector?: boolean): CompositeController => ({
    metadata: { name: 'c' },
    spec: { parentResource: { apiVersion: 'x/v1', resource: 'xs' }, generateSelector, hooks: { sync: { webhook: { url: 'http://h/' } } } },
  });
  const parent = (selector?: unknown) => ({ metadata: { name: 'p', uid: 'u' }, spec: selector === undefined ? {} : { selector } });

  test('behaves as generateSelector', () => {
    assert.equal(effectiveController(controller(), parent()).spec.generateSelector, true);
  });

  test('a parent with its own spec.selector keeps upstream behaviour (its selector, checked there)', () => {
    const original = controller();
    assert.equal(effectiveController(original, parent({ matchLabels: { a: 'b' } })), original);
    assert.equal(effectiveController(original, parent({})), original, 'an empty selector stays an error, as upstream');
  });

  test('generateSelector: true is untouched', () => {
    const original = controller(true);
    assert.equal(effectiveController(original, parent()), original);
  });
});
