// Process helpers, a leaf of the project (it imports nothing of it): is a recorded process still
// the same one (identity.ts), clean-up however this process ends (exit-cleanup.ts), children that
// die with it (children.ts), free loopback ports (ports.ts).
export { atExit } from './exit-cleanup.ts';
export { killOnExit, stopProcess } from './children.ts';
export { isRunning, isSameProcess, processArguments, processStart } from './identity.ts';
export { freePort, freePorts } from './ports.ts';
