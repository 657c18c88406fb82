// Temporary folders of a test file, removed when its process exits, whether its tests passed or
// not: every `npm test` used to leave its bundles, plane state and kubeconfigs behind in the
// system's temporary folder (the cli test's folder alone held 19 MiB).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const folders = new Set<string>();
process.on('exit', () => {
  for (const folder of folders) {
    try {
      rmSync(folder, { recursive: true, force: true, maxRetries: 3 });
    } catch {
      // The process is exiting; a folder left behind is not worth failing the run for.
    }
  }
});

/** A new folder `<prefix>XXXXXX` under the system's temporary folder, removed when this process exits. */
export function tempDir(prefix: string): string {
  const folder = mkdtempSync(join(tmpdir(), prefix));
  folders.add(folder);
  return folder;
}
