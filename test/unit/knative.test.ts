// The pure parts of eventing/knative/: Trigger and ApiServerSource objects turned into the local
// plane's routes and sources (or the Knative-style reasons why not), Service addresses and
// scaling, PingSource events and cron schedules, and status conditions.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { pino } from 'pino';
import {
  ApiServerSourceController,
  KindResolver,
  localSourceFor,
  namespacesListedOnce,
} from '../../eventing/knative/api-server-sources.ts';
import { CopyratorRuleKind } from '../../functions/copyrator/desired.ts';
import { unreachableKube } from '../support/cluster.ts';
import { nextFire, parseSchedule } from '../../eventing/knative/cron.ts';
import { pingEvent, pingPlan } from '../../eventing/knative/ping-sources.ts';
import { functionOf, scalingFromService, ServiceDirectory, withConfigFromEnvironment } from '../../eventing/knative/services.ts';
import { apiServerStatus, nextStatus, sameStatus, StatusBoard } from '../../eventing/knative/status.ts';
import { checkConfiguration, type FunctionConfiguration } from '../../eventing/activator/index.ts';
import { brokerTriggerFor, TriggerController, type Resolvers } from '../../eventing/knative/triggers.ts';
import {
  deadLetterSink,
  DEFAULT_OPTIONS,
  formatLabelSelector,
  functionObjects,
  parseLabelSelector,
} from '../../eventing/manifests/index.ts';
import { loadAllFunctions } from '../../functions/index.ts';
import { Pod, type KubeObject, type KubeClient } from '../../functions/runtime/index.ts';

const functions = await loadAllFunctions();
const [declaration] = functions;
const objects = functionObjects(declaration, DEFAULT_OPTIONS);
const find = (kind: string, name = declaration.name) => structuredClone(objects.find((o) => o.kind === kind && o.metadata.name === name)!);
const NS = DEFAULT_OPTIONS.namespace;
const FUNCTION_URL = 'http://127.0.0.1:9999/immortal-container';
/** What the activator was told to run each function with, and which functions it was told to withdraw. */
const configured: { name: string; configuration: FunctionConfiguration }[] = [];
const withdrawn: string[] = [];
const board = new StatusBoard();
const services = new ServiceDirectory(board, {
  urlFor: (name) => (name === declaration.name ? FUNCTION_URL : undefined),
  configure: (name, configuration) => {
    checkConfiguration(name, configuration);
    configured.push({ name, configuration });
  },
  withdraw: (name) => withdrawn.push(name),
});
for (const service of [find('Service'), deadLetterSink(DEFAULT_OPTIONS)]) await services.apply(service);
const resolvers: Resolvers = { brokers: { has: (namespace, name) => namespace === NS && name === DEFAULT_OPTIONS.brokerName }, services };

