// The local control plane: a real etcd + kube-apiserver + kube-controller-manager on loopback
// (control-plane.ts), for `opfn cluster up`, `opfn dev` without a cluster, tests and benchmarks,
// and the provisioning scripts that fetch or build their binaries and Knative's (provision-script.ts).
export { provisionBinaries, startControlPlane, type ControlPlane, type ControlPlaneOptions } from './control-plane.ts';
export { reclaimAbandonedControlPlanes } from './folders.ts';
export { kubectlPathLine } from './kubeconfig.ts';
export { provisionScript, runProvisionScript } from './provision-script.ts';
