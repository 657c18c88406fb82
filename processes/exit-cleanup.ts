// Clean-up that must happen however this process ends: a normal exit, process.exit() from
// anywhere, or a terminating signal (a terminal's Ctrl-C, a runner's SIGTERM, a closed terminal's
// SIGHUP). Node ends a process on a signal it has no listener for without running exit handlers,
// so a signal nobody else handles runs the clean-up here and is then raised again, ending the
// process as it would have ended. A process with a handler of its own for the signal (`opfn dev`
// drains its deliveries first) decides for itself, and its exit runs the clean-up.
const tasks: (() => void)[] = [];
let installed = false;

function runTasks(): void {
  // Last registered first, as C's atexit: a control plane's processes die before its folder goes.
  while (tasks.length > 0) {
    try {
      tasks.pop()!();
    } catch {
      // The process is ending; there is nobody left to tell.
    }
  }
}

function onSignal(signal: NodeJS.Signals): void {
  if (process.listenerCount(signal) > 1) return;
  runTasks();
  process.removeListener(signal, onSignal);
  process.kill(process.pid, signal);
}

/** Runs `task` (synchronous) once when this process ends, whichever way; the returned function cancels it. */
export function atExit(task: () => void): () => void {
  if (!installed) {
    installed = true;
    process.on('exit', runTasks);
    for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, onSignal);
  }
  tasks.push(task);
  return () => {
    const index = tasks.indexOf(task);
    if (index >= 0) tasks.splice(index, 1);
  };
}
