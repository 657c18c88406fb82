// Which function a request is for: knative/serving pkg/activator/handler/handler.go routes by
// revision; the local activator routes by the first path segment, `/<function>/<path>`, and
// forwards `<path>` (origin-form or absolute-form request targets).
export type Route = { name: string; path: string } | { status: number; message: string };

export function routeOf(target: string, known: ReadonlySet<string> | ReadonlyMap<string, unknown>): Route {
  let raw = target || '/';
  if (!raw.startsWith('/')) {
    try {
      const u = new URL(raw); // absolute-form request target
      raw = u.pathname + u.search;
    } catch {
      return { status: 400, message: `bad request target "${raw.slice(0, 200)}"` };
    }
  }
  const m = /^\/([^/?#]*)([^#]*)/.exec(raw);
  const name = m?.[1] ?? '';
  if (!known.has(name)) {
    return {
      status: 404,
      message: name
        ? `no function named "${name}" (known: ${[...known.keys()].join(', ')})`
        : 'request path must start with a function name',
    };
  }
  let path = m?.[2] ?? '';
  if (!path.startsWith('/')) path = `/${path}`;
  return { name, path };
}
