// The source's partition keys (eventing/source/partition.ts): the object whose reconcile an event
// causes, as the CloudEvents `partitionkey` extension.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { partitionKey } from '../../eventing/source/partition.ts';
import { ownerLabelValue, type ResourceKind } from '../../functions/runtime/index.ts';

const Owner: ResourceKind = {
  group: 'immortalcontainer.flugel.it',
  version: 'v1alpha1',
  kind: 'ImmortalContainer',
  plural: 'immortalcontainers',
  namespaced: true,
};
const controller = (name: string, over: Record<string, unknown> = {}) => ({
  apiVersion: 'immortalcontainer.flugel.it/v1alpha1',
  kind: 'ImmortalContainer',
  name,
  uid: 'u',
  controller: true,
  ...over,
});

describe('source partition keys', () => {
  it('keys the reconciled kind by its own namespace/name', () => {
    assert.equal(partitionKey({ by: 'self' }, { metadata: { namespace: 'ns', name: 'web' } }), 'ns/web');
    assert.equal(partitionKey({ by: 'self' }, { metadata: { name: 'cluster-wide' } }), '/cluster-wide');
  });

  it('keys an owned kind by its controller owner, from the ownerReference', () => {
    const pod = {
      metadata: {
        namespace: 'ns',
        name: 'web-immortalpod',
        ownerReferences: [controller('other', { controller: false }), controller('web')],
      },
    };
    assert.equal(partitionKey({ by: 'owner', owner: Owner }, pod), 'ns/web');
    assert.equal(
      partitionKey(
        { by: 'owner', owner: Owner },
        { metadata: { namespace: 'ns', name: 'p', ownerReferences: [controller('x', { apiVersion: 'apps/v1' })] } },
      ),
      undefined,
      'another group is not the owner',
    );
    assert.equal(partitionKey({ by: 'owner', owner: Owner }, { metadata: { namespace: 'ns', name: 'p' } }), undefined, 'no owner, no key');
  });

  it('keys by the owner labels when no ownerReference names the owner, equal to the key the owner gets', () => {
    const long = 'a'.repeat(80);
    const rule = { by: 'owner' as const, owner: Owner, labels: { namespace: 'x/owner-namespace', name: 'x/owner' } };
    const child = {
      metadata: { namespace: 'elsewhere', name: 'c', labels: { 'x/owner-namespace': 'ns', 'x/owner': ownerLabelValue(long) } },
    };
    assert.equal(partitionKey(rule, child), partitionKey({ by: 'self' }, { metadata: { namespace: 'ns', name: long } }));
    assert.equal(
      partitionKey(
        { by: 'owner', owner: Owner, labels: { name: 'owner-name' } },
        { metadata: { namespace: 'ns', name: 'c', labels: { 'owner-name': 'web' } } },
      ),
      'ns/web',
    );
    assert.equal(partitionKey(rule, { metadata: { namespace: 'ns', name: 'c' } }), undefined);
  });

  it('gives watched kinds no key when told so', () => {
    assert.equal(partitionKey({ by: 'none' }, { metadata: { namespace: 'ns', name: 'web' } }), undefined);
  });

  it('without a rule: the controller owner, else the object itself', () => {
    assert.equal(partitionKey(undefined, { metadata: { namespace: 'ns', name: 'web' } }), 'ns/web');
    assert.equal(
      partitionKey(undefined, {
        metadata: {
          namespace: 'ns',
          name: 'web-immortalpod',
          ownerReferences: [controller('other', { controller: false }), controller('web')],
        },
      }),
      'ns/web',
    );
  });
});
