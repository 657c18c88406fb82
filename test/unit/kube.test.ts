import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { HttpMethod, RequestContext } from '@kubernetes/client-node';
import { ConnectionReusingKubeConfig } from '../../functions/runtime/kube.ts';

function withEnv<T>(changes: Record<string, string | undefined>, run: () => T): T {
  const saved = Object.fromEntries(Object.keys(changes).map((name) => [name, process.env[name]]));
  for (const [name, value] of Object.entries(changes)) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
  try {
    return run();
  } finally {
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
}

test('with nothing configured, fromEnvironment says so in one line', () => {
  const emptyHome = mkdtempSync(join(tmpdir(), 'opfn-home-'));
  withEnv({ KUBECONFIG: undefined, KUBERNETES_SERVICE_HOST: undefined, HOME: emptyHome }, () => {
    assert.throws(() => ConnectionReusingKubeConfig.fromEnvironment(), /^Error: no Kubernetes cluster configured: set KUBECONFIG/);
  });
});

test('one dispatcher per TLS identity, reused across requests', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'opfn-kc-'));
  const kubeconfig = (ca: string) => `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: ${Buffer.from(ca).toString('base64')}}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`;
  const dispatcherOf = async (config: ConnectionReusingKubeConfig) => {
    const context = new RequestContext('https://127.0.0.1:6443/api', HttpMethod.GET);
    await config.applySecurityAuthentication(context);
    return context.getDispatcher();
  };
  writeFileSync(join(dir, 'a'), kubeconfig('-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n'));
  const config = new ConnectionReusingKubeConfig();
  config.loadFromFile(join(dir, 'a'));
  const first = await dispatcherOf(config);
  assert.ok(first, 'a TLS cluster gets a dispatcher');
  assert.equal(await dispatcherOf(config), first, 'the same dispatcher (and its connection pool) is reused');

  // Another CA is another identity: it must not share the pool.
  writeFileSync(join(dir, 'b'), kubeconfig('-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n'));
  config.loadFromFile(join(dir, 'b'));
  assert.notEqual(await dispatcherOf(config), first);
});
