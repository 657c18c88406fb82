// The seeds' sample objects from crds/examples/, applied unchanged by the walkthrough tests.
import { join } from 'node:path';
import { CRD_DIR, readManifests } from '../../eventing/crds.ts';
import type { ImmortalContainer } from '../../functions/immortal-container/desired.ts';

export function exampleImmortalContainer(): ImmortalContainer {
  const example = readManifests(join(CRD_DIR, 'examples')).find((object) => object.kind === 'ImmortalContainer' && object.apiVersion === 'immortalcontainer.flugel.it/v1alpha1');
  if (!example) throw new Error('crds/examples/ has no immortalcontainer.flugel.it ImmortalContainer');
  return example as ImmortalContainer;
}
