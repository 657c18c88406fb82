// Forwarding one request to an instance: `proxyRequest` in knative/serving
// pkg/activator/handler/handler.go with the revision's request timeout (Knative Serving's
// `timeoutSeconds`, default revision-timeout-seconds 300): no complete answer in time → 504 (the
// broker retries it as any 5xx), so a hung reconcile never holds a slot forever. Hop-by-hop
// headers are pruned both ways (RFC 9110 §7.6.1); the slot is released exactly once.
import http from 'node:http';
import type { Logger } from 'pino';

// RFC 9110 §7.6.1 connection-specific fields, plus the legacy ones proxies drop.
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** Request headers for the instance: hop-by-hop fields (and those named in Connection) removed, X-Forwarded-* added. */
export function upstreamHeaders(req: http.IncomingMessage, frontHost: string): http.OutgoingHttpHeaders {
  const drop = new Set(HOP_BY_HOP);
  drop.add('expect'); // the front server already answered 100-continue
  for (const token of String(req.headers.connection ?? '').split(',')) {
    const t = token.trim().toLowerCase();
    if (t) drop.add(t);
  }
  const out: http.OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v !== undefined && !drop.has(k)) out[k] = v;
  }
  // The body is re-framed on the upstream connection: keep chunked framing when there is no length.
  if (req.headers['transfer-encoding'] && req.headers['content-length'] === undefined) out['transfer-encoding'] = 'chunked';
  const remote = req.socket.remoteAddress;
  if (remote) {
    const prior = req.headers['x-forwarded-for'];
    out['x-forwarded-for'] = prior ? `${String(prior)}, ${remote}` : remote;
  }
  if (!req.headers['x-forwarded-host'] && req.headers.host) out['x-forwarded-host'] = req.headers.host;
  if (!req.headers['x-forwarded-proto']) out['x-forwarded-proto'] = 'http';
  out.via = req.headers.via ? `${String(req.headers.via)}, 1.1 ${frontHost}` : `1.1 ${frontHost}`;
  return out;
}

/** Response headers for the client: hop-by-hop fields (and those named in Connection) removed. */
export function downstreamHeaders(res: http.IncomingMessage): http.OutgoingHttpHeaders {
  const drop = new Set(HOP_BY_HOP);
  for (const token of String(res.headers.connection ?? '').split(',')) {
    const t = token.trim().toLowerCase();
    if (t) drop.add(t);
  }
  const out: http.OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(res.headers)) {
    if (v !== undefined && !drop.has(k)) out[k] = v;
  }
  return out;
}

export function sendError(res: http.ServerResponse, status: number, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = `${message}\n`;
  res.writeHead(status, {
    'content-type': 'text/plain; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'x-activator-reason': message.replace(/[^\x20-\x7e]/g, '?'),
  });
  res.end(body);
}

export interface ProxyTarget {
  fn: string;
  instance: number;
  port: number;
  agent: http.Agent;
  /** 0 = no timeout. */
  timeoutMs: number;
}

export interface ProxyHooks {
  /** Called exactly once, when the instance's part of the request is over. */
  release(): void;
  /** A connection-level failure: the caller checks the instance; resolves when it knows whether it is gone. */
  failed(err: NodeJS.ErrnoException, answered: boolean): Promise<{ gone: boolean }>;
}

export function proxy(
  target: ProxyTarget,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  path: string,
  hooks: ProxyHooks,
  log: Logger,
): void {
  let released = false;
  const release = (): void => {
    if (released) return;
    released = true;
    clearTimeout(timer);
    hooks.release();
  };
  let clientGone = false;
  let timedOut = false;
  const upstream = http.request({
    host: '127.0.0.1',
    port: target.port,
    method: req.method,
    path,
    headers: upstreamHeaders(req, 'operator-functions-activator'),
    agent: target.agent,
  });
  const timer =
    target.timeoutMs > 0
      ? setTimeout(() => {
          timedOut = true;
          const reason = `function "${target.fn}" did not answer within ${target.timeoutMs / 1000}s (timeoutSeconds)`;
          log.warn({ fn: target.fn, instance: target.instance, timeoutMs: target.timeoutMs }, `activator: ${reason}; answering 504`);
          upstream.destroy();
          release();
          if (!res.destroyed) sendError(res, 504, reason);
        }, target.timeoutMs)
      : undefined;
  upstream.on('response', (ures) => {
    if (clientGone || timedOut) {
      ures.resume();
      return;
    }
    try {
      res.writeHead(ures.statusCode ?? 502, ures.statusMessage || undefined, downstreamHeaders(ures));
    } catch (err) {
      // The function sent a header Node will not forward (invalid characters): report, do not crash.
      log.warn({ fn: target.fn, instance: target.instance, err: String(err) }, 'activator: invalid response header from function');
      ures.resume();
      release();
      sendError(res, 502, `function "${target.fn}" sent an invalid response header`);
      return;
    }
    ures.on('end', release);
    ures.on('error', () => {
      release();
      res.destroy();
    });
    ures.pipe(res);
  });
  upstream.on('error', (err: NodeJS.ErrnoException) => {
    if (clientGone || timedOut) {
      release();
      return;
    }
    if (res.headersSent) {
      // Failed mid-response: all we can do is cut the client connection too.
      release();
      res.destroy();
      void hooks.failed(err, true);
      return;
    }
    // Nothing answered: find out whether the instance is gone before telling the client, so
    // that a retry does not land on a dead instance again.
    const checked = hooks.failed(err, false);
    release();
    void checked.then(({ gone }) => {
      const reason = `function "${target.fn}" instance #${target.instance} failed: ${err.code ?? err.message}${gone ? ' (instance exited)' : ''}`;
      // An instance that exited gets one ERROR line (how it ended); a line per request it held
      // (hundreds in a burst) would bury it.
      log[gone ? 'debug' : 'warn']({ fn: target.fn, instance: target.instance, err: err.message }, 'activator: upstream request failed');
      if (!res.destroyed) sendError(res, 502, reason);
    });
  });
  res.on('close', () => {
    if (!res.writableFinished) {
      clientGone = true;
      upstream.destroy();
      release();
    }
  });
  req.pipe(upstream);
}
