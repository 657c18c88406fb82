// The copies this process deleted itself, by uid (bounded; the oldest forgotten). A copy's delete
// event is the echo of the rule's own work when that very object (its uid) is one this process
// deleted: nothing to restore, so no rule is listed or read for it. A uid names one object for
// ever: a copy made again in its place has another, and its delete by hand is heard as ever. A
// forged event naming such a uid can only skip its own delivery: the object it names is gone
// because this process removed it.
import { setRecent } from '../runtime/index.ts';

const LIMIT = 10_000;
const deleted = new Map<string, true>();

export function recordOwnDelete(uid: string | undefined): void {
  if (uid) setRecent(deleted, uid, true, LIMIT);
}

export const isOwnDelete = (uid: string | undefined): boolean => uid !== undefined && deleted.has(uid);