describe('Trigger objects → broker routes', () => {
  test('the generated Trigger resolves to the function through its Service, filters and delivery kept', () => {
    const { trigger, verdict } = brokerTriggerFor(find('Trigger'), resolvers);
    assert.deepEqual(trigger, {
      name: `${NS}/${declaration.name}`,
      // immortal-container leaves out its pods' adds (its declaration's changes).
      filters: [
        { exact: { opfnfunction: declaration.name } },
        {
          not: {
            all: [
              { exact: { apiversion: 'v1' } },
              { exact: { kind: 'Pod' } },
              { any: [{ exact: { type: 'dev.knative.apiserver.ref.add' } }, { exact: { type: 'dev.knative.apiserver.resource.add' } }] },
            ],
          },
        },
      ],
      subscriber: FUNCTION_URL,
      maxInFlight: declaration.scaling.maxScale * (declaration.scaling.containerConcurrency || declaration.scaling.target || 100),
      // The generated dead-letter Service is the broker's own dead-letter file locally.
      delivery: { timeout: 'PT300S', retry: 10, backoffPolicy: 'exponential', backoffDelay: 'PT0.2S' },
    });
    assert.deepEqual(
      verdict.conditions.map((c) => `${c.type}=${c.status}`),
      ['BrokerReady=True', 'SubscriberResolved=True', 'DeadLetterSinkResolved=True', 'Ready=True'],
    );
    assert.equal(verdict.fields?.subscriberUri, FUNCTION_URL);
  });

  test('a uri subscriber is used as given', () => {
    const object = find('Trigger');
    (object.spec as any).subscriber = { uri: 'http://other.example/x' };
    assert.equal(brokerTriggerFor(object, resolvers).trigger?.subscriber, 'http://other.example/x');
  });

  const broken: [string, (spec: any) => void, string][] = [
    [
      'a Service that does not exist',
      (spec) => {
        spec.subscriber.ref.name = 'ghost';
      },
      'ServiceNotFound',
    ],
    [
      'a Broker that does not exist',
      (spec) => {
        spec.broker = 'elsewhere';
      },
      'BrokerDoesNotExist',
    ],
    [
      'a reference to something other than a Knative Service',
      (spec) => {
        spec.subscriber = { ref: { apiVersion: 'v1', kind: 'Service', name: 'x' } };
      },
      'UnsupportedReference',
    ],
    [
      'a non-http uri',
      (spec) => {
        spec.subscriber = { uri: 'kafka://topic' };
      },
      'UnsupportedURI',
    ],
    [
      'a dead-letter sink that cannot be resolved',
      (spec) => {
        spec.delivery.deadLetterSink.ref.name = 'ghost';
      },
      'ServiceNotFound',
    ],
  ];
  for (const [what, mutate, reason] of broken) {
    test(`${what}: no route, Ready=False ${reason}`, () => {
      const object = find('Trigger');
      mutate(object.spec);
      const { trigger, verdict } = brokerTriggerFor(object, resolvers);
      assert.equal(trigger, undefined);
      const readyCondition = verdict.conditions.at(-1)!;
      assert.deepEqual([readyCondition.type, readyCondition.status, readyCondition.reason], ['Ready', 'False', reason]);
      assert.ok(readyCondition.message);
    });
  }
});

