import assert from 'node:assert/strict';
import { existsSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { HttpMethod, RequestContext } from '@kubernetes/client-node';
import { answerFor, failedResult } from '../../functions/runtime/host/index.ts';
import { ConfigMap, ApiError, configuredKubeconfig, ConnectionReusingKubeConfig, KubeClient } from '../../functions/runtime/index.ts';
import { tempDir } from '../support/temp.ts';

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
  const emptyHome = tempDir('opfn-home-');
  withEnv({ KUBECONFIG: undefined, KUBERNETES_SERVICE_HOST: undefined, HOME: emptyHome }, () => {
    assert.throws(() => ConnectionReusingKubeConfig.fromEnvironment(), /^Error: no Kubernetes cluster configured: set KUBECONFIG/);
  });
});

test('the cluster is found as kubectl finds it: KUBECONFIG files that exist, merged; ~/.kube/config only without KUBECONFIG; else in a pod, with its token', (t) => {
  const dir = tempDir('opfn-kc-find-');
  const home = tempDir('opfn-home-');
  const cluster = join(dir, 'cluster');
  const user = join(dir, 'user');
  writeFileSync(
    cluster,
    'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://10.0.0.1:6443"}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n',
  );
  writeFileSync(user, 'apiVersion: v1\nkind: Config\nusers: [{name: u, user: {token: t}}]\n');
  const missing = join(dir, 'missing');
  const found = (env: NodeJS.ProcessEnv) => configuredKubeconfig({ HOME: home, ...env });
  assert.deepEqual(found({ KUBECONFIG: `${missing}:${cluster}:${user}` }), { files: [cluster, user], inCluster: false });
  assert.equal(found({ KUBECONFIG: missing }), undefined, 'a KUBECONFIG of missing files does not fall back to ~/.kube/config');
  assert.deepEqual(found({ KUBECONFIG: missing, KUBERNETES_SERVICE_HOST: '10.0.0.1' }), { files: [], inCluster: true });
  assert.equal(found({}), undefined);
  // "In a pod" without the token the kubelet would mount (this machine has none).
  if (existsSync('/var/run/secrets/kubernetes.io/serviceaccount/token'))
    t.diagnostic('not checked: this machine has a service-account token mounted');
  else {
    withEnv({ KUBECONFIG: undefined, KUBERNETES_SERVICE_HOST: '10.0.0.1', HOME: home }, () => {
      assert.throws(
        () => ConnectionReusingKubeConfig.fromEnvironment(),
        /in a pod \(KUBERNETES_SERVICE_HOST is set\) but no service-account token at \/var\/run\/secrets\/kubernetes.io\/serviceaccount\/token/,
      );
    });
  }
  withEnv({ KUBECONFIG: `${missing}:${cluster}:${user}` }, () => {
    const config = ConnectionReusingKubeConfig.fromEnvironment();
    assert.equal(config.getCurrentCluster()?.server, 'https://10.0.0.1:6443', 'the missing file is skipped');
    assert.equal(config.getCurrentUser()?.token, 't', 'the user comes from the second file');
  });
});

