// Where rates come from: a RateProvider, by default the ECB-based Frankfurter API (no key).
//
// Upstream contract (lineofflight/frankfurter, lib/versions/v1.rb):
//   GET <base>/v1/latest?from=EUR&to=USD,CHF → 200 {"amount":1.0,"base":"EUR","date":"YYYY-MM-DD","rates":{"USD":1.05,"CHF":0.93}}
//   no quote for the query       → 404 {"message":"not found"}
//   a parameter it cannot use    → 422 {"message":"<why>"}
// Rates change once per ECB working day, so one request per refresh serves every ExchangeRate:
// the client always asks for every supported currency at once, and a per-process cache keyed by
// the refresh slot makes all reconciles of one slot share that single request.
import type { HttpClient } from '../runtime/http.ts';
/** The currencies the CRD's enum allows. */
export const CURRENCIES = ['CAD', 'CHF', 'GBP', 'JPY', 'PLN', 'USD'] as const;
export type Currency = (typeof CURRENCIES)[number];
export const BASE_CURRENCY = 'EUR';

export interface Quote {
  base: string;
  /** The provider's date of the rates (YYYY-MM-DD). */
  date: string;
  /** Rates as decimal strings, exactly as the provider's JSON numbers print. */
  rates: Partial<Record<string, string>>;
}

export interface RateProvider {
  /** Rates for EUR → every supported currency. Throws ProviderError when it cannot. */
  latest(): Promise<Quote>;
}

/**
 * The provider could not be asked or answered badly; carries the provider's own words. Reconcile
 * turns it into Ready=False (the last good rate stays) and a retry after `retryAfterSeconds`.
 */
export class ProviderError extends Error {
  readonly retryAfterSeconds?: number;

  constructor(message: string, options: { retryAfterSeconds?: number } = {}) {
    super(message);
    this.name = 'ProviderError';
    this.retryAfterSeconds = options.retryAfterSeconds;
  }
}

/** One outbound GET with a timeout; throws when no answer arrived (the message says why). */
export type HttpGet = (url: string, options: { headers: Record<string, string>; timeoutMs: number }) => Promise<{ status: number; headers: Headers; body: string }>;

/** The reconcile context's HTTP client (a timeout on every request) as an HttpGet. */
export const httpGet = (http: HttpClient): HttpGet => async (url, { headers, timeoutMs }) => {
  // A redirect would carry the API key elsewhere; the provider's base URL is configured exactly.
  const response = await http.fetch(url, { headers, timeoutMs, redirect: 'error' });
  return { status: response.status, headers: response.headers, body: await response.text() };
};

export interface FrankfurterOptions {
  baseUrl: string;
  headers: Record<string, string>;
  timeoutMs: number;
  /** Attempts per refresh (first try included). */
  attempts: number;
  /** First backoff; doubles per attempt, with jitter. */
  backoffMs: number;
  get: HttpGet;
}

/** Retry-After as seconds (delta-seconds or an HTTP date), when present and sane. */
function retryAfterSeconds(value: string | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  const seconds = /^\d+$/.test(value.trim()) ? Number(value) : (Date.parse(value) - now) / 1000;
  return Number.isFinite(seconds) && seconds >= 0 ? Math.min(Math.ceil(seconds), 3600) : undefined;
}

/** Parses a 200 answer; throws ProviderError on anything that is not the documented shape. */
export function parseQuote(body: string): Quote {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw new ProviderError(`provider answered malformed JSON: ${JSON.stringify(body.slice(0, 80))}`);
  }
  const answer = parsed as { base?: unknown; date?: unknown; rates?: unknown } | null;
  if (typeof answer !== 'object' || answer === null || Array.isArray(answer)) throw new ProviderError('provider answer is not a JSON object');
  if (typeof answer.base !== 'string' || typeof answer.date !== 'string' || typeof answer.rates !== 'object' || answer.rates === null || Array.isArray(answer.rates)) {
    throw new ProviderError('provider answer lacks base, date or rates');
  }
  if (answer.base !== BASE_CURRENCY) throw new ProviderError(`provider answered rates for base ${answer.base}, not ${BASE_CURRENCY}`);
  const rates: Record<string, string> = {};
  for (const [currency, rate] of Object.entries(answer.rates as Record<string, unknown>)) {
    // A rate must be a positive finite number; anything else is treated as not quoted.
    if (typeof rate === 'number' && Number.isFinite(rate) && rate > 0) rates[currency] = String(rate);
  }
  return { base: answer.base, date: answer.date, rates };
}

/** The provider's error message: Frankfurter's {"message"}, else the start of the body. */
function describeFailure(status: number, body: string): string {
  try {
    const message = (JSON.parse(body) as { message?: unknown }).message;
    if (typeof message === 'string') return `provider answered ${status}: ${message}`;
  } catch { /* not JSON */ }
  return `provider answered ${status}${body ? `: ${body.slice(0, 120)}` : ''}`;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function frankfurter(options: FrankfurterOptions): RateProvider {
  const { get } = options;
  const url = `${options.baseUrl.replace(/\/+$/, '')}/v1/latest?from=${BASE_CURRENCY}&to=${CURRENCIES.join(',')}`;
  const once = async (): Promise<Quote> => {
    let answer: Awaited<ReturnType<HttpGet>>;
    try {
      answer = await get(url, { headers: { accept: 'application/json', ...options.headers }, timeoutMs: options.timeoutMs });
    } catch (error) {
      throw new ProviderError(`provider ${options.baseUrl} unreachable: ${(error as Error).message}`);
    }
    if (answer.status === 200) return parseQuote(answer.body);
    throw new ProviderError(describeFailure(answer.status, answer.body), { retryAfterSeconds: retryAfterSeconds(answer.headers.get('retry-after') ?? undefined) });
  };
  return {
    async latest() {
      for (let attempt = 1; ; attempt++) {
        try {
          return await once();
        } catch (error) {
          if (attempt >= options.attempts) throw error;
          const hinted = (error as ProviderError).retryAfterSeconds;
          // A hint longer than our own backoff ends this refresh: the next one comes after it.
          if (hinted !== undefined && hinted * 1000 > options.backoffMs * 2 ** attempt) throw error;
          await sleep(hinted !== undefined ? hinted * 1000 : options.backoffMs * 2 ** (attempt - 1) * (0.5 + Math.random()));
        }
      }
    },
  };
}

/**
 * Shares one provider request among every reconcile of the same refresh slot in this process
 * (the in-flight promise, then its result until the slot ends). Failures are not kept: the next
 * reconcile asks again, after its own backoff.
 */
export class SlotCache {
  readonly #provider: RateProvider;
  #slot?: number;
  #quote?: Promise<Quote>;

  constructor(provider: RateProvider) {
    this.#provider = provider;
  }

  latest(slot: number): Promise<Quote> {
    if (this.#slot === slot && this.#quote) return this.#quote;
    const quote = this.#provider.latest();
    this.#slot = slot;
    this.#quote = quote;
    quote.catch(() => {
      if (this.#quote === quote) this.#quote = undefined;
    });
    return quote;
  }
}
