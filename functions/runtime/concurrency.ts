// A bounded number of async tasks at once over a list: enough to hide API latency, few enough to
// keep a burst from opening a connection per item.

/** Runs `work` on every item, at most `limit` at a time, started in order; rejects on the first failure, as Promise.all. */
export async function forEachLimited<T>(
  items: readonly T[],
  limit: number,
  work: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let index = next++; index < items.length; index = next++) await work(items[index]!, index);
  };
  await Promise.all(Array.from({ length: Math.min(Math.max(1, limit), items.length) }, worker));
}