test('one dispatcher per TLS identity, reused across requests', async () => {
  const dir = tempDir('opfn-kc-');
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

test('authentication is prepared once, read again when the token file changes, and after a 401', async () => {
  const seen: string[] = [];
  let refuse = '';
  const server = createServer((req, res) => {
    const token = String(req.headers.authorization);
    seen.push(token);
    res.writeHead(token === refuse ? 401 : 200, { 'content-type': 'application/json' });
    res.end(token === refuse ? '{"kind":"Status","reason":"Unauthorized","code":401}' : '{"metadata":{"name":"default"}}');
  }).listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const dir = tempDir('opfn-token-');
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, 'first\n');
  const config = new ConnectionReusingKubeConfig();
  config.loadFromOptions({
    clusters: [{ name: 'c', server: `http://127.0.0.1:${(server.address() as { port: number }).port}`, skipTLSVerify: true }],
    users: [{ name: 'u', authProvider: { name: 'tokenFile', config: { tokenFile } } }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  let prepared = 0;
  const apply = config.applySecurityAuthentication.bind(config);
  config.applySecurityAuthentication = async (context) => {
    prepared++;
    return apply(context);
  };
  const kube = new KubeClient(config);
  const Namespace = { group: '', version: 'v1', kind: 'Namespace', plural: 'namespaces', namespaced: false };
  try {
    for (let i = 0; i < 10; i++) await kube.get(Namespace, { namespace: '', name: 'default' });
    assert.equal(prepared, 1, 'once for ten requests');
    assert.deepEqual(new Set(seen), new Set(['Bearer first']));

    // The kubelet rotates the projected token: the new file is used within a second.
    writeFileSync(tokenFile, 'second\n');
    utimesSync(tokenFile, new Date(), new Date(Date.now() + 5000));
    await sleep(1100);
    await kube.get(Namespace, { namespace: '', name: 'default' });
    assert.equal(seen.at(-1), 'Bearer second');

    // Revoked: the server answers 401 for the current token; the client prepares again and retries once.
    refuse = 'Bearer second';
    writeFileSync(tokenFile, 'third\n');
    utimesSync(tokenFile, new Date(), new Date(Date.now() + 10_000));
    seen.length = 0;
    await kube.get(Namespace, { namespace: '', name: 'default' });
    assert.deepEqual(seen, ['Bearer second', 'Bearer third']);
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test('answers are read whole however they arrive, bodies sent as JSON, and an unreachable API is a transient error naming the cause', async () => {
  const received: { method?: string; contentType?: string; body: string }[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req
      .on('data', (chunk: Buffer) => chunks.push(chunk))
      .on('end', () => {
        received.push({ method: req.method, contentType: req.headers['content-type'], body: Buffer.concat(chunks).toString('utf8') });
        if (req.method === 'POST') {
          res.writeHead(409, { 'content-type': 'application/json' });
          res.end('{"kind":"Status","reason":"AlreadyExists","message":"configmaps \\"a\\" already exists","code":409}');
          return;
        }
        // The name's "ü" is split between two writes, a moment apart.
        const answer = Buffer.from('{"metadata":{"name":"grüße"},"data":{"k":"v"}}');
        const split = answer.indexOf(0xbc);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write(answer.subarray(0, split));
        setTimeout(() => res.end(answer.subarray(split)), 20);
      });
  }).listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const port = (server.address() as { port: number }).port;
  const clientFor = (url: string) => {
    const config = new ConnectionReusingKubeConfig();
    config.loadFromOptions({
      clusters: [{ name: 'c', server: url, skipTLSVerify: true }],
      users: [{ name: 'u', token: 't' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    return new KubeClient(config);
  };
  try {
    const kube = clientFor(`http://127.0.0.1:${port}`);
    const read = await kube.get(ConfigMap, { namespace: 'n', name: 'grüße' });
    assert.deepEqual(read, { metadata: { name: 'grüße' }, data: { k: 'v' } });

    const object = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'a', namespace: 'n' }, data: { k: 'ü' } };
    await assert.rejects(
      kube.create(ConfigMap, object),
      (error: unknown) => error instanceof ApiError && error.code === 409 && error.reason === 'AlreadyExists' && !error.transient,
    );
    assert.deepEqual(received.at(-1), { method: 'POST', contentType: 'application/json', body: JSON.stringify(object) });
  } finally {
    server.closeAllConnections();
    server.close();
  }
  // Nothing listens there any more: retried with backoff, then one error that says why.
  const unreachable = clientFor(`http://127.0.0.1:${port}`);
  await assert.rejects(
    unreachable.get(ConfigMap, { namespace: 'n', name: 'a' }),
    (error: unknown) =>
      error instanceof ApiError && error.code === 0 && error.transient && /unreachable \(ECONNREFUSED\)/.test(error.message),
  );
});

test('a 429 or 5xx with Retry-After is tried again after that wait, not sooner; a wait past the retry window goes up with the error, and the answer passes it on', async () => {
  let retryAfter = '1';
  const arrivals: number[] = [];
  const server = createServer((_req, res) => {
    arrivals.push(Date.now());
    res.writeHead(arrivals.length % 2 ? 429 : 503, { 'content-type': 'application/json', 'retry-after': retryAfter });
    res.end('{"kind":"Status","reason":"TooManyRequests","message":"too many requests, please try again later","code":429}');
  }).listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const config = new ConnectionReusingKubeConfig();
  config.loadFromOptions({
    clusters: [{ name: 'c', server: `http://127.0.0.1:${(server.address() as { port: number }).port}`, skipTLSVerify: true }],
    users: [{ name: 'u', token: 't' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  const kube = new KubeClient(config);
  try {
    const first = await kube.get(ConfigMap, { namespace: 'n', name: 'a' }).catch((error: unknown) => error);
    assert.ok(first instanceof ApiError && first.transient && first.retryAfterSeconds === 1, String(first));
    const gaps = arrivals.slice(1).map((at, i) => at - arrivals[i]!);
    assert.equal(arrivals.length, 4, 'the first attempt and three retries');
    assert.ok(
      gaps.every((gap) => gap >= 990),
      `each retry waited the second asked for: ${gaps}`,
    );
    assert.deepEqual(failedResult(first), { type: 'failed', status: 503, error: first.message, retryAfterSeconds: 1 });

    // Longer than the retry window (10 s): not asked again; the function's 503 says when to.
    retryAfter = '60';
    arrivals.length = 0;
    const second = await kube.get(ConfigMap, { namespace: 'n', name: 'a' }).catch((error: unknown) => error);
    assert.equal(arrivals.length, 1);
    assert.equal((second as ApiError).retryAfterSeconds, 60);
    assert.equal(
      answerFor('fn', [{ kind: ConfigMap, namespace: 'n', name: 'a' }], [failedResult(second)], new Date()).retryAfterSeconds,
      60,
    );
  } finally {
    server.closeAllConnections();
    server.close();
  }
});
