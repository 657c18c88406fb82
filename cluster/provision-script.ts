// Runs one of this folder's provisioning scripts (provision.sh, provision-knative.sh). Their
// contract: progress lines `[provision] …` on stderr, a failure as one `[provision] error: …` line,
// and the folder they provisioned as the last line on stdout.
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The path of a script in cluster/, e.g. `provision.sh`. */
export const provisionScript = (name: string): string => join(dirname(fileURLToPath(import.meta.url)), name);

/**
 * Runs `bash <script> <args…>` and resolves to its last stdout line. Each `[provision]` line goes
 * to `progress` as it comes; a failure rejects with the script's own error line, else with
 * `<what> failed (exit N); run bash <script> to see why`.
 */
export function runProvisionScript(
  script: string,
  args: string[],
  what: string,
  progress: (line: string) => void = () => {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let lastLines: string[] = [];
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      for (const line of chunk.split('\n').filter(Boolean)) {
        lastLines = [...lastLines.slice(-20), line];
        if (line.startsWith('[provision]')) progress(line);
      }
    });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code === 0) resolve(out.trim().split('\n').pop()!);
      else
        reject(
          new Error(
            lastLines
              .filter((line) => line.includes('error'))
              .pop()
              ?.replace('[provision] error: ', '') ?? `${what} failed (exit ${code}); run bash ${[script, ...args].join(' ')} to see why`,
          ),
        );
    });
  });
}
