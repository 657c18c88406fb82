// What the commands share at the terminal: human-facing lines, and stopping cleanly on a signal.

/** A line for the human at the terminal (stderr: stdout is for what a script reads). */
export const say = (line: string): void => void process.stderr.write(`${line}\n`);

/**
 * Runs until Ctrl-C / SIGTERM / SIGHUP, then stops cleanly once; a second Ctrl-C forces the exit. Under
 * `npm start` one Ctrl-C arrives twice (the terminal signals the process group and npm forwards
 * it), so a signal within a second of the first counts as the same one.
 */
export function untilSignal(stop: () => Promise<void>, says: { stopping: string; forced: string }): void {
  let stopping = false;
  let firstAt = 0;
  const handler = async (signal: string) => {
    if (stopping) {
      if (performance.now() - firstAt < 1000) return;
      say(`${signal} again: exiting now (${says.forced})`);
      process.exit(130);
    }
    stopping = true;
    firstAt = performance.now();
    say(`${signal}: stopping (${says.stopping}; Ctrl-C again to force)...`);
    try {
      await stop();
    } catch (error) {
      say(`stopping failed: ${(error as Error).message}`);
      process.exit(1);
    }
    process.exit(0);
  };
  process.on('SIGINT', () => void handler('SIGINT'));
  process.on('SIGTERM', () => void handler('SIGTERM'));
  // A closed terminal (or a dropped SSH session) drains as SIGTERM does; writing to that terminal
  // may fail now, which must not end the drain.
  process.on('SIGHUP', () => {
    for (const stream of [process.stdout, process.stderr]) stream.on('error', () => {});
    void handler('SIGHUP');
  });
}
