// Duplicate object keys in a JSON text, which JSON.parse silently resolves to the last one.
//
// Upstream: sigs.k8s.io/json UnmarshalStrict (used by metacontroller pkg/hooks/webhook.go) reports
// "duplicate field" as a strict error, fatal in strict mode (the default for v2 hooks), for the
// response's own fields and for map-typed values such as `status`. Children are decoded by
// unstructured.UnmarshalJSON, which is not strict: the caller names the top-level fields whose
// contents are not checked.

/**
 * The path of the first duplicated key (e.g. `status.conditions`), or undefined. `text` must
 * already be valid JSON (JSON.parse succeeded), so the scanner only tracks structure.
 */
export function firstDuplicateKey(text: string, uncheckedTopLevel: ReadonlySet<string> = new Set()): string | undefined {
  let at = 0;
  const skipSpace = () => {
    while (at < text.length && ' \t\n\r'.includes(text[at]!)) at++;
  };
  const readString = (): string => {
    const start = at;
    at++; // opening quote
    while (text[at] !== '"') at += text[at] === '\\' ? 2 : 1;
    at++;
    return JSON.parse(text.slice(start, at)) as string;
  };
  // Returns the duplicate's path, if any, after consuming one value.
  const value = (path: string, check: boolean): string | undefined => {
    skipSpace();
    const char = text[at];
    if (char === '{') {
      at++;
      const seen = new Set<string>();
      let found: string | undefined;
      skipSpace();
      if (text[at] === '}') {
        at++;
        return undefined;
      }
      for (;;) {
        skipSpace();
        const key = readString();
        const keyPath = path ? `${path}.${key}` : key;
        if (check && !found && seen.has(key)) found = keyPath;
        seen.add(key);
        skipSpace();
        at++; // colon
        const inner = value(keyPath, check && !(path === '' && uncheckedTopLevel.has(key)));
        found ??= inner;
        skipSpace();
        if (text[at++] === '}') return found;
      }
    }
    if (char === '[') {
      at++;
      let found: string | undefined;
      skipSpace();
      if (text[at] === ']') {
        at++;
        return undefined;
      }
      for (let index = 0; ; index++) {
        found ??= value(`${path}[${index}]`, check);
        skipSpace();
        if (text[at++] === ']') return found;
      }
    }
    if (char === '"') {
      readString();
      return undefined;
    }
    while (at < text.length && !',}] \t\n\r'.includes(text[at]!)) at++;
    return undefined;
  };
  return value('', true);
}
