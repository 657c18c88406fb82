// Where rates come from: a RateProvider, by default the ECB-based Frankfurter API (no key).
//
// Upstream contract (lineofflight/frankfurter, lib/versions/v1.rb):
//   GET <base>/v1/latest?from=EUR&to=USD,CHF → 200 {"amount":1.0,"base":"EUR","date":"YYYY-MM-DD","rates":{"USD":1.05,"CHF":0.93}}
//   no quote for the query       → 404 {"message":"not found"}
//   a parameter it cannot use    → 422 {"message":"<why>"}
// Rates change once per ECB working day, so one request per refresh serves every ExchangeRate:
// the client always asks for every supported currency at once, and a per-process cache keyed by
// the refresh slot makes all reconciles of one slot share that single request.
import { ResponseTooLargeError, retryAfterMs, type HttpClient, quote } from '../runtime/index.ts';
/** The currencies the CRD's enum allows. */
export const CURRENCIES = ['CAD', 'CHF', 'GBP', 'JPY', 'PLN', 'USD'] as const;
export type Currency = (typeof CURRENCIES)[number];
export const BASE_CURRENCY = 'EUR';
/**
 * Largest answer read from the provider. Frankfurter's is about 130 bytes, an error page a few
 * kB; anything bigger is not a rate answer, and reading it could take the instance's memory.
 */
export const MAX_ANSWER_BYTES = 64 * 1024;

export interface Quote {
  base: string;
  /** The provider's date of the rates (YYYY-MM-DD). */
  date: string;
  /** Rates of the supported currencies as plain decimal strings, exactly as the provider's JSON numbers print. */
  rates: Partial<Record<string, string>>;
}

export interface RateProvider {
  /** Rates for EUR → every supported currency. Throws ProviderError when it cannot. */
  latest(): Promise<Quote>;
}

/**
 * The provider could not be asked or answered badly; carries the provider's own words. Reconcile
 * turns it into Ready=False (the last good rate stays) and a retry after `retryAfterSeconds`, or
 * at `retryAt` when the slot cache set it (the time it asks the provider again, shared by every
 * ExchangeRate of the process).
 */
export class ProviderError extends Error {
  readonly retryAfterSeconds?: number;
  readonly retryAt?: Date;

  constructor(message: string, options: { retryAfterSeconds?: number; retryAt?: Date } = {}) {
    super(message);
    this.name = 'ProviderError';
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.retryAt = options.retryAt;
  }
}

/**
 * One outbound GET with a timeout and a bound on the body; throws when no answer arrived or the
 * body is too large (ResponseTooLargeError; the message says why).
 */
export type HttpGet = (
  url: string,
  options: { headers: Record<string, string>; timeoutMs: number },
) => Promise<{ status: number; headers: Headers; body: string }>;