describe('ApiServerSource objects → local sources', () => {
  const kinds = {
    resolve: async (apiVersion: string, kind: string) =>
      kind === Pod.kind && apiVersion === 'v1' ? Pod : kind === declaration.reconciles.kind ? declaration.reconciles : undefined,
  };
  const brokers = resolvers.brokers;

  const namespaces: Record<string, Record<string, string>> = { default: {}, [NS]: {}, 'team-a': { team: 'a' }, 'team-b': { team: 'b' } };
  /** Namespaces by label, as the API server would select them (matchLabels only: enough here). */
  const lister = async (selector: { matchLabels?: Record<string, string> }) =>
    Object.entries(namespaces)
      .filter(([, labels]) => Object.entries(selector.matchLabels ?? {}).every(([key, value]) => labels[key] === value))
      .map(([name]) => name)
      .sort();

  test("the generated sources become the plane's SourceSpecs (selectors, mode, extensions), every namespace, all of them in status.namespaces", async () => {
    const related = await localSourceFor(find('ApiServerSource', `${declaration.name}-related`), kinds, brokers, lister);
    assert.deepEqual(related.specs, [
      {
        name: `${NS}/${declaration.name}-related`,
        mode: 'Resource',
        resources: [{ kind: Pod, labelSelector: declaration.owns[0].ownerNameLabel }],
        extensions: { opfnfunction: declaration.name },
      },
    ]);
    assert.equal(related.specs?.[0]?.namespace, undefined, 'namespaceSelector {} = every namespace, one watch');
    assert.deepEqual(related.namespaces, ['default', NS, 'team-a', 'team-b'].sort());
  });

  test('without namespaceSelector a source watches only its own namespace, and says so', async () => {
    const object = find('ApiServerSource', `${declaration.name}-objects`);
    delete (object.spec as any).namespaceSelector;
    const planned = await localSourceFor(object, kinds, brokers, async () => assert.fail('no selector: nothing to list'));
    assert.deepEqual(
      planned.specs?.map((spec) => spec.namespace),
      [NS],
    );
    assert.deepEqual(planned.namespaces, [NS]);
  });

  test('a namespaceSelector with labels: one watch per selected namespace for namespaced kinds, cluster-scoped kinds once', async () => {
    const object = find('ApiServerSource', `${declaration.name}-objects`);
    const Node = { group: '', version: 'v1', kind: 'Node', plural: 'nodes', namespaced: false };
    (object.spec as any).namespaceSelector = { matchLabels: { team: 'a' } };
    (object.spec as any).resources = [
      { apiVersion: 'v1', kind: 'Pod' },
      { apiVersion: 'v1', kind: 'Node' },
    ];
    const withNodes = { resolve: async (apiVersion: string, kind: string) => (kind === 'Node' ? Node : kinds.resolve(apiVersion, kind)) };
    const planned = await localSourceFor(object, withNodes, brokers, lister);
    const name = `${NS}/${declaration.name}-objects`;
    assert.deepEqual(
      planned.specs?.map((spec) => [spec.name, spec.namespace, spec.resources.map((r) => r.kind.kind)]),
      [
        [name, undefined, ['Node']],
        [`${name}@team-a`, 'team-a', ['Pod']],
      ],
    );
    assert.deepEqual(planned.namespaces, ['team-a']);
    namespaces['team-c'] = { team: 'a' };
    try {
      assert.deepEqual(
        (await localSourceFor(object, withNodes, brokers, lister)).namespaces,
        ['team-a', 'team-c'],
        'a namespace labelled later is selected on the next plan',
      );
    } finally {
      delete namespaces['team-c'];
    }
  });

  test('a namespace pass lists Namespaces once, metadata only, and matches every selector against that list', async () => {
    const lists: unknown[] = [];
    const kube = {
      list: async (_kind: unknown, options: unknown) => {
        lists.push(options);
        return { items: Object.entries(namespaces).map(([name, labels]) => ({ metadata: { name, labels } })) };
      },
    } as unknown as KubeClient;
    const listed = namespacesListedOnce(kube);
    assert.deepEqual(await listed({ matchLabels: { team: 'a' } }), ['team-a']);
    assert.deepEqual(await listed({ matchExpressions: [{ key: 'team', operator: 'Exists' }] }), ['team-a', 'team-b']);
    assert.deepEqual(
      await listed({ matchExpressions: [{ key: 'team', operator: 'NotIn', values: ['a'] }] }),
      ['default', NS, 'team-b'].sort(),
    );
    assert.deepEqual(lists, [{ metadataOnly: true }]);
  });

  test('namespaces that cannot be listed: not started, Ready=False NamespacesNotListed', async () => {
    const planned = await localSourceFor(find('ApiServerSource', `${declaration.name}-related`), kinds, brokers, async () => {
      throw new Error('namespaces is forbidden');
    });
    assert.equal(planned.specs, undefined);
    assert.equal(planned.verdict?.conditions.at(-1)?.reason, 'NamespacesNotListed');
    assert.match(planned.verdict?.conditions.at(-1)?.message ?? '', /namespaces is forbidden/);
  });

  const broken: [string, (spec: any) => void, string][] = [
    [
      'a kind the API server does not serve',
      (spec) => {
        spec.resources = [{ apiVersion: 'example.com/v1', kind: 'Nope' }];
      },
      'UnknownKind',
    ],
    [
      'a sink that is not a Broker',
      (spec) => {
        spec.sink = { uri: 'http://x/' };
      },
      'NotFound',
    ],
    [
      'an owner that is not an apiVersion and kind',
      (spec) => {
        spec.owner = { apiVersion: 1, kind: 'Pod' };
      },
      'InvalidOwner',
    ],
    [
      'source filters (NewAPIServerFilters)',
      (spec) => {
        spec.filters = [{ exact: { type: 'dev.knative.apiserver.ref.add' } }];
      },
      'FiltersUnsupported',
    ],
    [
      'a mode that is neither Reference nor Resource',
      (spec) => {
        spec.mode = 'Full';
      },
      'InvalidMode',
    ],
    // Knative's webhook refuses these, or sdk-go refuses to set them on an event; Knative's CRD
    // schema keeps them (ceOverrides.extensions preserves unknown fields).
    [
      'a ceOverrides extension name with a dash',
      (spec) => {
        spec.ceOverrides = { extensions: { 'Fn-Name': 'x' } };
      },
      'InvalidCEOverrides',
    ],
    [
      "a ceOverrides extension that would replace the event's type",
      (spec) => {
        spec.ceOverrides = { extensions: { Type: 'x' } };
      },
      'InvalidCEOverrides',
    ],
    [
      'a ceOverrides value with a line break (no HTTP header can carry it)',
      (spec) => {
        spec.ceOverrides = { extensions: { team: 'a\r\nb' } };
      },
      'InvalidCEOverrides',
    ],
    [
      'a ceOverrides value that is not a string',
      (spec) => {
        spec.ceOverrides = { extensions: { team: 7 } };
      },
      'InvalidCEOverrides',
    ],
  ];
  for (const [what, mutate, reason] of broken) {
    test(`${what}: not started, Ready=False ${reason}`, async () => {
      const object = find('ApiServerSource', `${declaration.name}-objects`);
      mutate(object.spec);
      const planned = await localSourceFor(object, kinds, brokers, lister);
      assert.equal(planned.specs, undefined);
      assert.equal(planned.verdict?.conditions.at(-1)?.reason, reason);
    });
  }

  test('an owner filter is passed to the local source as the adapter applies it', async () => {
    const object = find('ApiServerSource', `${declaration.name}-objects`);
    (object.spec as any).owner = { apiVersion: 'v1', kind: 'Pod' };
    assert.deepEqual(
      (await localSourceFor(object, kinds, brokers, lister)).specs?.map((spec) => spec.owner),
      [{ apiVersion: 'v1', kind: 'Pod' }],
    );
  });

  test('a source whose client arrives after the controller stopped is never started', async () => {
    let requests = 0;
    let release!: () => void;
    const clientReady = new Promise<void>((resolve) => (release = resolve));
    const controller = new ApiServerSourceController({
      kube: unreachableKube(),
      brokers: { has: brokers.has, url: 'http://broker' },
      publish: async () => {},
      log: pino({ level: 'silent' }),
      status: board,
      knownKinds: [declaration.reconciles, Pod],
      clientFor: async () => {
        await clientReady;
        return unreachableKube(() => requests++);
      },
      namespaces: lister,
    });
    const applying = controller.apply(find('ApiServerSource', `${declaration.name}-objects`));
    await new Promise((resolve) => setTimeout(resolve, 50));
    await controller.stop();
    release();
    await applying;
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(requests, 0, 'the source never listed: it was not started');
  });

  test("ceOverrides extension names are lower-cased, as sdk-go's SetExtension sets them", async () => {
    const object = find('ApiServerSource', `${declaration.name}-objects`);
    (object.spec as any).ceOverrides = { extensions: { opfnfunction: declaration.name, TeamName: 'a' } };
    assert.deepEqual((await localSourceFor(object, kinds, brokers, lister)).specs?.[0]?.extensions, {
      opfnfunction: declaration.name,
      teamname: 'a',
    });
  });

  test("a resource is found from the name guessed from its kind, as Knative's adapter finds it: `Copyrator` watches CopyratorRules (served as copyrators), `CopyratorRule` nothing", async () => {
    const resolver = new KindResolver(unreachableKube(), [CopyratorRuleKind]);
    assert.deepEqual(await resolver.resolve('flant.com/v1', 'Copyrator'), CopyratorRuleKind);
    assert.equal(await resolver.resolve('flant.com/v1', 'CopyratorRule'), undefined, 'guessed as copyratorrules, which nothing serves');
  });

  test('label selectors survive the round trip manifest → local source', () => {
    for (const text of ['controller', 'a=b,!c', 'tier in (web,api),x notin (y)'])
      assert.deepEqual(parseLabelSelector(formatLabelSelector(parseLabelSelector(text))), parseLabelSelector(text));
  });
});

