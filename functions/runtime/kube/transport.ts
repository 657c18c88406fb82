// How a request reaches the API server: authentication prepared once per identity, and one
// request whose answer is read whole through undici's dispatcher interface.
import { readFileSync, statSync } from 'node:fs';
import type { KubeConfig } from '@kubernetes/client-node/dist/config.js';
import { HttpMethod, RequestContext } from '@kubernetes/client-node/dist/gen/http/http.js';
import type { Dispatcher } from 'undici';

/** Authentication headers and connection pool, prepared once per identity. */
export interface PreparedAuth {
  headers: Record<string, string>;
  dispatcher: Dispatcher | undefined;
  preparedAt: number;
  /** A service-account token file (in-cluster config): read here, re-read when it changes. */
  tokenFile?: string;
  tokenModified?: number;
  checkedAt: number;
}

/**
 * How long prepared authentication is reused at most. Exec plugins cache their credential until
 * it expires; a token file is watched (below), and a 401 prepares again at once.
 */
const AUTH_REUSE_MS = 60_000;
/** How often a token file's modification time is looked at (a stat, not a read). */
const TOKEN_FILE_CHECK_MS = 1000;

const modifiedAt = (file: string): number | undefined => {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return undefined;
  }
};

export interface RequestObserver {
  (verb: string, resource: string, code: number, seconds: number): void;
}

/**
 * Headers and dispatcher for one client's identity. client-node's applySecurityAuthentication
 * reads certificate files and rebuilds TLS options on every call; doing it once per identity
 * (again when the token file changes, after AUTH_REUSE_MS, or after a 401) saves that work on
 * every request.
 */
export class Authentication {
  readonly #config: KubeConfig;
  #auth?: Promise<PreparedAuth>;

  constructor(config: KubeConfig) {
    this.#config = config;
  }

  /**
   * The prepared authentication. `refused`: the authentication a request was just answered 401
   * with. It is prepared again only if it is still the current one: of many requests refused with
   * the same credential, the first prepares again and the others use that preparation, not one each.
   */
  current(refused?: PreparedAuth): Promise<PreparedAuth> {
    const current = this.#auth;
    if (!current) return this.#prepare(current);
    return current.then((auth) => (auth !== refused && this.#stillGood(auth) ? auth : this.#prepare(current)));
  }

  #stillGood(auth: PreparedAuth): boolean {
    const now = Date.now();
    if (now - auth.preparedAt >= AUTH_REUSE_MS) return false;
    if (auth.tokenFile && now - auth.checkedAt >= TOKEN_FILE_CHECK_MS) {
      auth.checkedAt = now;
      return modifiedAt(auth.tokenFile) === auth.tokenModified;
    }
    return true;
  }

  /** Prepares again, unless a concurrent request already replaced `stale`. */
  #prepare(stale: Promise<PreparedAuth> | undefined): Promise<PreparedAuth> {
    if (this.#auth && this.#auth !== stale) return this.#auth;
    const prepared = (async () => {
      const context = new RequestContext(this.#config.getCurrentCluster()?.server || 'https://localhost', HttpMethod.GET);
      await this.#config.applySecurityAuthentication(context);
      const headers = context.getHeaders();
      // client-node caches a token file's contents for 60 s; read it here so a rotated token
      // is used as soon as the file changes.
      const tokenFile = (this.#config.getCurrentUser()?.authProvider as { config?: { tokenFile?: string } } | undefined)?.config?.tokenFile;
      const tokenModified = tokenFile ? modifiedAt(tokenFile) : undefined;
      if (tokenFile) headers.Authorization = `Bearer ${readFileSync(tokenFile, 'utf8').trim()}`;
      const now = Date.now();
      return {
        headers,
        dispatcher: context.getDispatcher() as Dispatcher | undefined,
        preparedAt: now,
        tokenFile,
        tokenModified,
        checkedAt: now,
      };
    })();
    this.#auth = prepared;
    // A failed preparation is not kept.
    prepared.catch(() => {
      if (this.#auth === prepared) this.#auth = undefined;
    });
    return prepared;
  }
}

export interface Answer {
  statusCode: number;
  text: string;
  retryAfter?: string;
}

/**
 * One request whose answer is read whole, through undici's dispatcher interface rather than its
 * `request()`: that one wraps every answer in a Readable stream and an async resource, which
 * this client, reading each answer to its end at once, has no use for (it costs client CPU on
 * every request).
 */
export function exchange(dispatcher: Dispatcher, options: Dispatcher.DispatchOptions): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let statusCode = 0;
    let retryAfter: string | undefined;
    dispatcher.dispatch(options, {
      onRequestStart() {}, // required by undici, nothing to do here
      onResponseStart(_controller, code, headers) {
        statusCode = code;
        const value = headers['retry-after'];
        retryAfter = Array.isArray(value) ? value[0] : value;
      },
      onResponseData(_controller, chunk) {
        chunks.push(chunk);
      },
      onResponseEnd() {
        resolve({ statusCode, text: Buffer.concat(chunks).toString('utf8'), retryAfter });
      },
      onResponseError(_controller, error) {
        reject(error);
      },
    });
  });
}
