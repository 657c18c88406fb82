// Serves the ImmortalContainer sync hook for the seed's CompositeController manifest
// (`url: http://immortalcontainer-controller.metacontroller/sync`): POST /sync on PORT
// (default 8080) of HOST (default 127.0.0.1; 0.0.0.0 inside a container).
import { sync } from './hook.ts';
import { serveHooks } from '../../functions/composite/metacontroller/index.ts';

const server = await serveHooks({
  hooks: { '/sync': sync },
  port: Number(process.env.PORT ?? 8080),
  host: process.env.HOST ?? '127.0.0.1',
  onError: (error, path) => console.error(JSON.stringify({ level: 'error', path, error: String(error) })),
});
console.log(JSON.stringify({ level: 'info', msg: `ImmortalContainer sync hook listening on ${server.url}/sync` }));
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void server.close().then(() => process.exit(0)));
