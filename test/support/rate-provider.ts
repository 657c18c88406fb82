// A stand-in for the Frankfurter API on loopback, speaking its real format
// (lineofflight/frankfurter, lib/versions/v1.rb): GET /v1/latest?from=EUR&to=A,B →
// {"amount":1.0,"base":"EUR","date":"YYYY-MM-DD","rates":{…}}; 404/422 {"message": …} on errors.
// A test sets what it answers next (rates, an error, a delay, malformed JSON) and counts requests.
// Run on its own (`npx node test/support/rate-provider.ts`), it serves the default rates until
// Ctrl-C, for trying the ExchangeRate walkthrough where the real provider is out of reach.
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export type StandInMode =
  | { type: 'rates' }
  | { type: 'error'; status: number; body: string; retryAfter?: string }
  | { type: 'slow'; delayMs: number }
  | { type: 'malformed' };

export interface StandInProvider {
  url: string;
  /** Rates it quotes (EUR → currency); a currency left out is missing from `rates`. */
  rates: Record<string, number>;
  date: string;
  mode: StandInMode;
  /** Every request received: path with query, and headers. */
  requests: { path: string; headers: IncomingHttpHeaders }[];
  close(): Promise<void>;
}

export async function startRateProvider(
  rates: Record<string, number> = { CAD: 1.5, CHF: 0.93, GBP: 0.85, JPY: 162.5, PLN: 4.3, USD: 1.0523 },
  port = 0,
): Promise<StandInProvider> {
  const pending = new Set<NodeJS.Timeout>();
  const provider: StandInProvider = {
    url: '',
    rates: { ...rates },
    date: '2026-11-20',
    mode: { type: 'rates' },
    requests: [],
    close: async () => {
      for (const timer of pending) clearTimeout(timer);
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
  const server: Server = createServer((request, response) => {
    provider.requests.push({ path: request.url ?? '', headers: request.headers });
    const url = new URL(request.url ?? '/', 'http://stand-in');
    const json = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      response.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers });
      response.end(typeof body === 'string' ? body : JSON.stringify(body));
    };
    if (url.pathname !== '/v1/latest') return json(404, { message: 'not found' });
    const mode = provider.mode;
    if (mode.type === 'error') return json(mode.status, mode.body, mode.retryAfter ? { 'retry-after': mode.retryAfter } : {});
    if (mode.type === 'malformed') return json(200, '{"amount":1.0,"base":"EUR","date":"2026-11-20","rates":{"USD":1.05');
    const to = (url.searchParams.get('to') ?? Object.keys(provider.rates).join(',')).split(',');
    const quoted = Object.fromEntries(
      to.filter((currency) => currency in provider.rates).map((currency) => [currency, provider.rates[currency]]),
    );
    const answer = () => json(200, { amount: 1.0, base: url.searchParams.get('from') ?? 'EUR', date: provider.date, rates: quoted });
    if (mode.type === 'slow') {
      const timer = setTimeout(() => {
        pending.delete(timer);
        if (!response.destroyed) answer();
      }, mode.delayMs);
      pending.add(timer);
      return;
    }
    answer();
  });
  server.listen(port, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  provider.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return provider;
}

if (import.meta.main) {
  const provider = await startRateProvider(undefined, Number(process.env.PORT ?? 0));
  process.stdout.write(
    `Stand-in rate provider at ${provider.url} (rates of ${provider.date}: ${JSON.stringify(provider.rates)}). Start the operators with:\n\n  EXCHANGE_RATE_PROVIDER_URL=${provider.url} npm start\n\nCtrl-C stops it.\n`,
  );
  process.once('SIGINT', () => void provider.close());
}
