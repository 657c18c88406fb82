// Brokers on the local plane: there is one broker process, and every Broker object names it (its
// ingress URL is each one's address). A Trigger or source naming a Broker that does not exist is
// not Ready, as on Knative ("BrokerDoesNotExist").
import { keyOf, keyString, type KubeObject } from '../../functions/runtime/index.ts';
import { Broker } from './kinds.ts';
import { ready, type StatusWriter } from './status.ts';

export class BrokerDirectory {
  readonly #brokers = new Set<string>();
  readonly #status: StatusWriter;
  readonly #ingressUrl: string;

  constructor(status: StatusWriter, ingressUrl: string) {
    this.#status = status;
    this.#ingressUrl = ingressUrl;
  }

  has(namespace: string, name: string): boolean {
    return this.#brokers.has(`${namespace}/${name}`);
  }

  get url(): string {
    return this.#ingressUrl;
  }

  async apply(broker: KubeObject): Promise<void> {
    this.#brokers.add(keyString(keyOf(broker)));
    await this.#status.write(Broker, broker, {
      conditions: [ready('Ready', "the local plane's broker")],
      fields: { address: { url: this.#ingressUrl } },
    });
  }

  async remove(broker: KubeObject): Promise<void> {
    this.#brokers.delete(keyString(keyOf(broker)));
  }
}