/** The reconcile context's HTTP client (a timeout on every request) as an HttpGet, reading at most MAX_ANSWER_BYTES. */
export const httpGet =
  (http: HttpClient): HttpGet =>
  async (url, { headers, timeoutMs }) => {
    // A redirect would carry the API key elsewhere; the provider's base URL is configured exactly.
    const response = await http.fetch(url, { headers, timeoutMs, redirect: 'error', maxBodyBytes: MAX_ANSWER_BYTES });
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

/** Retry-After as whole seconds, at most an hour, when present, readable and not elapsed. */
function retryAfterSeconds(value: string | undefined): number | undefined {
  const ms = retryAfterMs(value);
  return ms === undefined || ms < 0 ? undefined : Math.min(Math.ceil(ms / 1000), 3600);
}

/**
 * The provider's date as Frankfurter writes it (YYYY-MM-DD, a real calendar day). Checked, not
 * just typed: it goes into the ConfigMap, status, messages and logs, so an oversized or odd one
 * must not get that far.
 */
export function isProviderDate(value: unknown): value is string {
  if (typeof value !== 'string' || !/^\d{4}-\d{2}-\d{2}$/.test(value)) return false;
  const day = new Date(`${value}T00:00:00Z`);
  return !Number.isNaN(day.getTime()) && day.toISOString().startsWith(value);
}

/**
 * A rate as the decimal string written to the ConfigMap and status, or undefined when it is not
 * a usable rate: not a positive number, or one so large or small that JavaScript prints it with
 * an exponent ("1e+21", "1e-7"; no rate of a supported currency comes near). Refused rather than
 * reformatted: such a number means the provider is broken, not that EUR moved 20 orders.
 */
export function rateString(value: unknown): string | undefined {
  if (typeof value !== 'number' || !(value > 0)) return undefined;
  const text = String(value);
  return /^\d+(\.\d+)?$/.test(text) ? text : undefined;
}

/**
 * Parses a 200 answer; throws ProviderError on anything that is not the documented shape: a
 * wrong base, a date that is not YYYY-MM-DD, a rate of a supported currency that is not a
 * plain positive decimal. Currencies not asked for are dropped. A supported currency missing
 * from the answer is not an error of the whole answer: it fails that currency's ExchangeRates
 * only (CurrencyNotQuoted). `redact` takes out of a quoted value what must never be shown (the
 * headers we sent, withoutSentHeaders).
 */
export function parseQuote(body: string, redact: (text: string) => string = (text) => text): Quote {
  const shown = (value: unknown, maxChars: number) => quote(typeof value === 'string' ? redact(value) : value, maxChars);
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw new ProviderError(`provider answered malformed JSON: ${shown(body, 80)}`);
  }
  const answer = parsed as { base?: unknown; date?: unknown; rates?: unknown } | null;
  if (typeof answer !== 'object' || answer === null || Array.isArray(answer))
    throw new ProviderError('provider answer is not a JSON object');
  if (
    typeof answer.base !== 'string' ||
    typeof answer.date !== 'string' ||
    typeof answer.rates !== 'object' ||
    answer.rates === null ||
    Array.isArray(answer.rates)
  ) {
    throw new ProviderError('provider answer lacks base, date or rates');
  }
  if (answer.base !== BASE_CURRENCY)
    throw new ProviderError(`provider answered rates for base ${shown(answer.base, 40)}, not ${BASE_CURRENCY}`);
  if (!isProviderDate(answer.date)) throw new ProviderError(`provider answered date ${shown(answer.date, 40)}, not YYYY-MM-DD`);
  const answered = answer.rates as Record<string, unknown>;
  const rates: Record<string, string> = {};
  for (const currency of CURRENCIES) {
    if (!Object.hasOwn(answered, currency)) continue;
    const rate = rateString(answered[currency]);
    if (rate === undefined)
      throw new ProviderError(`provider answered rate ${shown(answered[currency], 40)} for ${currency}, not a positive decimal number`);
    rates[currency] = rate;
  }
  return { base: answer.base, date: answer.date, rates };
}

/** The provider's error message: Frankfurter's {"message"}, else the start of the body; an excerpt either way. */
function describeFailure(status: number, body: string): string {
  try {
    const message = (JSON.parse(body) as { message?: unknown }).message;
    if (typeof message === 'string') return `provider answered ${status}: ${quote(message, 200)}`;
  } catch {
    /* not JSON */
  }
  return `provider answered ${status}${body ? `: ${quote(body, 120)}` : ''}`;
}

/**
 * `text` without the values of the headers we sent (the API key comes from a Secret): a provider
 * that answers "invalid key <key>" must not put it into status, Events and logs. A value's words
 * are removed too ("Bearer <token>" echoed as just the token).
 */
export function withoutSentHeaders(text: string, headers: Record<string, string>): string {
  const secrets = Object.values(headers)
    .flatMap((value) => [value, ...value.split(/\s+/)])
    .filter((value) => value.length >= 6)
    .sort((a, b) => b.length - a.length);
  let redacted = text;
  for (const secret of secrets) {
    redacted = redacted.replaceAll(secret, '[redacted]');
    // A JSON answer may carry the value with JSON escapes.
    const escaped = JSON.stringify(secret).slice(1, -1);
    if (escaped !== secret) redacted = redacted.replaceAll(escaped, '[redacted]');
  }
  return redacted;
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
      if (error instanceof ResponseTooLargeError)
        throw new ProviderError(`provider answered ${error.status} with more than ${error.limitBytes} bytes; not read`);
      throw new ProviderError(`provider ${options.baseUrl} unreachable: ${withoutSentHeaders((error as Error).message, options.headers)}`);
    }
    // Removed before any of the answer is quoted (and maybe cut mid-value) into a message.
    const redact = (text: string) => withoutSentHeaders(text, options.headers);
    if (answer.status === 200) return parseQuote(answer.body, redact);
    throw new ProviderError(describeFailure(answer.status, redact(answer.body)), {
      retryAfterSeconds: retryAfterSeconds(answer.headers.get('retry-after') ?? undefined),
    });
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
 * When a failed request may be repeated: after the retry interval, or after the provider's
 * Retry-After when that is longer (a shorter hint does not make a failing provider asked sooner).
 */
