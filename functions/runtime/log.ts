import { pino, type Logger } from 'pino';

/** JSON lines on stdout, as Knative's log collection expects; LOG_LEVEL overrides "info". */
export function createLogger(name: string, level = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({ name, level, timestamp: pino.stdTimeFunctions.isoTime });
}
