// A function's declared configuration: environment variables with defaults. Secret ones are
// read from the environment too; on Knative the generated Service fills them with
// valueFrom.secretKeyRef, so a secret never sits in a manifest. Resolved once at start: a
// missing required value stops the process with one line naming it, and reading a name that
// was never declared is a programming error, not an empty string.
import { inspect } from 'node:util';

export interface ConfigParameter {
  /** The environment variable, e.g. RATES_BASE_URL. */
  name: string;
  description: string;
  /** Used when the variable is unset; without one the parameter is required. */
  default?: string;
  /** Comes from a Secret (never logged; the generated manifest uses secretKeyRef). */
  secret?: boolean;
}

const ENV_NAME = /^[A-Z_][A-Z0-9_]*$/;

/** Throws when the declaration itself is wrong (bad or duplicate names). */
export function validateConfigDeclaration(functionName: string, parameters: ConfigParameter[]): void {
  const seen = new Set<string>();
  for (const parameter of parameters) {
    if (!ENV_NAME.test(parameter.name))
      throw new Error(`function ${functionName}: config "${parameter.name}" must be an environment variable name (A-Z, 0-9, _)`);
    if (seen.has(parameter.name)) throw new Error(`function ${functionName}: config "${parameter.name}" is declared twice`);
    seen.add(parameter.name);
  }
}

/**
 * The values of the declared parameters from `env`. Throws one error naming every missing
 * required parameter. The result is frozen and throws on a name that was not declared.
 */
export function resolveConfig(
  functionName: string,
  parameters: ConfigParameter[],
  env: Record<string, string | undefined> = process.env,
): Readonly<Record<string, string>> {
  const values: Record<string, string> = {};
  const missing: string[] = [];
  for (const parameter of parameters) {
    const value = env[parameter.name] ?? parameter.default;
    if (value === undefined) missing.push(`${parameter.name} (${parameter.description})`);
    else values[parameter.name] = value;
  }
  if (missing.length) throw new Error(`function ${functionName} needs configuration: set ${missing.join(', ')}`);
  // Logged, printed or serialised, the config shows its secret values redacted.
  const shown = () =>
    Object.fromEntries(parameters.filter((p) => p.name in values).map((p) => [p.name, p.secret ? '(secret)' : values[p.name]]));
  for (const name of ['toJSON', inspect.custom]) Object.defineProperty(values, name, { value: shown, enumerable: false });
  return new Proxy(Object.freeze(values), {
    get(target, name) {
      // `await` and a logger ask any object for `then`: not a parameter's name, nor a typo.
      if (typeof name === 'string' && !(name in target) && name !== 'then')
        throw new Error(`config "${name}" is not declared by function ${functionName}`);
      return Reflect.get(target, name);
    },
  });
}
