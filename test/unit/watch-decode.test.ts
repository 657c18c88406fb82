// The watch stream's line decoder: multi-byte UTF-8 characters split across chunks survive.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { jsonLines } from '../../functions/runtime/kube/watch.ts';

async function* chunked(bytes: Buffer, sizes: number[]): AsyncGenerator<Uint8Array> {
  let at = 0;
  for (const size of sizes) {
    yield bytes.subarray(at, at + size);
    at += size;
  }
  if (at < bytes.length) yield bytes.subarray(at);
}

async function collect(source: AsyncIterable<string>): Promise<string[]> {
  const out: string[] = [];
  for await (const line of source) out.push(line);
  return out;
}

describe('jsonLines', () => {
  it('decodes characters whose bytes are split across chunks', async () => {
    const objects = [
      { type: 'ADDED', object: { data: { greeting: 'grüße 你好 🎉' } } },
      { type: 'MODIFIED', object: { data: { x: 'ÿ€' } } },
    ];
    const bytes = Buffer.from(objects.map((o) => JSON.stringify(o)).join('\n') + '\n', 'utf8');
    // One byte at a time splits every multi-byte character; also try a few odd chunk sizes.
    for (const sizes of [Array.from({ length: bytes.length }, () => 1), [7, 3, 29, 2, 11], [bytes.indexOf(0xf0) + 1, 2]]) {
      const lines = await collect(jsonLines(chunked(bytes, sizes)));
      assert.deepEqual(
        lines.map((l) => JSON.parse(l)),
        objects,
        `chunk sizes ${sizes.slice(0, 6).join(',')}`,
      );
    }
  });

  it('yields the last line without a trailing newline and skips blank lines', async () => {
    const lines = await collect(jsonLines(chunked(Buffer.from('{"a":1}\n\n  \n{"b":"é"}'), [9, 1, 8])));
    assert.deepEqual(lines, ['{"a":1}', '{"b":"é"}']);
  });
});