export const retryTime = (askedAt: number, retrySeconds: number, hintSeconds: number | undefined): Date =>
  new Date(askedAt + Math.max(retrySeconds, hintSeconds ?? 0) * 1000);

/** One provider request: its slot, when it was made (the reconcile clock), and the promise of its answer. */
interface Asked {
  slot: number;
  at: number;
  quote: Promise<Quote>;
}

/**
 * Shares one provider request among every reconcile of the same refresh slot in this process
 * (the in-flight promise, then its answer until the slot ends). An answer lacking a currency is
 * kept for the others but not for that currency past the retry interval: the first reconcile of
 * that currency after it asks again, and every reconcile meanwhile shares that new request (so
 * the provider sees one request per retry interval, however many ExchangeRates wait for the
 * currency).
 *
 * A failure is kept too, for every currency and slot, until its retry time (retryTime): every
 * reconcile meanwhile fails at once with the same words and the same retryAt, without a network
 * call. Not keeping it let each of 1000 due ExchangeRates ask a failing provider again, each with
 * its in-request retries (375 requests and 195 s for one resync; a 429's Retry-After was honoured
 * per object only, 487 requests within its 300 s).
 */
export class SlotCache {
  readonly #provider: RateProvider;
  readonly #retrySeconds: number;
  /** The request under way, if any. */
  #asking?: Asked;
  /** The last good answer and when it was asked for. */
  #answered?: { slot: number; at: number; quote: Quote };
  /** The last failure, until its retryAt; cleared by a good answer. */
  #failed?: ProviderError & { retryAt: Date };

  constructor(provider: RateProvider, retrySeconds: number) {
    this.#provider = provider;
    this.#retrySeconds = retrySeconds;
  }

  latest(slot: number, currency: string, now: Date): Promise<Quote> {
    const answered = this.#answered;
    if (
      answered?.slot === slot &&
      (answered.quote.rates[currency] !== undefined || now.getTime() - answered.at < this.#retrySeconds * 1000)
    )
      return Promise.resolve(answered.quote);
    if (this.#asking?.slot === slot) return this.#asking.quote;
    const failed = this.#failed;
    if (failed && now.getTime() < failed.retryAt.getTime()) return Promise.reject(failed);
    return this.#ask(slot, now.getTime());
  }

  #ask(slot: number, at: number): Promise<Quote> {
    const entry: Asked = {
      slot,
      at,
      quote: this.#provider.latest().then(
        (quote) => {
          // Two requests overlap only across a slot's end; the older one's outcome does not replace the newer's.
          if (!this.#answered || this.#answered.at <= at) {
            this.#answered = { slot, at, quote };
            this.#failed = undefined;
          }
          return quote;
        },
        (error: unknown) => {
          // Anything but a ProviderError is a bug, not the provider's state: not kept.
          if (!(error instanceof ProviderError)) throw error;
          const failed = new ProviderError(error.message, {
            retryAfterSeconds: error.retryAfterSeconds,
            retryAt: retryTime(at, this.#retrySeconds, error.retryAfterSeconds),
          }) as ProviderError & { retryAt: Date };
          if (!(this.#answered && this.#answered.at > at)) this.#failed = failed;
          throw failed;
        },
      ),
    };
    this.#asking = entry;
    const done = () => {
      if (this.#asking === entry) this.#asking = undefined;
    };
    entry.quote.then(done, done);
    return entry.quote;
  }
}
