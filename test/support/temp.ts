// Temporary folders of a test file or benchmark, removed however its process ends (passed, failed,
// or stopped by Ctrl-C): every `npm test` used to leave its bundles, plane state and kubeconfigs in
// the system's temporary folder (the cli test's folder alone held 19 MiB).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { atExit } from '../../cluster/exit-cleanup.ts';

/** A new folder `<prefix>XXXXXX` under the system's temporary folder, removed when this process ends. */
export function tempDir(prefix: string): string {
  const folder = mkdtempSync(join(tmpdir(), prefix));
  atExit(() => rmSync(folder, { recursive: true, force: true, maxRetries: 3 }));
  return folder;
}
