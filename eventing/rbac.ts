// The RBAC objects of a function now come from the manifest generator (eventing/manifests/rbac.ts:
// rulesFor, the declared rules plus the implied ones), so the identity the tests and the local
// plane use is the one a cluster gets.
export { rbacObjects, serviceAccountName } from './manifests/rbac.ts';
