// `opfn invoke`: one hand-made CloudEvent (as ApiServerSource or PingSource would send it) to a
// running function, and its answer.
import { HTTP } from 'cloudevents';
import { apiServerSourceEvent, type ChangeAction } from '../eventing/apiserver-events.ts';
import { resyncEvent } from '../eventing/plane.ts';
import { planeRecord } from '../eventing/state-files.ts';
import { loadFunction } from '../functions/index.ts';
import { isSameProcess } from '../processes/index.ts';
import { say } from './terminal.ts';

/** Where `opfn serve` listens by default. */
const SERVE_URL = 'http://127.0.0.1:8080/';

export interface InvokeOptions {
  /** Default: the running plane's address for the function (its state folder's plane.json), else SERVE_URL. */
  url?: string;
  namespace: string;
  name?: string;
  action: string;
  resource?: boolean;
  resync?: boolean;
  /** Seconds to wait for the answer; 0: as long as it takes. */
  timeout: number;
}

/** Where to send: --url, else the running plane's activator address for the function, else `opfn serve`'s. */
function targetUrl(name: string, options: InvokeOptions, stateDir: string): string {
  if (options.url) return options.url;
  const plane = planeRecord(stateDir);
  return plane?.activatorUrl && isSameProcess(plane) ? `${plane.activatorUrl}/${name}` : SERVE_URL;
}

export async function invoke(name: string, options: InvokeOptions, stateDir: string): Promise<void> {
  const url = targetUrl(name, options, stateDir);
  try {
    const declaration = await loadFunction(name);
    let event;
    if (options.resync) {
      event = resyncEvent(declaration);
    } else {
      if (!options.name) throw new Error('--name is required (or use --resync)');
      if (!['add', 'update', 'delete'].includes(options.action))
        throw new Error(`--action must be add, update or delete, not "${options.action}"`);
      const object = { metadata: { name: options.name, namespace: declaration.reconciles.namespaced ? options.namespace : '' } };
      event = apiServerSourceEvent({
        server: 'opfn-invoke',
        kind: declaration.reconciles,
        object,
        action: options.action as ChangeAction,
        mode: options.resource ? 'Resource' : 'Reference',
      });
    }
    const message = HTTP.binary(event);
    const signal = options.timeout > 0 ? AbortSignal.timeout(options.timeout * 1000) : undefined;
    const response = await fetch(url, {
      method: 'POST',
      headers: message.headers as Record<string, string>,
      body: message.body as string,
      signal,
    }).catch((error: Error & { cause?: { code?: string; message?: string } }) => {
      if (error.name === 'TimeoutError')
        throw new Error(`no answer from ${url} within ${options.timeout} s (--timeout); the function's log says what it is doing`);
      const cause = error.cause?.code ?? error.cause?.message ?? error.message;
      throw new Error(
        `nothing answers at ${url} (${cause}); start \`opfn dev\`, or the function alone with \`opfn serve ${name}\` (PORT=8080), or pass --url`,
      );
    });
    console.log(`${response.status} ${(await response.text()) || response.headers.get('x-opfn-outcome') || ''}`);
    process.exit(response.ok ? 0 : 1);
  } catch (error) {
    say(`opfn invoke: ${(error as Error).message}`);
    process.exit(1);
  }
}
