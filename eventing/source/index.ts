// The local ApiServerSource: turns changes of Kubernetes objects into the CloudEvents Knative's
// ApiServerSource sends (built by apiserver-events.ts), for the local event plane.
//
// Knative's adapter (knative/eventing pkg/adapter/apiserver) runs one client-go Reflector per
// resource with a cache.Store whose Add/Update/Delete send add/update/delete events and whose
// Replace (called after every list, the first one included) and Resync are no-ops: objects that
// exist at start get no event, changes missed while a watch was down are lost, and a failed send
// is logged and dropped. The functions are level-triggered ("the event is a doorbell"), so this
// source closes those gaps while sending the same events:
//
// - one list+watch loop per (source, resource); ADDED → add, MODIFIED → update, DELETED → delete
//   (Resource mode: the object, its last state for delete); BOOKMARK only moves the
//   resourceVersion on;
// - the initial list emits `add` for every existing object; lists are paginated (limit/continue,
//   pages of LIST_PAGE_SIZE as client-go's pager);
// - a watch that ends, or fails (dropped connection, API server restart, an error), resumes from
//   the last resourceVersion (bookmarks move it on) with backoff and jitter; only 410 Gone (the
//   server no longer has that version) re-lists, as client-go's reflector does, and the re-list
//   emits what changed meanwhile (add / update / delete, against the last known state of every
//   object, kept per loop);
// - a periodic resync emits `update` for every known object;
// - `owner` (spec.owner) keeps only objects whose controller has that apiVersion and kind, as
//   the adapter's controllerFilter does;
// - the sink is retried with backoff until it accepts (an event is never dropped; a retry sends
//   the same event, same id); events of one object are delivered one at a time, in order, while
//   different objects are delivered concurrently up to a bound that pushes back on the watch.
//
// The implementation: types.ts, resource-loop.ts (list+watch), delivery.ts
// (sink retries, per-object order), backoff.ts, source.ts (ApiServerSource). How its events
// compare with Knative 1.23's adapter, event by event: docs/apiserversource.md.
export { ApiServerSource } from './source.ts';
export { LIST_PAGE_SIZE } from './resource-loop.ts';
export type { SourceOptions, SourceResource, SourceSpec, SourceStats } from './types.ts';
export { BACKOFF_MAX_MS, describe, jitter } from './backoff.ts';
