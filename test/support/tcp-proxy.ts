// A loopback TCP proxy in front of the API server, so a test can cut one client's connections
// (its watches among them) without touching the server or the other clients: what a NAT timeout,
// a load balancer restart or a flaky network does to a long-lived watch. TLS passes through
// untouched; the server's certificate names 127.0.0.1, so the client still verifies it.
import { createServer, connect, type AddressInfo, type Socket } from 'node:net';

export interface TcpProxy {
  /** https://127.0.0.1:<proxy port> for an https target */
  url: string;
  /** Connections open through the proxy right now. */
  open(): number;
  /** Resets every open connection (both sides); new ones are accepted as before. */
  dropAll(): number;
  close(): Promise<void>;
}

export async function startTcpProxy(target: string): Promise<TcpProxy> {
  const { hostname, port, protocol } = new URL(target);
  const pairs = new Set<[Socket, Socket]>();
  const server = createServer((client) => {
    const upstream = connect(Number(port), hostname);
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `${protocol}//127.0.0.1:${(server.address() as AddressInfo).port}`,
    open: () => pairs.size,
    dropAll: () => {
      const dropped = pairs.size;
      for (const [client, upstream] of pairs) {
        client.resetAndDestroy();
        upstream.resetAndDestroy();
      }
      pairs.clear();
      return dropped;
    },
    close: async () => {
      for (const [client, upstream] of pairs) {
        client.destroy();
        upstream.destroy();
      }
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