describe('Services', () => {
  test("FUNCTION and the revision template's scaling are read back as declared", () => {
    const service = find('Service');
    assert.equal(functionOf(service), declaration.name);
    assert.deepEqual(scalingFromService(service), declaration.scaling);
  });

  const readyOf = () => board.ready(`Service ${NS}/${declaration.name}`);

  test("the generated Service configures the activator with the declaration's scaling, Knative's timeout and the delivery budget for it", () => {
    assert.deepEqual(configured[0], {
      name: declaration.name,
      configuration: {
        scaling: declaration.scaling,
        timeoutSeconds: 300,
        deliveryBudgetSeconds: 30,
        containerEnv: { FUNCTION: declaration.name, OPFN_DELIVERY_BUDGET_SECONDS: '30' },
      },
    });
    assert.equal(readyOf()?.status, 'True');
  });

  test('an edited scaling, timeout or delivery budget is applied to the function, Ready; a bad annotation, an unusable scaling or a budget the timeout leaves no room after is not, with the reason', async () => {
    const service = find('Service');
    const template = (service.spec as any).template;
    template.metadata.annotations['autoscaling.knative.dev/max-scale'] = '9';
    template.spec.containerConcurrency = 3;
    template.spec.timeoutSeconds = 42;
    await services.apply(service);
    const budget = template.spec.containers[0].env.find((e: { name: string }) => e.name === 'OPFN_DELIVERY_BUDGET_SECONDS');
    budget.value = '20';
    await services.apply(service);
    assert.deepEqual(configured.at(-1)!.configuration, {
      scaling: { ...declaration.scaling, maxScale: 9, containerConcurrency: 3 },
      timeoutSeconds: 42,
      deliveryBudgetSeconds: 20,
      containerEnv: { FUNCTION: declaration.name, OPFN_DELIVERY_BUDGET_SECONDS: '20' },
    });
    assert.equal(readyOf()?.status, 'True');
    // The Trigger's bound follows the Service: containerConcurrency × max-scale.
    assert.equal(brokerTriggerFor(find('Trigger'), resolvers).trigger?.maxInFlight, 27);

    const applied = configured.length;
    template.metadata.annotations['autoscaling.knative.dev/max-scale'] = 'lots';
    await services.apply(service);
    assert.deepEqual([readyOf()?.status, readyOf()?.reason], ['False', 'InvalidConfiguration']);
    template.metadata.annotations['autoscaling.knative.dev/max-scale'] = '1';
    template.metadata.annotations['autoscaling.knative.dev/min-scale'] = '2';
    await services.apply(service);
    assert.deepEqual([readyOf()?.status, readyOf()?.reason], ['False', 'InvalidScaling']);
    assert.match(readyOf()!.message!, /maxScale \(1\) is below minScale \(2\)/);
    template.metadata.annotations['autoscaling.knative.dev/min-scale'] = '0';
    template.spec.timeoutSeconds = -1;
    await services.apply(service);
    assert.deepEqual([readyOf()?.status, readyOf()?.reason], ['False', 'InvalidConfiguration']);
    template.spec.timeoutSeconds = 42;
    budget.value = 'soon';
    await services.apply(service);
    assert.deepEqual([readyOf()?.status, readyOf()?.reason], ['False', 'InvalidConfiguration']);
    assert.match(readyOf()!.message!, /OPFN_DELIVERY_BUDGET_SECONDS "soon" is not a number of seconds/);
    // A budget the timeout leaves no room after: the answers would come after the request timed out.
    budget.value = '42';
    await services.apply(service);
    assert.deepEqual([readyOf()?.status, readyOf()?.reason], ['False', 'InvalidScaling']);
    assert.match(readyOf()!.message!, /OPFN_DELIVERY_BUDGET_SECONDS 42 leaves no time before timeoutSeconds 42/);
    assert.equal(configured.length, applied, 'nothing invalid reached the activator');
    await services.apply(find('Service'));
    assert.equal(readyOf()?.status, 'True');
  });

  test('an edited environment reaches the activator (which rolls the instances); another image is refused with the reason, the function left as it ran', async () => {
    const service = find('Service');
    const container = (service.spec as any).template.spec.containers[0];
    container.env.push({ name: 'GREETING', value: 'hello' }, { name: 'TOKEN', valueFrom: { secretKeyRef: { name: 's', key: 'k' } } });
    await services.apply(service);
    assert.equal(readyOf()?.status, 'True');
    assert.equal(configured.at(-1)!.configuration.containerEnv?.GREETING, 'hello');
    assert.equal('TOKEN' in configured.at(-1)!.configuration.containerEnv!, false, 'a Secret reference is inherited, not set');
    const applied = configured.length;
    container.image = 'example.com/someone-else:1';
    await services.apply(service);
    assert.deepEqual([readyOf()?.status, readyOf()?.reason], ['False', 'ImageNotRunLocally']);
    assert.match(readyOf()!.message!, /cannot run another/);
    assert.equal(configured.length, applied, 'the function keeps what it ran');
    await services.apply(find('Service'));
    assert.equal(readyOf()?.status, 'True');
  });

  test("the plane's environment sets a declared parameter in the generated Service, not a secret one", () => {
    const withParameter = {
      ...declaration,
      config: [
        { name: 'PLAIN', description: 'p', default: 'a' },
        { name: 'HIDDEN', description: 'h', default: '', secret: true },
      ],
    };
    const service = structuredClone(find('Service'));
    (service.spec as any).template.spec.containers[0].env.push(
      { name: 'PLAIN', value: 'a' },
      { name: 'HIDDEN', valueFrom: { secretKeyRef: { name: 's', key: 'HIDDEN' } } },
    );
    const [seeded] = withConfigFromEnvironment([service], [withParameter], { PLAIN: 'b', HIDDEN: 'x', FUNCTION: 'other' });
    const env = (seeded!.spec as any).template.spec.containers[0].env as { name: string; value?: string; valueFrom?: unknown }[];
    assert.equal(env.find((e) => e.name === 'PLAIN')?.value, 'b');
    assert.equal(env.find((e) => e.name === 'FUNCTION')?.value, declaration.name, 'only declared parameters');
    assert.ok(env.find((e) => e.name === 'HIDDEN')?.valueFrom, 'a secret stays a reference');
  });

  test('autoscaling annotations: the camelCase spellings Serving still reads count too; one the plane does not implement, or a class or metric it cannot honour, is not Ready with the reason', async () => {
    const service = find('Service');
    const annotations = (service.spec as any).template.metadata.annotations as Record<string, string>;
    delete annotations['autoscaling.knative.dev/max-scale'];
    annotations['autoscaling.knative.dev/maxScale'] = '7';
    assert.equal(scalingFromService(service).maxScale, 7);
    annotations['autoscaling.knative.dev/max-scale'] = '5';
    assert.equal(scalingFromService(service).maxScale, 5, 'the kebab-case key wins, as kmap.KeyPriority reads it');
    delete annotations['autoscaling.knative.dev/maxScale'];
    annotations['autoscaling.knative.dev/class'] = 'kpa.autoscaling.knative.dev';
    await services.apply(service);
    assert.equal(readyOf()?.status, 'True', 'class kpa is what the plane does');
    const applied = configured.length;
    for (const [key, value, message] of [
      ['autoscaling.knative.dev/initial-scale', '3', /initial-scale is not implemented by the local plane/],
      ['autoscaling.knative.dev/activation-scale', '2', /activation-scale is not implemented by the local plane/],
      ['autoscaling.knative.dev/window', '30s', /window is not implemented by the local plane/],
      ['autoscaling.knative.dev/metric', 'rps', /metric "rps": the local plane scales on concurrency only/],
      ['autoscaling.knative.dev/class', 'hpa.autoscaling.knative.dev', /class "hpa.autoscaling.knative.dev"/],
    ] as const) {
      const edited = structuredClone(service);
      (edited.spec as any).template.metadata.annotations[key] = value;
      await services.apply(edited);
      assert.deepEqual([readyOf()?.status, readyOf()?.reason], ['False', 'UnsupportedAnnotation'], key);
      assert.match(readyOf()!.message!, message);
    }
    assert.equal(configured.length, applied, 'nothing it cannot honour reached the activator');
    await services.apply(find('Service'));
    assert.equal(readyOf()?.status, 'True');
  });

  test('the function is withdrawn with the last Service that runs it, and runs again when one comes back', async () => {
    const copy = find('Service');
    copy.metadata.name = `${declaration.name}-copy`;
    await services.apply(copy);
    await services.remove(find('Service'));
    assert.deepEqual(withdrawn, [], 'another Service still runs it');
    const applied = configured.length;
    await services.remove(copy);
    assert.deepEqual(withdrawn, [declaration.name]);
    await services.apply(find('Service'));
    assert.equal(configured.length, applied + 1, 'configured again');
    assert.equal(readyOf()?.status, 'True');
  });
});

