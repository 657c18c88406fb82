// Calling a CompositeController's hooks from this process, with the hook URLs of the manifest
// kept unchanged: a manifest names its hook as seen from inside a cluster
// (`http://immortalcontainer-controller.metacontroller/sync`), which a local plane cannot
// resolve. COMPOSITE_HOOK_URLS maps URL prefixes to where the hook really is
// (`http://immortalcontainer-controller.metacontroller/=http://127.0.0.1:8099/`), the way a
// cluster's DNS maps the Service name; on a cluster it stays empty.
//
// Upstream: metacontroller pkg/hooks/webhook.go (Call); the call itself is
// metacontroller/hook-client.ts.
import {
  callCompositeHook,
  webhookTarget,
  type HookResult,
  isStrict,
  type CompositeHookResponse,
  type Hook,
} from './metacontroller/index.ts';

export interface UrlRewrite {
  from: string;
  to: string;
}

/** "from=to,from2=to2" → rewrites, or the reason the text is not that. */
export function parseHookUrls(text: string): UrlRewrite[] | string {
  const rewrites: UrlRewrite[] = [];
  for (const entry of text
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)) {
    const equals = entry.indexOf('=');
    const from = entry.slice(0, equals);
    const to = entry.slice(equals + 1);
    if (equals <= 0 || !URL.canParse(from) || !URL.canParse(to))
      return `COMPOSITE_HOOK_URLS entry "${entry}" is not <URL prefix>=<URL prefix>`;
    rewrites.push({ from, to });
  }
  return rewrites;
}

/** The URL with the longest matching prefix replaced; unchanged when none matches. */
export function rewriteUrl(url: string, rewrites: UrlRewrite[]): string {
  const match = rewrites.filter((rewrite) => url.startsWith(rewrite.from)).sort((a, b) => b.from.length - a.from.length)[0];
  return match ? match.to + url.slice(match.from.length) : url;
}

/** One sync or finalize hook call, the webhook's URL (or service + path) rewritten. */
export async function callHook(
  hook: Hook,
  hookType: 'sync' | 'finalize',
  request: unknown,
  rewrites: UrlRewrite[],
): Promise<HookResult<CompositeHookResponse>> {
  const target = webhookTarget(hook.webhook);
  if (!target.ok) return target;
  const version = hook.version ?? 'v1';
  const webhook = { ...hook.webhook, url: rewriteUrl(target.value.url, rewrites), service: undefined, path: undefined };
  return callCompositeHook({ webhook, version, strict: isStrict(version, hook.webhook), hookType, request });
}
