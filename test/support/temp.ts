// Temporary folders of a test file or benchmark, removed however its process ends (passed, failed,
// or stopped by Ctrl-C), so that no run leaves bundles, plane state or kubeconfigs behind.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { atExit } from '../../processes/index.ts';

/**
 * A new folder `<prefix>XXXXXX` under the system's temporary folder, removed when this process
 * ends unless `keep()` was called first; `remove()` removes it now.
 */
export function tempFolder(prefix: string): { dir: string; remove(): void; keep(): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const remove = () => rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  const keep = atExit(remove);
  return {
    dir,
    remove() {
      keep();
      remove();
    },
    keep,
  };
}

/** A new folder `<prefix>XXXXXX` under the system's temporary folder, removed when this process ends. */
export function tempDir(prefix: string): string {
  return tempFolder(prefix).dir;
}