describe('PingSources', () => {
  test("the event is the one the local plane's resync sends: type, source, data, function tag", () => {
    const event = pingEvent(find('PingSource', `${declaration.name}-resync`));
    assert.equal(event.type, 'dev.knative.sources.ping');
    assert.equal(event.source, `/apis/v1/namespaces/${NS}/pingsources/${declaration.name}-resync`);
    assert.deepEqual(event.data, {});
    assert.equal((event as unknown as Record<string, string>).opfnfunction, declaration.name);
  });

  test('an unknown time zone or a bad schedule is not Ready, with the reason', () => {
    const brokers = { has: resolvers.brokers.has, url: 'http://broker' };
    const object = find('PingSource', `${declaration.name}-resync`);
    assert.equal(pingPlan(object, brokers).verdict.conditions.at(-1)?.status, 'True');
    (object.spec as any).timezone = 'Europe/Zurich';
    assert.equal(pingPlan(object, brokers).verdict.conditions.at(-1)?.reason, 'TimezoneUnsupported');
    (object.spec as any).timezone = 'UTC';
    (object.spec as any).schedule = '61 * * * *';
    assert.match(pingPlan(object, brokers).verdict.conditions.at(-1)?.message ?? '', /invalid minute field "61"/);
  });

  test('ceOverrides: a bad one is not Ready (InvalidCEOverrides); names are lower-cased on the event', () => {
    const brokers = { has: resolvers.brokers.has, url: 'http://broker' };
    const object = find('PingSource', `${declaration.name}-resync`);
    (object.spec as any).ceOverrides = { extensions: { 'opfn-function': declaration.name } };
    const verdict = pingPlan(object, brokers).verdict.conditions.at(-1);
    assert.equal(verdict?.reason, 'InvalidCEOverrides');
    assert.match(verdict?.message ?? '', /"opfn-function" is not an extension name/);
    (object.spec as any).ceOverrides = { extensions: { OpfnFunction: declaration.name } };
    assert.equal(pingPlan(object, brokers).verdict.conditions.at(-1)?.status, 'True');
    assert.equal((pingEvent(object) as unknown as Record<string, string>).opfnfunction, declaration.name);
  });

  test('cron: next fire times', () => {
    const at = (schedule: string, from: string) => nextFire(parseSchedule(schedule), new Date(from)).toISOString();
    assert.equal(at('*/5 * * * *', '2026-11-23T04:47:30Z'), '2026-11-23T04:50:00.000Z');
    assert.equal(at('*/5 * * * *', '2026-11-23T04:50:00Z'), '2026-11-23T04:55:00.000Z', 'strictly after');
    assert.equal(at('0 * * * *', '2026-11-23T23:59:00Z'), '2026-11-24T00:00:00.000Z');
    assert.equal(at('@daily', '2026-12-31T12:00:00Z'), '2027-01-01T00:00:00.000Z');
    assert.equal(at('30 9 * * 1-5', '2026-11-21T10:00:00Z'), '2026-11-23T09:30:00.000Z', 'Saturday → Monday');
    assert.equal(at('0 0 29 2 *', '2026-03-01T00:00:00Z'), '2028-02-29T00:00:00.000Z');
    assert.equal(at('0 0 1 * 0', '2026-11-23T00:00:00Z'), '2026-11-29T00:00:00.000Z', 'either day field when both are restricted');
    assert.equal(at('15,45 * * * 0', '2026-11-22T10:20:00Z'), '2026-11-22T10:45:00.000Z', '0 is Sunday');
    assert.equal(
      at('0 0 * * 5/2', '2026-11-21T10:00:00Z'),
      '2026-11-27T00:00:00.000Z',
      'a step from a day of week runs to Saturday (6), as in robfig/cron: Friday only',
    );
    assert.equal(at('0 12 * jan-mar mon', '2026-11-23T00:00:00Z'), '2027-01-04T12:00:00.000Z', 'names');
    assert.equal(at('@every 90s', '2026-11-23T00:00:00Z'), '2026-11-23T00:01:30.000Z');
    assert.equal(at('CRON_TZ=UTC 0 0 * * *', '2026-11-23T01:00:00Z'), '2026-11-24T00:00:00.000Z');
    // 7 for Sunday too: robfig/cron, which Knative's PingSource validation uses, refuses it.
    for (const bad of [
      '* * * *',
      '60 * * * *',
      '*/0 * * * *',
      'a * * * *',
      '5-1 * * * *',
      'CRON_TZ=Europe/Zurich 0 0 * * *',
      '0 0 * * 7',
      '0 0 * * 1-7',
    ])
      assert.throws(() => parseSchedule(bad), /schedule/);
  });
});

