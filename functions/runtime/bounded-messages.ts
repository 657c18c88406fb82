// How a value that came from outside (an event, a label, a custom resource, a provider's
// answer) appears in a message: an error's reason, a log line, a status condition, a
// Kubernetes Event. A forged event or a hostile answer can carry megabytes and terminal
// escapes, and each message is copied to several places, so every such value is quoted
// here: JSON-escaped (control characters become \u001b and the like) and cut to a few dozen
// characters, with its length when cut.

const DEFAULT_MAX_CHARS = 64;

/** `value` as a JSON-quoted excerpt: at most `maxChars` characters of it, then its length. */
export function quote(value: unknown, maxChars = DEFAULT_MAX_CHARS): string {
  if (typeof value === 'string') {
    return value.length > maxChars ? `${JSON.stringify(value.slice(0, maxChars))}… (${value.length} characters)` : JSON.stringify(value);
  }
  // JSON has no Infinity or NaN (JSON.stringify writes them as null); a message should not.
  if (typeof value === 'number' || typeof value === 'bigint' || value === undefined) return String(value);
  let json: string;
  try {
    json = JSON.stringify(value) ?? String(value);
  } catch {
    json = String(value);
  }
  // JSON text has its control characters escaped already; only its length needs a bound.
  return json.length > maxChars ? `${json.slice(0, maxChars)}… (${json.length} characters of JSON)` : json;
}

/** `text` whole when it has at most `maxChars` characters; else its first `maxChars`, then how long it was. */
export const cut = (text: string, maxChars: number): string =>
  text.length > maxChars ? `${text.slice(0, maxChars)}… (cut from ${text.length} characters)` : text;

/** Events' `note` is at most 1 KiB in events.k8s.io/v1; conditions and log lines keep the same bound. */
export const MAX_MESSAGE_CHARS = 1024;

/**
 * A message bounded for status conditions and Kubernetes Events: at most MAX_MESSAGE_CHARS,
 * without control characters other than newline and tab (a message is read on a terminal).
 */
export function boundedMessage(message: string): string {
  const clean = message.replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  // What cut appends takes at most 40 characters.
  return clean.length > MAX_MESSAGE_CHARS ? cut(clean, MAX_MESSAGE_CHARS - 40) : clean;
}
