// ExchangeRate's configuration: environment variables, declared once (the generated Knative
// Service carries them; the API key comes from a Secret through valueFrom.secretKeyRef).
export const CONFIG = [
  {
    name: 'EXCHANGE_RATE_PROVIDER_URL',
    description: 'Base URL of the Frankfurter-compatible rate provider (GET <url>/v1/latest?from=EUR&to=…)',
    default: 'https://api.frankfurter.dev',
  },
  { name: 'EXCHANGE_RATE_PROVIDER_HEADERS', description: 'Extra request headers as a JSON object, e.g. {"X-Client":"ops"}', default: '{}' },
  {
    name: 'EXCHANGE_RATE_API_KEY',
    description: 'API key sent in the header EXCHANGE_RATE_API_KEY_HEADER (none by default; Frankfurter needs none)',
    default: '',
    secret: true,
  },
  { name: 'EXCHANGE_RATE_API_KEY_HEADER', description: 'Header carrying EXCHANGE_RATE_API_KEY', default: 'Authorization' },
  {
    name: 'EXCHANGE_RATE_REFRESH_SECONDS',
    description: 'Refresh interval; refreshes fall on multiples of it (wall clock), so all ExchangeRates share one request',
    default: '3600',
  },
  { name: 'EXCHANGE_RATE_TIMEOUT_MS', description: 'Timeout of each provider request', default: '5000' },
  {
    name: 'EXCHANGE_RATE_RETRY_SECONDS',
    description: 'Wait before asking a failing provider again (after its in-request retries)',
    default: '60',
  },
];

export interface ProviderConfig {
  baseUrl: string;
  headers: Record<string, string>;
  refreshSeconds: number;
  timeoutMs: number;
  retrySeconds: number;
}

export class ConfigError extends Error {}

const positive = (config: Readonly<Record<string, string | undefined>>, name: string, fallback: string): number => {
  const raw = config[name] || fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0) throw new ConfigError(`${name}=${JSON.stringify(raw)} must be a positive number`);
  return value;
};

const defaultOf = (name: string): string => CONFIG.find((entry) => entry.name === name)!.default;

/** Reads and checks the configuration; ConfigError names the variable that is wrong. */
export function parseConfig(config: Readonly<Record<string, string | undefined>>): ProviderConfig {
  const baseUrl = config.EXCHANGE_RATE_PROVIDER_URL || defaultOf('EXCHANGE_RATE_PROVIDER_URL');
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new ConfigError(`EXCHANGE_RATE_PROVIDER_URL=${JSON.stringify(baseUrl)} is not a URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:')
    throw new ConfigError(`EXCHANGE_RATE_PROVIDER_URL must be http(s), not ${url.protocol}`);
  let headers: Record<string, string>;
  try {
    headers = JSON.parse(config.EXCHANGE_RATE_PROVIDER_HEADERS || '{}');
  } catch {
    throw new ConfigError('EXCHANGE_RATE_PROVIDER_HEADERS must be a JSON object of header names to values');
  }
  if (
    typeof headers !== 'object' ||
    headers === null ||
    Array.isArray(headers) ||
    !Object.values(headers).every((value) => typeof value === 'string')
  ) {
    throw new ConfigError('EXCHANGE_RATE_PROVIDER_HEADERS must be a JSON object of header names to string values');
  }
  const key = config.EXCHANGE_RATE_API_KEY;
  if (key) headers = { ...headers, [config.EXCHANGE_RATE_API_KEY_HEADER || defaultOf('EXCHANGE_RATE_API_KEY_HEADER')]: key };
  return {
    baseUrl,
    headers,
    refreshSeconds: positive(config, 'EXCHANGE_RATE_REFRESH_SECONDS', defaultOf('EXCHANGE_RATE_REFRESH_SECONDS')),
    timeoutMs: positive(config, 'EXCHANGE_RATE_TIMEOUT_MS', defaultOf('EXCHANGE_RATE_TIMEOUT_MS')),
    retrySeconds: positive(config, 'EXCHANGE_RATE_RETRY_SECONDS', defaultOf('EXCHANGE_RATE_RETRY_SECONDS')),
  };
}