describe('status conditions', () => {
  const object: KubeObject = {
    metadata: { name: 'x', generation: 3 },
    status: {
      observedGeneration: 3,
      conditions: [{ type: 'Ready', status: 'True', reason: 'Ready', lastTransitionTime: '2026-01-01T00:00:00Z' }],
    },
  };
  test('lastTransitionTime moves only when the status flips; an unchanged status is not written again', () => {
    const same = nextStatus(object, { conditions: [{ type: 'Ready', status: 'True', reason: 'Ready' }] }, '2026-11-23T00:00:00Z');
    assert.equal((same.conditions as any[])[0].lastTransitionTime, '2026-01-01T00:00:00Z');
    assert.ok(sameStatus(object, same));
    const flipped = nextStatus(
      object,
      { conditions: [{ type: 'Ready', status: 'False', reason: 'X', message: 'y' }] },
      '2026-11-23T00:00:00Z',
    );
    assert.equal((flipped.conditions as any[])[0].lastTransitionTime, '2026-11-23T00:00:00Z');
    assert.ok(!sameStatus(object, flipped));
    // A field removed by the merge patch (null) equals an absent one: no endless rewrite.
    assert.ok(sameStatus(object, { ...same, subscriberUri: null }));
  });

  test("the API server's key order is no change: the status as it comes back equals the one written", () => {
    // Served back with keys sorted; written in the controller's order. Compared as text, every
    // write's watch event looked like a change and brought the next write (~60 PATCH/s, idle).
    const served: KubeObject = {
      metadata: { name: 'x', generation: 1 },
      status: {
        conditions: [{ lastTransitionTime: '2026-01-01T00:00:00Z', reason: 'Ready', status: 'True', type: 'Ready' }],
        observedGeneration: 1,
        sinkUri: 'http://a',
      },
    };
    const written = nextStatus(
      served,
      { conditions: [{ type: 'Ready', status: 'True', reason: 'Ready' }], fields: { sinkUri: 'http://a' } },
      '2026-11-23T00:00:00Z',
    );
    assert.ok(sameStatus(served, written));
    assert.ok(!sameStatus(served, { ...written, sinkUri: 'http://b' }));
  });
});

describe('TriggerController', () => {
  const setup = () => {
    const patches: { name: string; status: any }[] = [];
    const kube = {
      mergePatch: async (_kind: unknown, key: { name: string }, patch: { status: unknown }) => {
        patches.push({ name: key.name, status: patch.status });
        return {};
      },
    } as unknown as KubeClient;
    const routes = new Map<string, string>();
    const calls: string[] = [];
    const broker = {
      addTrigger: (trigger: { name: string; subscriber: string; filter?: { attributes: Record<string, string> } }) => {
        calls.push(`add ${trigger.name}`);
        if (Object.keys(trigger.filter?.attributes ?? {}).some((name) => !/^[a-z][a-z0-9]*$/.test(name)))
          throw new Error(`trigger ${trigger.name}: invalid filter`);
        routes.set(trigger.name, trigger.subscriber);
      },
      removeTrigger: (name: string) => {
        calls.push(`remove ${name}`);
        routes.delete(name);
      },
    };
    return { patches, routes, calls, controller: new TriggerController(apiServerStatus(kube), broker, resolvers) };
  };

  test('a route per Trigger; an unchanged Trigger is not re-added; a delete removes the route', async () => {
    const { routes, calls, patches, controller } = setup();
    const object = find('Trigger');
    await controller.apply(object);
    await controller.apply(object);
    assert.deepEqual(calls, [`add ${NS}/${declaration.name}`]);
    assert.equal(routes.get(`${NS}/${declaration.name}`), FUNCTION_URL);
    assert.equal(patches[0].status.conditions.at(-1).status, 'True');
    await controller.remove(object);
    assert.equal(routes.size, 0);
  });

  test("a Trigger the broker refuses: no route, Ready=False Invalid with the broker's reason, no subscriberUri", async () => {
    const { routes, patches, controller } = setup();
    const object = find('Trigger');
    (object.spec as any).filter = { attributes: { 'Bad-Name': 'x' } };
    await controller.apply(object);
    assert.equal(routes.size, 0);
    const status = patches.at(-1)!.status;
    assert.deepEqual([status.conditions.at(-1).reason, status.subscriberUri], ['Invalid', null]);
    assert.match(status.conditions.at(-1).message, /invalid filter/);
  });
});
